"""`duet eval run` machinery without metric models: resume, bad items, probes, reports, compare, built-in systems."""

from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf

from duet.errors import DuetError
from duet.eval.report import compare_runs
from duet.eval.run import RunConfig, run_eval
from duet.eval.scoring import ScoreConfig
from duet.eval.synth import (
    EngineSynthesizer,
    Synthesis,
    SynthOptions,
    item_seed,
    load_synthesizer,
    register_synthesizer,
)

SR = 16_000
NO_MODELS = ScoreConfig(metrics=())  # durations, flags and timings only: no ASR / speaker / DNSMOS weights


def _tone(seconds, f=220.0):
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32)


@pytest.fixture
def test_set(tmp_path):
    """Five good lines, one malformed line (3), one missing wav (5), one unreadable gt wav (7)."""
    d = tmp_path / "set"
    (d / "wavs").mkdir(parents=True)
    sf.write(str(d / "prompt.wav"), _tone(1.0), SR)
    for i in range(6):
        sf.write(str(d / "wavs" / f"u{i}.wav"), _tone(0.5 + 0.1 * i), SR)
    (d / "wavs" / "broken.wav").write_bytes(b"RIFF....WAVEfmt garbage")
    lines = ["u0|say it|prompt.wav|zero one|wavs/u0.wav",
             "u1|say it|prompt.wav|one two|wavs/u1.wav",
             "u2|malformed",
             "u3|say it|prompt.wav|three four|wavs/u3.wav",
             "u4|say it|prompt.wav|four five|wavs/missing.wav",
             "u5|say it|prompt.wav|five six|wavs/u5.wav",
             "u6|say it|prompt.wav|six seven|wavs/broken.wav",
             "u7|say it|prompt.wav|seven eight|wavs/u2.wav"]
    (d / "meta.lst").write_text("\n".join(lines) + "\n")
    return d


class Scripted:
    """A synthesiser that logs what it is asked for, can fail on one utt, and can be 'interrupted'."""

    name = "scripted"
    reconstructs_reference = False

    def __init__(self, batch_size=2, fail_utt=None, interrupt_at_call=None, probes=False):
        self.batch_size = batch_size
        self.fail_utt = fail_utt
        self.interrupt_at_call = interrupt_at_call
        self.probes = probes
        self.calls: list[list[str]] = []

    def synthesize(self, items):
        self.calls.append([it.utt for it in items])
        if self.interrupt_at_call is not None and len(self.calls) == self.interrupt_at_call:
            raise KeyboardInterrupt  # Ctrl-C in the middle of a batch
        out = []
        for it in items:
            if it.utt == self.fail_utt:
                raise DuetError(f"cannot say {it.target_text!r}")
            n = len(it.target_text.split())
            extra = {}
            if self.probes:
                frames = 10 * n
                extra = dict(stop_prob=[0.01] * frames + [0.9], entropy=[[1.0, 2.0]] * (frames + 1),
                             frame_rate=20.0)
            out.append(Synthesis(_tone(0.4 * n), SR, wall_s=0.02 * n, ttfa_s=0.01, frames=10 * n, frame_bound=100,
                                 ended="bound" if it.utt == "u3" else "stop", **extra))
        return out


def _config(test_set, out, **kw):
    return RunConfig(model=kw.pop("model", "scripted"), test_set=test_set, out_dir=out, score=NO_MODELS,
                     progress=False, **kw)


def test_interrupted_run_resumes_without_redoing_finished_utterances(test_set, tmp_path):
    out = tmp_path / "run"
    first = Scripted(batch_size=2, interrupt_at_call=2)
    with pytest.raises(KeyboardInterrupt):
        run_eval(_config(test_set, out), first)
    assert first.calls == [["u0", "u1"], ["u3", "u5"]]
    done = sorted(p.stem for p in (out / "wavs").glob("*.wav"))
    assert done == ["u0", "u1"]  # the interrupted batch left nothing half-written behind
    assert not list((out / "wavs").glob("*/*.wav"))  # no partial file left in the temp folder either

    second = Scripted(batch_size=2)
    res = run_eval(_config(test_set, out), second)
    assert second.calls == [["u3", "u5"], ["u6", "u7"]]  # only what was missing
    assert res.synthesized == 4 and res.scored == 5
    # u6 was synthesised, but its gt wav (needed for the expected duration) is unreadable: skipped at scoring
    assert [(p["line"], p["stage"]) for p in res.summary["problems"]] == [(3, "parse"), (5, "parse"), (7, "scoring")]

    third = Scripted(batch_size=2)
    res3 = run_eval(_config(test_set, out), third)
    assert third.calls == [] and res3.scored == 0  # everything synthesised and scored: all cached
    assert res3.summary["metrics"] == res.summary["metrics"]


def test_bad_items_are_counted_with_line_numbers(test_set, tmp_path):
    res = run_eval(_config(test_set, tmp_path / "gt", model="ground-truth"), load_synthesizer("ground-truth"))
    s = res.summary
    assert s["set_items"] == 6 and s["metrics"]["utterances"] == 5  # u0 u1 u3 u5 u7 scored; u6 unreadable
    assert s["skipped"] == {"parse": 2, "synthesis": 1, "scoring": 0}
    where = {(p["line"], p["stage"]) for p in s["problems"]}
    assert where == {(3, "parse"), (5, "parse"), (7, "synthesis")}
    msg = next(p["message"] for p in s["problems"] if p["line"] == 7)
    assert "cannot read audio file" in msg and "broken.wav" in msg
    report = (tmp_path / "gt" / "report.md").read_text()
    assert "skipped: 2 at parsing, 1 at synthesis, 0 at scoring" in report and "line 7: synthesis" in report
    # ground truth is the recording itself, sample for sample (16-bit PCM)
    a, _ = sf.read(str(tmp_path / "gt" / "wavs" / "u1.wav"))
    b, _ = sf.read(str(test_set / "wavs" / "u1.wav"))
    np.testing.assert_allclose(a, b, atol=1 / 32768)
    assert s["metrics"]["late_stop"] == {"rate": 0.0, "hits": 0, "count": 5}  # expected = gt duration
    assert s["metrics"]["rtf"] is None  # nothing was synthesised


def test_failing_item_in_a_batch_is_isolated(test_set, tmp_path):
    synth = Scripted(batch_size=4, fail_utt="u3")
    res = run_eval(_config(test_set, tmp_path / "run"), synth)
    assert synth.calls[0] == ["u0", "u1", "u3", "u5"]  # the batch failed, so it was redone one by one
    assert synth.calls[1:5] == [["u0"], ["u1"], ["u3"], ["u5"]]
    synth_problems = [p for p in res.summary["problems"] if p["stage"] == "synthesis"]
    assert [(p["line"], p["utt"]) for p in synth_problems] == [(4, "u3")]
    assert "cannot say" in synth_problems[0]["message"]


def test_report_probes_and_compare(test_set, tmp_path):
    gt = run_eval(_config(test_set, tmp_path / "gt", model="ground-truth"), load_synthesizer("ground-truth"))
    sc = run_eval(_config(test_set, tmp_path / "sc"), Scripted(batch_size=3, probes=True))
    for name in ("report.md", "report.html", "summary.json", "scores.jsonl", "run.json", "plots/duration.png"):
        assert (tmp_path / "sc" / name).is_file(), name
    assert (tmp_path / "sc" / "probes" / "u0.png").is_file() and (tmp_path / "sc" / "probes" / "u0.json").is_file()
    md = (tmp_path / "sc" / "report.md").read_text()
    assert "probes/u3.png" in md.split("## Per-frame probes")[1].splitlines()[2]  # the runaway is shown first
    html = (tmp_path / "sc" / "report.html").read_text()
    assert '<audio controls preload="none" src="wavs/u0.wav">' in html
    m = sc.summary["metrics"]
    assert m["runaway"] == {"rate": 0.2, "hits": 1, "count": 5}
    # "zero one" -> 0.8 s of audio for a 0.5 s recording: not late at k = 2; nothing else is either
    assert m["late_stop"]["hits"] == 0
    assert m["rtf"] == pytest.approx(0.05)  # 0.02 s per word / 0.4 s per word

    cmp = compare_runs([tmp_path / "sc", tmp_path / "gt"])
    assert cmp.systems == ["ground-truth", "scripted"]  # ground truth first
    assert cmp.same_set and cmp.common == 5
    lines = cmp.markdown.splitlines()
    header = next(x for x in lines if x.startswith("| system"))
    assert "RTF" in header and "runaway %" in header
    gt_row = next(x for x in lines if x.startswith("| ground-truth"))
    assert gt_row.split("|")[header.split("|").index(" RTF ")].strip() == "-"
    with pytest.raises(DuetError, match="not a finished run"):
        compare_runs([tmp_path / "nothing"])
    assert gt.summary["set_name"] == "set"


def test_run_dir_refuses_another_model(test_set, tmp_path):
    run_eval(_config(test_set, tmp_path / "run", limit=1), Scripted())
    with pytest.raises(DuetError, match="holds a run of model 'scripted'"):
        run_eval(_config(test_set, tmp_path / "run", model="ground-truth", limit=1), load_synthesizer("gt"))


def test_registry():
    with pytest.raises(DuetError, match=r"unknown model 'nope:x': .* one of .*codec.*gepard.*ground-truth.*mock") as err:
        load_synthesizer("nope:x")
    assert "\n" not in str(err.value)
    with pytest.raises(DuetError, match="needs a codec"):
        load_synthesizer("codec")
    register_synthesizer("scripted-test", lambda arg, opts: Scripted(batch_size=opts.batch_size))
    assert load_synthesizer("scripted-test", SynthOptions(batch_size=3)).batch_size == 3
    with pytest.raises(DuetError):
        register_synthesizer("a:b", lambda arg, opts: Scripted())
    assert item_seed(0, "u1") == item_seed(0, "u1") != item_seed(1, "u1")


def test_engine_synthesizer_detects_runaways(test_set, tmp_path):
    from duet.serve.mock import MockConfig, MockRuntime

    # The mock stops after 4 frames unless the text says "five": then it never stops and hits its bound (12).
    runtime = MockRuntime(MockConfig(max_frames=12), script=lambda r: None if "five" in r.text else 4)
    synth = EngineSynthesizer(runtime, SynthOptions(batch_size=3))
    res = run_eval(_config(test_set, tmp_path / "mock", model="mock"), synth)
    rows = {r["utt"]: r for r in res.rows}
    assert rows["u5"]["runaway"] is True and rows["u5"]["frames"] == 12 and rows["u5"]["ended"] == "bound"
    assert rows["u0"]["runaway"] is False and rows["u0"]["frames"] == 4
    assert all(r["ttfa_s"] is not None and 0 < r["ttfa_s"] < 30 for r in rows.values())
    assert rows["u0"]["duration_s"] == pytest.approx(4 * 320 / 16_000)
    assert res.summary["metrics"]["runaway"]["hits"] == 1
    # every request got a reference (cloning prompt) and its per-utterance seed
    assert all(r.reference is not None for r in runtime.prefilled)
    assert not synth.engine.alive  # run_eval closed it


def test_gepard_from_a_shipped_checkpoint(test_set, tmp_path):
    from checkpoint_testing import write_tiny_gepard

    synth = load_synthesizer(f"gepard:{write_tiny_gepard(tmp_path / 'ckpt')}", SynthOptions(batch_size=2))
    synth.params = replace(synth.params, max_frames=3)  # random weights: keep it short
    res = run_eval(_config(test_set, tmp_path / "gepard", model="gepard-test", limit=2), synth)
    assert len(res.rows) == 2 and all(r["frames"] == 3 and r["ended"] == "bound" for r in res.rows)
    with pytest.raises(DuetError, match="unknown model"):
        load_synthesizer("gepard:no-such-model")


def test_a_bare_checkpoint_directory_is_read_by_its_type(tmp_path):
    from checkpoint_testing import write_tiny_gepard
    from duet.eval.synth import EngineSynthesizer
    from duet.tts.gepard import GepardRuntime

    synth = load_synthesizer(str(write_tiny_gepard(tmp_path / "ckpt")), SynthOptions(batch_size=2))
    assert isinstance(synth, EngineSynthesizer) and isinstance(synth.runtime, GepardRuntime)
    synth.close()
    with pytest.raises(DuetError, match="neither a shipped model"):
        load_synthesizer(str(tmp_path / "nothing-here"))


def test_codec_resynthesis_keeps_lengths(test_set):
    from duet.eval.synth import CodecResynthesis
    from duet.eval.testset import read_meta
    from duet.serve.mock import GEPARD_CHANNEL_LEVELS, MockCodec

    codec = MockCodec(SR, 320, GEPARD_CHANNEL_LEVELS)
    items = [it for it in read_meta(test_set).items if it.utt in ("u0", "u5")]
    out = CodecResynthesis(codec, "codec:mock", SynthOptions(batch_size=2)).synthesize(items)
    # 0.5 s and 1.0 s padded into one batch: each output is cut back to its input's length
    assert [len(s.audio) for s in out] == [8000, 16000]
    assert out[1].frames == 50 and all(s.frame_rate == 50.0 for s in out)
    assert sum(s.wall_s for s in out) > 0


def test_duet_codec_resynthesis_scores_pesq_stoi_mcd(tmp_path, festival):
    """`codec:DIR` through duet.codecs.load: a freshly initialised small codec, saved and loaded back. Its output
    is noise-like, so only the plumbing is checked: the reconstruction-based metrics are computed (or, for PESQ,
    their failure recorded) and land in the summary."""
    registry = pytest.importorskip("duet.codecs.registry")
    small = {"enc_sub_dim": 16, "enc_dim": 32, "enc_blocks": 1, "enc_sub_blocks": 1, "dec_dim": 32, "dec_blocks": 1,
             "dec_sub_dim": 16, "dec_sub_blocks": 1}
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    registry.save_pretrained(registry.build("duet-fsq", small), tmp_path / "codec")
    d = tmp_path / "set"
    d.mkdir()
    festival("A short sentence to encode and decode.", "kal", d / "g.wav")
    (d / "meta.lst").write_text("u0|||A short sentence to encode and decode.|g.wav\n")
    synth = load_synthesizer(f"codec:{tmp_path / 'codec'}", SynthOptions(batch_size=2))
    assert synth.name == "codec:codec" and synth.reconstructs_reference
    res = run_eval(RunConfig(model=f"codec:{tmp_path / 'codec'}", test_set=d, out_dir=tmp_path / "run",
                             score=ScoreConfig(metrics=("signal",)), progress=False), synth)
    row = res.rows[0]
    gt, sr = sf.read(str(d / "g.wav"))
    out, out_sr = sf.read(str(tmp_path / "run" / "wavs" / "u0.wav"))
    assert out_sr == 22_050 and abs(len(out) / out_sr - len(gt) / sr) < 1e-3  # same duration, codec's rate
    assert 0.0 <= row["stoi"] <= 1.0 and row["mcd"] > 0
    assert row.get("pesq") is not None or "pesq" in row["errors"]
    assert res.summary["metrics"]["stoi"] == pytest.approx(row["stoi"]) and row["wall_s"] > 0
    with pytest.raises(DuetError, match="no codec named"):
        load_synthesizer("codec:no-such-codec")


def test_edited_line_is_synthesised_again(test_set, tmp_path):
    out = tmp_path / "run"
    run_eval(_config(test_set, out, limit=2), Scripted())
    meta = test_set / "meta.lst"
    meta.write_text(meta.read_text().replace("one two", "one two three"))  # u1's target text changed
    again = Scripted()
    run_eval(_config(test_set, out, limit=2), again)
    assert again.calls == [["u1"]]


def test_a_cached_similarity_is_rescored_when_its_other_speakers_change(tmp_path):
    """``sim_other`` compares with other speakers' prompts, which change with the set's speakers.json and --limit:
    they are part of the cache key when similarity is scored (and only then)."""
    from duet.eval.run import score_set
    from duet.eval.testset import TestItem

    class Counting:
        def __init__(self, metrics, impostors):
            self.config, self.impostors, self.calls = ScoreConfig(metrics=metrics), impostors, 0

        def score(self, item, wav, synthesis, reconstructs_reference):
            self.calls += 1
            return {"utt": item.utt}

    out = tmp_path / "run"
    (out / "wavs").mkdir(parents=True)
    sf.write(str(out / "wavs" / "u0.wav"), _tone(0.3), SR)
    items = [TestItem(utt="u0", prompt_text="", prompt_wav=None, target_text="hi", gt_wav=None, line=1)]
    runs = [(("sim",), {"u0": [tmp_path / "a.wav"]}, 1), (("sim",), {"u0": [tmp_path / "a.wav"]}, 0),
            (("sim",), {"u0": [tmp_path / "b.wav"]}, 1), (("wer",), {"u0": [tmp_path / "a.wav"]}, 1),
            (("wer",), {"u0": [tmp_path / "c.wav"]}, 0)]  # without similarity the other speakers do not matter
    for metrics, impostors, expected in runs:
        scorer = Counting(metrics, impostors)
        score_set(scorer, items, out, reconstructs_reference=False, progress=False)
        assert scorer.calls == expected, (metrics, impostors)


def test_sets_that_name_their_speakers_are_summarised_per_speaker(test_set, tmp_path):
    import json

    (test_set / "speakers.json").write_text(json.dumps({"u0": "anna", "u1": "anna", "u3": "bob", "u5": "bob"}))
    out = tmp_path / "run"
    res = run_eval(_config(test_set, out), Scripted())
    per = res.summary["per_speaker"]
    assert sorted(per) == ["anna", "bob"]  # u7 is in no speaker's list
    rows = {r["utt"]: r for r in res.rows}
    for name, utts in (("anna", ["u0", "u1"]), ("bob", ["u3", "u5"])):
        assert per[name]["utterances"] == 2
        assert per[name]["audio_s"] == pytest.approx(sum(rows[u]["duration_s"] for u in utts))
    report = (out / "report.md").read_text()
    assert "## Per speaker" in report and "| anna | 2 |" in report and "| bob | 2 |" in report


def test_per_speaker_gap_is_sim_minus_sim_other():
    from duet.eval.report import _per_speaker_table

    table = _per_speaker_table({"anna": {"utterances": 3, "wer": 0.1, "sim": 0.8, "sim_other": 0.5},
                                "bob": {"utterances": 1, "wer": None, "sim": None, "sim_other": None}})
    assert "| anna | 3 | 10.00 | 0.800 | 0.500 | 0.300 |" in table and "| bob | 1 | - | - | - | - |" in table
