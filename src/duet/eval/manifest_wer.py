"""WER of the audio listed in a duet manifest: transcribe, score per utterance, aggregate per source and voice.

The manifest is the corpus manifest of :mod:`duet.data.manifest` (JSON Lines; ``path`` relative to the
manifest's directory), read with that module so there is one parser for the format.

Only English entries (``language == "en"``) are scored. The default ASR model is English-only Whisper tiny.en,
whose transcript of other languages is meaningless, so a CER for them would measure the ASR, not the TTS; they
are counted per language in ``skipped`` instead of silently vanishing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from duet.data.manifest import Utterance, audio_path, read_manifest
from duet.errors import DuetError
from duet.metrics.wer import AggregateRate, ErrorRate, aggregate, word_error

SCORED_LANGUAGE = "en"


@dataclass(frozen=True)
class UtteranceWER:
    entry: Utterance
    audio: Path  # resolved against the manifest's directory
    transcript: str  # raw ASR output
    error: ErrorRate


@dataclass(frozen=True)
class ManifestWER:
    utterances: list[UtteranceWER]
    per_source: dict[str, AggregateRate]
    overall: AggregateRate
    skipped: dict[str, int] = field(default_factory=dict)  # language -> entries not scored
    per_speaker: dict[str, AggregateRate] = field(default_factory=dict)  # each voice (manifest ``speaker``)


def select_entries(
    entries: list[Utterance], split: str | None, limit: int | None
) -> tuple[list[Utterance], dict[str, int]]:
    """Keep ``split`` (None = every split), then English only, then the first ``limit``.

    Returns (entries to score, count of other-language entries per language within the split).
    """
    if split is not None:
        in_split = [e for e in entries if e.split == split]
        if not in_split:
            have = sorted({e.split for e in entries})
            raise DuetError(f"no manifest entries in split {split!r} (splits present: {', '.join(have) or 'none'})")
        entries = in_split
    scored = [e for e in entries if e.language == SCORED_LANGUAGE]
    skipped = dict(Counter(e.language for e in entries if e.language != SCORED_LANGUAGE))
    if not scored:
        raise DuetError(f"no {SCORED_LANGUAGE!r} entries to score (languages present: {', '.join(skipped)})")
    if limit is not None:
        if limit < 1:
            raise DuetError(f"--limit must be at least 1, got {limit}")
        scored = scored[:limit]
    return scored, skipped


def score_transcripts(
    entries: list[Utterance],
    audio: list[Path],
    transcripts: list[str],
    skipped: dict[str, int] | None = None,
) -> ManifestWER:
    """Per-utterance WER, mean-of-rates per source, per voice and overall (Seed-TTS-eval aggregation)."""
    utts = [
        UtteranceWER(e, path, hyp, word_error(e.text, hyp))
        for e, path, hyp in zip(entries, audio, transcripts, strict=True)
    ]
    by_source: dict[str, list[ErrorRate]] = defaultdict(list)
    by_speaker: dict[str, list[ErrorRate]] = defaultdict(list)
    for u in utts:
        by_source[u.entry.source].append(u.error)
        by_speaker[u.entry.speaker].append(u.error)
    return ManifestWER(
        utterances=utts,
        per_source={src: aggregate(rates) for src, rates in sorted(by_source.items())},
        overall=aggregate(u.error for u in utts),
        skipped=dict(skipped or {}),
        per_speaker={spk: aggregate(rates) for spk, rates in sorted(by_speaker.items())},
    )


def evaluate_manifest(
    manifest: str | Path, transcriber, split: str | None = "test", limit: int | None = None, progress: bool = True
) -> ManifestWER:
    """Transcribe the selected entries of ``manifest`` with ``transcriber`` (an :class:`asr.Transcriber`)."""
    entries, skipped = select_entries(read_manifest(manifest), split, limit)
    audio = [audio_path(manifest, e) for e in entries]
    missing = [p for p in audio if not p.is_file()]
    if missing:  # fail before minutes of transcription, not in the middle
        raise DuetError(f"{len(missing)} audio file(s) of {manifest} are missing, e.g. {missing[0]}")
    transcripts = transcriber.transcribe_paths(audio, progress=progress)
    return score_transcripts(entries, audio, transcripts, skipped)


def format_table(result: ManifestWER) -> str:
    """Plain-text table: one row per source and an ``all`` row, then one row per voice when a source has
    several; rates in percent."""
    rows = [(src, agg) for src, agg in result.per_source.items()] + [("all", result.overall)]
    if len(result.per_speaker) > len(result.per_source):
        rows += [(f"voice {spk}", agg) for spk, agg in result.per_speaker.items()]
    width = max(len("source"), *(len(src) for src, _ in rows))
    lines = [f"{'source':<{width}}  {'n':>5}  {'WER %':>7}  {'pooled %':>8}"]
    lines += [f"{src:<{width}}  {a.count:>5}  {100 * a.mean:>7.2f}  {100 * a.pooled:>8.2f}" for src, a in rows]
    if result.skipped:
        lines.append("not scored (non-English): " + ", ".join(f"{k}={v}" for k, v in sorted(result.skipped.items())))
    return "\n".join(lines)


def to_json(result: ManifestWER) -> dict:
    """JSON-ready summary plus every utterance's reference, transcript and error counts."""
    return {
        "aggregation": "mean of per-utterance WER (Seed-TTS-eval); pooled = corpus-level, for reference",
        "overall": asdict(result.overall),
        "per_source": {src: asdict(a) for src, a in result.per_source.items()},
        "per_speaker": {spk: asdict(a) for spk, a in result.per_speaker.items()},
        "skipped_languages": result.skipped,
        "utterances": [
            {
                "id": u.entry.id,
                "source": u.entry.source,
                "speaker": u.entry.speaker,
                "path": str(u.audio),
                "text": u.entry.text,
                "transcript": u.transcript,
                "wer": u.error.rate,
                **asdict(u.error),
            }
            for u in result.utterances
        ],
    }
