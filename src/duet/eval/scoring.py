"""Per-utterance scores of a run and their aggregation over a set, from the metrics of ``duet.metrics``.

Metrics (each can be switched off with ``ScoreConfig.metrics``):
- ``wer``: Whisper transcript (``duet.metrics.asr``) scored against the target text: WER and CER with Seed-TTS-eval
  normalisation (``duet.metrics.wer``), and the deletions behind the skipped-words rate (``short_register``);
- ``sim``: speaker similarity of the output to the prompt wav (Resemblyzer, or WavLM x-vectors from a local
  checkpoint: ``speaker="wavlm:DIR"``); where the set names its speakers (``speakers.json``), also ``sim_other``:
  the mean similarity to prompts of other speakers (``testset.impostor_prompts``), the floor ``sim`` is read
  against (Luna §5: a cloned voice should be closer to its prompt than to anyone else's);
- ``dnsmos``: DNSMOS P.835 SIG / BAK / OVRL and P.808 (``duet.metrics.dnsmos``);
- ``signal``: PESQ-WB, STOI and MCD (``duet.metrics.signal``) against ``gt_wav``, only for systems that reconstruct
  it (codecs).
Always: duration, expected duration and the late-stop flag, runaway flag, wall time, RTF and time to first audio
when the synthesiser reported them.

Aggregation is the mean of per-utterance values (Seed-TTS-eval's convention for WER/SIM), except RTF, which is
total synthesis time over total audio duration, and the pooled error rates reported beside the means. Where the set
has ground truth, ``duration_mae_s`` is the mean absolute difference between output and recording durations.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from duet.errors import DuetError
from duet.eval.short_register import (
    DEFAULT_LATE_FACTOR,
    expected_duration,
    flag_rate,
    is_late_stop,
    is_runaway,
    skipped_words,
)
from duet.eval.testset import TestItem
from duet.metrics.models import MetricModels, check_speaker_model

METRICS = ("wer", "sim", "dnsmos", "signal")


@dataclass(frozen=True)
class ScoreConfig:
    metrics: tuple[str, ...] = METRICS
    asr_model: str | None = None  # CTranslate2 Whisper directory; None = the bundled tiny.en
    language: str = "en"
    speaker: str = "resemblyzer"  # or "wavlm:DIR"
    late_factor: float = DEFAULT_LATE_FACTOR
    device: str = "cpu"

    def __post_init__(self) -> None:
        unknown = set(self.metrics) - set(METRICS)
        if unknown:
            raise DuetError(f"unknown metric(s) {', '.join(sorted(unknown))}; known: {', '.join(METRICS)}")
        check_speaker_model(self.speaker)
        if self.late_factor <= 1.0:
            raise DuetError(f"the late-stop factor must exceed 1, got {self.late_factor}")

    def fingerprint(self) -> str:
        """What a cached score depends on (the device does not change a score)."""
        d = asdict(self)
        d.pop("device")
        d["metrics"] = sorted(d["metrics"])
        return json.dumps(d, sort_keys=True)


def _duration(path: Path) -> float:
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except Exception as err:  # soundfile raises several types for unreadable files
        raise DuetError(f"cannot read audio file {path}: {err}") from err
    return info.frames / info.samplerate


class Scorer(MetricModels):
    """The metric models (``duet.metrics.models``, loaded on first use) and prompt embeddings cached by path."""

    def __init__(self, config: ScoreConfig = ScoreConfig(), impostors: dict[str, list[Path]] | None = None):
        super().__init__(config.asr_model, config.language, config.speaker, config.device)
        self.config = config
        self.impostors = impostors or {}  # utt -> prompt wavs of other speakers (sim_other)
        self._prompt_embeddings: dict[Path, Any] = {}

    def _prompt_embedding(self, path: Path):
        if path not in self._prompt_embeddings:
            self._prompt_embeddings[path] = self.speaker.embed_path(path)
        return self._prompt_embeddings[path]

    def score(self, item: TestItem, wav: Path, synthesis: dict[str, Any], reconstructs_reference: bool) -> dict:
        """All configured metrics of one output wav.

        Raises DuetError for a problem with the inputs (an unreadable output, prompt or gt file; a target text
        that is empty after normalisation): the utterance is then skipped and reported. A metric that cannot be
        computed on the output itself (no speech left after voice-activity trimming, PESQ finding no utterance)
        is recorded as None with its reason in ``errors`` instead: dropping the utterance would flatter a system
        whose output is silence.
        """
        from duet.audio import load_audio
        from duet.metrics.wer import char_error, normalize_text, word_error

        metrics = set(self.config.metrics)
        if not normalize_text(item.target_text):
            raise DuetError(f"target text {item.target_text!r} is empty after normalisation")
        audio, sr = load_audio(wav)
        duration = len(audio) / sr
        gt_duration = _duration(item.gt_wav) if item.gt_wav is not None else None
        prompt_duration = _duration(item.prompt_wav) if item.prompt_wav is not None else None
        prompt_embedding = None
        if "sim" in metrics and item.prompt_wav is not None:
            prompt_embedding = self._prompt_embedding(item.prompt_wav)
        reference = None
        if "signal" in metrics and reconstructs_reference and item.gt_wav is not None:
            reference, _ = load_audio(item.gt_wav, sample_rate=sr)
        expected, expected_from = expected_duration(item.target_text, gt_duration, item.prompt_text,
                                                    prompt_duration)
        wall, ttfa = synthesis.get("wall_s"), synthesis.get("ttfa_s")
        row: dict[str, Any] = {
            "utt": item.utt,
            "line": item.line,
            "target_text": item.target_text,
            "duration_s": duration,
            "expected_s": expected,
            "expected_from": expected_from,
            "late_stop": is_late_stop(duration, expected, self.config.late_factor),
            "runaway": is_runaway(synthesis.get("ended")),
            "ended": synthesis.get("ended"),
            "frames": synthesis.get("frames"),
            "frame_bound": synthesis.get("frame_bound"),
            "wall_s": wall,
            "rtf": wall / duration if wall is not None else None,
            "ttfa_s": ttfa,
            "errors": {},
        }

        def attempt(name: str, fn) -> None:
            try:
                row.update(fn())
            except DuetError as err:
                row["errors"][name] = str(err)

        def asr() -> dict[str, Any]:
            hyp = self.asr.transcribe(audio, sr)
            w, c = word_error(item.target_text, hyp), char_error(item.target_text, hyp)
            return dict(transcript=hyp, wer=w.rate, wer_errors=w.errors, ref_words=w.ref_len,
                        substitutions=w.substitutions, deletions=w.deletions, insertions=w.insertions,
                        cer=c.rate, cer_errors=c.errors, ref_chars=c.ref_len)

        def dnsmos() -> dict[str, Any]:
            d = self.dnsmos.score(audio, sr)
            return dict(dnsmos_ovrl=d.ovrl, dnsmos_sig=d.sig, dnsmos_bak=d.bak, dnsmos_p808=d.p808)

        if "wer" in metrics:
            attempt("wer", asr)
        def sim() -> dict[str, Any]:
            out = self.speaker.embed(audio, sr)
            row = {"sim": self.speaker.similarity(out, prompt_embedding)}
            others = [self.speaker.similarity(out, self._prompt_embedding(p)) for p in self.impostors.get(item.utt, ())]
            if others:
                row["sim_other"] = sum(others) / len(others)
            return row

        if prompt_embedding is not None:
            attempt("sim", sim)
        if "dnsmos" in metrics:
            attempt("dnsmos", dnsmos)
        if reference is not None:
            from duet.metrics.signal import mel_cepstral_distance, pesq_wb, stoi

            attempt("pesq", lambda: {"pesq": pesq_wb(reference, audio, sr)})
            attempt("stoi", lambda: {"stoi": stoi(reference, audio, sr)})
            attempt("mcd", lambda: {"mcd": mel_cepstral_distance(reference, audio, sr)})
        return row


# --------------------------------------------------------------------------------------------------------------
# Aggregation


def _values(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None and math.isfinite(float(r[key]))]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def summarize(rows: Iterable[dict]) -> dict[str, Any]:
    """Set-level numbers of a list of score rows (one per utterance); None where no utterance has the metric."""
    rows = list(rows)
    out: dict[str, Any] = {"utterances": len(rows), "audio_s": sum(r["duration_s"] for r in rows)}
    out["counts"] = {}  # utterances behind each mean (fewer than "utterances" where a metric failed)
    for key in ("wer", "cer", "sim", "sim_other", "dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak", "dnsmos_p808", "pesq",
                "stoi", "mcd"):
        values = _values(rows, key)
        out[key], out["counts"][key] = _mean(values), len(values)
    for key, errors, ref in (("wer", "wer_errors", "ref_words"), ("cer", "cer_errors", "ref_chars")):
        scored = [r for r in rows if r.get(errors) is not None]
        out[f"{key}_pooled"] = (sum(r[errors] for r in scored) / sum(r[ref] for r in scored)) if scored else None
    # Length against the recording of the same text (Luna's duration predictor, Gepard's stop head): mean |error|.
    gt = [abs(r["duration_s"] - r["expected_s"]) for r in rows if r.get("expected_from") == "gt"]
    out["duration_mae_s"], out["counts"]["duration_mae_s"] = _mean(gt), len(gt)
    timed = [r for r in rows if r.get("wall_s") is not None]
    out["rtf"] = (sum(r["wall_s"] for r in timed) / sum(r["duration_s"] for r in timed)) if timed else None
    ttfa = _values(rows, "ttfa_s")
    out["ttfa_mean_s"], out["ttfa_p50_s"], out["ttfa_p90_s"] = _mean(ttfa), _quantile(ttfa, 0.5), _quantile(ttfa, 0.9)
    for key in ("runaway", "late_stop"):
        rate = flag_rate([r.get(key) for r in rows])
        out[key] = {"rate": rate.rate, "hits": rate.hits, "count": rate.count}
    scored = [r for r in rows if r.get("deletions") is not None]
    skips = skipped_words([r["deletions"] for r in scored], [r["ref_words"] for r in scored])
    failed: dict[str, int] = {}
    for r in rows:
        for name in r.get("errors") or {}:
            failed[name] = failed.get(name, 0) + 1
    out["metric_errors"] = failed  # metric -> utterances where it could not be computed on the output
    out["skipped_words"] = {"deletion_rate": skips.deletion_rate, "utterance_rate": skips.utterance_rate,
                            "deleted": skips.deleted, "reference_words": skips.reference_words,
                            "utterances_with_deletion": skips.utterances_with_deletion}
    return out
