"""A fake corpus for the training-recipe tests: WAVs + manifest, encoded into real code shards by a fake codec.

The codec is an encode-only stand-in of any shape (Gepard's packed FSQ, 8 x 2016 at 40 Hz; Luna's RVQ, 8 x 2048 at
25 Hz); its codes are a hash of the audio, so every utterance gets different, reproducible codes, written through
``duet.data.shards`` exactly as ``duet data encode`` writes them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from duet.codecs.base import EncodeResult
from duet.data.manifest import Utterance, write_manifest
from duet.data.shards import encode_corpus

SAMPLE_RATE = 8000

# (id, text, language, split, frames)
UTTERANCES = [
    ("slt-001", "The quick brown fox jumps over the lazy dog.", "en", "train", 14),
    ("slt-002", "I have 3 cats and 2 dogs.", "en", "train", 12),
    ("slt-003", "Yes.", "en", "train", 5),
    ("slt-004", "Hello there!", "en", "train", 6),
    ("slt-005", "She sells sea shells by the sea shore.", "en", "train", 13),
    ("slt-006", "Dr. Smith paid $4.50 for coffee.", "en", "train", 12),
    ("kal-001", "No.", "en", "train", 4),
    ("kal-002", "A stitch in time saves nine.", "en", "train", 10),
    ("kal-003", "Good morning, how are you today?", "en", "train", 11),
    ("kal-004", "Where is the station?", "en", "train", 8),
    ("kal-005", "Thank you.", "en", "train", 5),
    ("kal-006", "This one is far too long to keep in a batch of this budget.", "en", "train", 120),
    ("esp-001", "Hola, buenos dias.", "es", "train", 7),
    ("esp-002", "Tengo 3 gatos.", "es", "train", 7),
    ("slt-101", "Please call me back later.", "en", "val", 9),
    ("kal-101", "Okay.", "en", "val", 4),
    ("slt-201", "The test sentence stays hidden.", "en", "test", 9),
]
MISSING = ("slt-007", "This one was never encoded.", "en", "train", 9)


class HashCodec:
    """Encode-only fake codec: code (k, t) = a hash of frame t's samples, below codebook k's size."""

    sample_rate = SAMPLE_RATE

    def __init__(self, codebook_sizes: tuple[int, ...], samples_per_frame: int):
        self.codebook_sizes = tuple(codebook_sizes)
        self.samples_per_frame = samples_per_frame
        self.frame_rate = SAMPLE_RATE / samples_per_frame

    def encode(self, audio: torch.Tensor, lengths: torch.Tensor | None = None) -> EncodeResult:
        spf, k = self.samples_per_frame, len(self.codebook_sizes)
        lengths = lengths if lengths is not None else torch.full((audio.shape[0],), audio.shape[1])
        frames = (lengths + spf - 1) // spf
        t_max = int(frames.max())
        x = torch.nn.functional.pad(audio, (0, t_max * spf - audio.shape[1]))
        x = x.view(audio.shape[0], t_max, spf)[..., :k].abs()  # (B, T, K)
        sizes = torch.tensor(self.codebook_sizes)  # (K,)
        codes = ((x * 1e5).long() % sizes).transpose(1, 2).contiguous()  # (B, K, T)
        return EncodeResult(codes, frames)


def write_corpus(root: Path, codec: HashCodec, codec_name: str) -> tuple[Path, Path]:
    """-> (manifest path, shards dir). The ``MISSING`` utterance is in the manifest but has no codes."""
    import soundfile as sf

    rng = np.random.default_rng(0)
    utts = []
    for uid, text, lang, split, frames in UTTERANCES + [MISSING]:
        n = frames * codec.samples_per_frame - 37  # a partial last frame
        rel = f"wavs/{uid}.wav"
        (root / "wavs").mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), 0.3 * rng.standard_normal(n).clip(-3, 3) / 3, SAMPLE_RATE, subtype="PCM_16")
        utts.append(Utterance(uid, text, lang, uid.split("-")[0], rel, n / SAMPLE_RATE, "fake", split))
    encoded = write_manifest(root / "encoded.jsonl", utts[:-1])
    encode_corpus(codec, encoded, root / "codes", shard_size=6, batch_size=4, codec_name=codec_name, progress=False)
    return write_manifest(root / "manifest.jsonl", utts), root / "codes"


def timed_copy(manifest: Path, dest: Path, ids: set[str]) -> Path:
    """A copy of a fake corpus (manifest, audio, codes) at ``dest`` with IPA-alphabet timing sidecars for the
    utterances ``ids``: every character of a made-up IPA string gets 0.05 s after 0.1 s of silence (the audio is
    noise; only the bookkeeping is tested). -> the copy's manifest."""
    import shutil

    from duet.data.manifest import read_manifest
    from duet.data.timing import IPA, Timing, write_timing

    shutil.copytree(manifest.parent, dest)
    root, manifest = dest, dest / manifest.name
    for u in read_manifest(manifest):
        if u.id in ids:
            ipa = "ðə kwˈɪk."
            phones = tuple((ch, 0.1 + 0.05 * i, 0.15 + 0.05 * i) for i, ch in enumerate(ipa))
            write_timing(root / u.path, Timing(ipa, phones, (("the", 0.1, 0.2), ("quick", 0.25, 0.55)), IPA))
    return manifest
