"""Random fixed-length audio crops from a corpus manifest, for codec training.

Every clip of the chosen split is read once, resampled to the codec's rate once and kept in memory as 16-bit PCM
(~170 MB per hour at 24 kHz: ten hours fit twice over, for two codecs training side by side).
Crops are drawn with an explicit ``torch.Generator`` whose state the checkpoint saves, so a resumed run sees
exactly the batches it would have seen.

Manifest lines (``data/base/manifest.jsonl``): JSON objects with at least ``path`` (relative to the manifest's
directory) and ``split`` (train / val / test); ``id``, ``speaker``, ``text`` are used when present.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from duet.audio import load_audio
from duet.errors import DuetError


@dataclass(frozen=True)
class ManifestEntry:
    id: str
    path: Path
    split: str
    speaker: str
    text: str
    duration: float


def read_manifest(manifest: str | Path, split: str | None = None) -> list[ManifestEntry]:
    """Entries of a JSONL manifest (optionally one split), paths resolved against the manifest's directory."""
    manifest = Path(manifest)
    if not manifest.is_file():
        raise DuetError(f"manifest {manifest} does not exist")
    entries = []
    for n, line in enumerate(manifest.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            entry = ManifestEntry(id=str(row.get("id", n)), path=manifest.parent / row["path"],
                                  split=row.get("split", "train"), speaker=str(row.get("speaker", "")),
                                  text=row.get("text", ""), duration=float(row.get("duration", 0.0)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise DuetError(f"{manifest}:{n}: not a manifest line ({err})") from err
        if split is None or entry.split == split:
            entries.append(entry)
    return entries


class AudioCrops:
    """In-memory clips at one sample rate; ``sample`` draws a batch of random crops (B, S)."""

    def __init__(self, clips: list[np.ndarray], sample_rate: int):
        clips = [c for c in clips if len(c) > 0]
        if not clips:
            raise DuetError("no audio to train on")
        # int16 halves the memory of float32; the sources are 16-bit PCM, so little is lost after resampling.
        self.clips = [c if c.dtype == np.int16 else _to_int16(c) for c in clips]
        self.sample_rate = sample_rate
        lengths = torch.tensor([len(c) for c in clips], dtype=torch.float64)
        self.weights = lengths / lengths.sum()  # longer clips hold more crops: sample them proportionally

    @classmethod
    def from_manifest(cls, manifest: str | Path, sample_rate: int, split: str = "train", max_items: int | None = None,
                      progress: bool = True) -> "AudioCrops":
        entries = read_manifest(manifest, split)
        if not entries:
            raise DuetError(f"manifest {manifest} has no '{split}' entries")
        entries = entries[:max_items] if max_items else entries
        from tqdm import tqdm

        # Convert each clip as it arrives: holding the float32 corpus first would double the peak memory (and
        # glibc keeps the freed heap, so the process would stay that large).
        clips = [_to_int16(load_audio(e.path, sample_rate)[0])
                 for e in tqdm(entries, desc=f"load {split} audio @ {sample_rate} Hz", disable=not progress,
                               mininterval=10)]
        return cls(clips, sample_rate)

    @property
    def seconds(self) -> float:
        return sum(len(c) for c in self.clips) / self.sample_rate

    def sample(self, batch: int, crop: int, generator: torch.Generator, gain_db: tuple[float, float] = (-12.0, 0.0)
               ) -> torch.Tensor:
        """(B, crop) float32; clips shorter than ``crop`` are zero-padded at a random position.

        A random gain in ``gain_db`` (relative to the clip's level) keeps the codec from learning one loudness.
        """
        idx = torch.multinomial(self.weights, batch, replacement=True, generator=generator)
        u = torch.rand(batch, 2, generator=generator, dtype=torch.float64)
        out = torch.zeros(batch, crop)
        for b, i in enumerate(idx.tolist()):
            clip = self.clips[i]
            n = len(clip)
            if n >= crop:
                start = int(u[b, 0] * (n - crop + 1))
                out[b] = torch.from_numpy(clip[start : start + crop].astype(np.float32))
            else:
                at = int(u[b, 0] * (crop - n + 1))
                out[b, at : at + n] = torch.from_numpy(clip.astype(np.float32))
        out = out / 32768.0
        gain = 10 ** ((gain_db[0] + (gain_db[1] - gain_db[0]) * u[:, 1]) / 20)
        out = out * gain.float()[:, None]
        peak = out.abs().amax(dim=1, keepdim=True).clamp(min=1.0)
        return out / peak  # never clip: training targets stay inside [-1, 1]

    def fixed(self, count: int, crop: int) -> torch.Tensor:
        """Deterministic (count, crop) crops from the first clips (for validation): each clip's middle."""
        out = torch.zeros(min(count, len(self.clips)), crop)
        for b, clip in enumerate(self.clips[: out.shape[0]]):
            n = len(clip)
            start = max(0, (n - crop) // 2)
            piece = clip[start : start + crop]
            out[b, : len(piece)] = torch.from_numpy(piece.astype(np.float32) / 32768.0)
        return out


def _to_int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16)
