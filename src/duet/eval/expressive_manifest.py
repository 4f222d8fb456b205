"""Expressive measures over a corpus manifest: prosodic features of its labelled readings (to train and test the
emotion classifier) and event precision / recall / F1 of the detector against its tagged events.

Only rows with an ``emotion`` (the readings of an expressive corpus, ``duet.data.expressive``) take part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.audio import load_audio
from duet.data.manifest import Utterance, audio_path, read_manifest
from duet.eval.event_detect import DetectorConfig, detect_events
from duet.eval.event_scores import EventCounts, match_events, total
from duet.eval.prosody import prosodic_features
from duet.text.tags import split_tags


def labelled(manifest: str | Path, split: str | None, limit: int | None = None) -> list[Utterance]:
    """The rows with an emotion, of ``split`` (None: all), the first ``limit`` of them."""
    rows = [u for u in read_manifest(manifest) if u.emotion and (split is None or u.split == split)]
    return rows[:limit] if limit is not None else rows


def features_of(manifest: str | Path, rows: Sequence[Utterance], progress: bool = False) -> np.ndarray:
    """(N, K) prosodic features of ``rows`` (words counted in their spoken text, tags left out)."""
    from tqdm import tqdm

    out = []
    for u in tqdm(rows, desc="features", unit="utt", disable=not progress):
        audio, sr = load_audio(audio_path(manifest, u))
        out.append(prosodic_features(audio, sr, len(split_tags(u.text).words)))
    return np.array(out).reshape(len(rows), -1)


@dataclass(frozen=True)
class EventReport:
    overall: EventCounts  # names must match
    located: EventCounts  # any name: where events are
    per_event: dict[str, EventCounts]  # by reference name (detections counted where their name is that event)


def event_report(manifest: str | Path, rows: Sequence[Utterance], tolerance: float = 0.25,
                 config: DetectorConfig = DetectorConfig(), progress: bool = False) -> EventReport:
    from tqdm import tqdm

    named, anywhere = [], []
    per: dict[str, list[EventCounts]] = {}
    for u in tqdm(rows, desc="events", unit="utt", disable=not progress):
        audio, sr = load_audio(audio_path(manifest, u))
        found = detect_events(audio, sr, config)
        named.append(match_events(u.events, found, tolerance))
        anywhere.append(match_events(u.events, found, tolerance, same_name=False))
        for name in config.events:
            ref = [e for e in u.events if e[0] == name]
            det = [e for e in found if e[0] == name]
            per.setdefault(name, []).append(match_events(ref, det, tolerance))
    return EventReport(total(named), total(anywhere), {k: total(v) for k, v in per.items()})
