"""Short-register flags and set-level aggregation on hand-computed cases."""

import pytest

from duet.errors import DuetError
from duet.eval.scoring import ScoreConfig, summarize
from duet.eval.short_register import expected_duration, flag_rate, is_late_stop, is_runaway, skipped_words, text_chars


def test_expected_duration_prefers_ground_truth_then_prompt_rate():
    assert expected_duration("hello", gt_duration_s=0.8, prompt_text="ab cd", prompt_duration_s=2.0) == (0.8, "gt")
    # prompt "Good day!" -> "goodday" = 7 chars in 1.4 s = 0.2 s/char; target "Hi, Bob." -> "hibob" = 5 chars
    exp, how = expected_duration("Hi, Bob.", prompt_text="Good day!", prompt_duration_s=1.4)
    assert how == "prompt-rate" and exp == pytest.approx(1.0)
    assert expected_duration("hello") == (None, None)
    assert text_chars("Don't stop!") == 9  # "don't" (5, apostrophe kept) + "stop" (4)


def test_flags():
    assert is_late_stop(2.1, 1.0) is True and is_late_stop(2.0, 1.0) is False  # strictly more than k x expected
    assert is_late_stop(3.5, 1.0, factor=4.0) is False and is_late_stop(5.0, None) is None
    assert is_runaway("bound") is True and is_runaway("stop") is False and is_runaway(None) is None
    with pytest.raises(DuetError):
        is_runaway("cancelled")
    with pytest.raises(DuetError):
        is_late_stop(1.0, 1.0, factor=1.0)
    r = flag_rate([True, False, None, True])
    assert (r.hits, r.count, r.rate) == (2, 3, pytest.approx(2 / 3))
    assert flag_rate([None]).rate is None
    s = skipped_words([0, 2, 1], [4, 4, 2])
    assert (s.deleted, s.reference_words, s.deletion_rate, s.utterance_rate) == (3, 10, 0.3, pytest.approx(2 / 3))


def _row(utt, wer, errors, ref, dur, wall=None, ttfa=None, runaway=None, late=False, deletions=0, sim=None):
    return {"utt": utt, "wer": wer, "wer_errors": errors, "ref_words": ref, "cer": None, "duration_s": dur,
            "wall_s": wall, "ttfa_s": ttfa, "runaway": runaway, "late_stop": late, "deletions": deletions,
            "sim": sim, "errors": {} if sim is not None else {"sim": "no speech"}}


def test_summarize_hand_computed():
    rows = [_row("a", 0.5, 1, 2, 1.0, wall=0.5, ttfa=0.1, runaway=False, deletions=1, sim=0.8),
            _row("b", 0.0, 0, 8, 3.0, wall=0.5, ttfa=0.3, runaway=True, late=True, deletions=0, sim=0.6),
            _row("c", 1.0, 2, 2, 2.0, wall=1.0, ttfa=0.2, runaway=False, deletions=2)]
    s = summarize(rows)
    assert s["utterances"] == 3 and s["audio_s"] == 6.0
    assert s["wer"] == pytest.approx(0.5)  # mean of 0.5, 0, 1
    assert s["wer_pooled"] == pytest.approx(3 / 12)
    assert s["rtf"] == pytest.approx(2.0 / 6.0)  # total wall / total audio, not the mean of ratios
    assert s["ttfa_p50_s"] == pytest.approx(0.2) and s["ttfa_mean_s"] == pytest.approx(0.2)
    assert s["runaway"] == {"rate": pytest.approx(1 / 3), "hits": 1, "count": 3}
    assert s["late_stop"]["hits"] == 1
    assert s["skipped_words"]["deletion_rate"] == pytest.approx(3 / 12)
    assert s["skipped_words"]["utterances_with_deletion"] == 2
    assert s["sim"] == pytest.approx(0.7) and s["counts"]["sim"] == 2 and s["metric_errors"] == {"sim": 1}
    assert s["pesq"] is None and s["cer_pooled"] is None
    assert s["duration_mae_s"] is None and s["counts"]["duration_mae_s"] == 0  # no row knows its recording
    rows[0].update(expected_s=1.5, expected_from="gt")  # 1.0 s for a 1.5 s recording
    rows[1].update(expected_s=2.0, expected_from="gt")  # 3.0 s for 2.0 s
    rows[2].update(expected_s=9.0, expected_from="prompt-rate")  # an estimate, not a recording: left out
    s = summarize(rows)
    assert s["duration_mae_s"] == pytest.approx(0.75) and s["counts"]["duration_mae_s"] == 2


def test_score_config_validation():
    with pytest.raises(DuetError, match="unknown metric"):
        ScoreConfig(metrics=("wer", "mos"))
    with pytest.raises(DuetError, match="wavlm:DIR"):
        ScoreConfig(speaker="ecapa")
    a, b = ScoreConfig(metrics=("sim", "wer")), ScoreConfig(metrics=("wer", "sim"), device="cuda")
    assert a.fingerprint() == b.fingerprint()  # order and device do not change a score
