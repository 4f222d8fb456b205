"""Codec codes for a whole corpus, in resumable safetensors shards, and `CodeShards` to read them back.

Layout of an encoded directory::

    index.json                  codec name, codebook sizes, frame rate, and per shard: file, ids, frame counts
    shard-00000.safetensors     one tensor per utterance, keyed by id, shape (K, T), int16 (int32 if an
    shard-00001.safetensors     alphabet exceeds int16)

Shape legend: K code streams per frame, T frames, B batch, S samples.

Shard i always holds manifest entries [i * shard_size, (i + 1) * shard_size), so a rerun knows which shards are
finished: those listed in `index.json` with the same ids whose file exists. A shard is written to a temporary file
and renamed, and only then entered in the index (itself replaced atomically), so after an interruption a shard is
either finished and kept, or redone from scratch.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from duet.audio import load_audio
from duet.codecs.base import Codec
from duet.data.manifest import Utterance, audio_path, read_manifest
from duet.errors import DuetError

INDEX_NAME = "index.json"
FORMAT_VERSION = 1


def _shard_file(i: int) -> str:
    return f"shard-{i:05d}.safetensors"


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _storage_dtype(codebook_sizes: tuple[int, ...]) -> torch.dtype:
    # Codes are indices below their alphabet size: int16 halves the disk of int32 for every codec we ship.
    return torch.int16 if max(codebook_sizes) <= 2**15 else torch.int32


def _encode_batch(codec: Codec, manifest: Path, batch: list[Utterance]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Encode up to B utterances at once (zero-padded, with lengths) -> id -> codes (K, T), and unreadable ids."""
    audios, ok, bad = [], [], []
    for utt in batch:
        try:
            audio, _ = load_audio(audio_path(manifest, utt), codec.sample_rate)
        except DuetError:
            bad.append(utt.id)
            continue
        audios.append(torch.from_numpy(np.ascontiguousarray(audio)))
        ok.append(utt)
    if not ok:
        return {}, bad
    lengths = torch.tensor([a.shape[0] for a in audios], dtype=torch.long)
    padded = torch.zeros(len(audios), int(lengths.max()))  # (B, S)
    for b, a in enumerate(audios):
        padded[b, : a.shape[0]] = a
    with torch.inference_mode():
        result = codec.encode(padded, lengths)
    codes, frames = result.codes, result.lengths  # (B, K, T), (B,)
    dtype = _storage_dtype(tuple(codec.codebook_sizes))
    return {u.id: codes[b, :, : int(frames[b])].to(dtype).contiguous() for b, u in enumerate(ok)}, bad


def encode_corpus(
    codec: Codec,
    manifest_path: str | Path,
    out_dir: str | Path,
    shard_size: int = 1000,
    batch_size: int = 8,
    codec_name: str | None = None,
    progress: bool = True,
) -> dict:
    """Encode every manifest utterance with `codec` into shards under `out_dir`; resumes a previous run.

    Returns the index (also written to `out_dir/index.json`). Utterances whose audio cannot be read are left out
    and listed under the shard's `skipped`.
    """
    from safetensors.torch import save_file

    if shard_size < 1 or batch_size < 1:
        raise DuetError(f"shard_size and batch_size must be positive, got {shard_size}, {batch_size}")
    manifest_path = Path(manifest_path)
    utterances = read_manifest(manifest_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = codec_name or getattr(codec, "name", type(codec).__name__)
    header = {
        "format": FORMAT_VERSION,
        "codec": name,
        "codebook_sizes": [int(n) for n in codec.codebook_sizes],
        "frame_rate": float(codec.frame_rate),
        "sample_rate": int(codec.sample_rate),
        "shard_size": shard_size,
        "manifest": str(manifest_path.resolve()),
    }

    index_path = out / INDEX_NAME
    previous: dict[int, dict] = {}
    if index_path.is_file():
        old = json.loads(index_path.read_text(encoding="utf-8"))
        for key in ("codec", "codebook_sizes", "shard_size"):
            if old.get(key) != header[key]:
                raise DuetError(
                    f"{out} holds codes made with {key}={old.get(key)!r}, not {header[key]!r}; use another --out"
                )
        previous = {i: s for i, s in enumerate(old.get("shards", []))}

    planned = [utterances[i : i + shard_size] for i in range(0, len(utterances), shard_size)]
    shards: list[dict | None] = []
    for i, utts in enumerate(planned):
        entry = previous.get(i)
        wanted = [u.id for u in utts]
        finished = (
            entry is not None
            and entry.get("file") == _shard_file(i)
            and len(entry["ids"]) + len(entry.get("skipped", [])) == len(wanted)
            and set(entry["ids"]) | set(entry.get("skipped", [])) == set(wanted)
            and (out / _shard_file(i)).is_file()
        )
        shards.append(entry if finished else None)

    def write_index() -> dict:
        index = {**header, "shards": [s for s in shards if s is not None]}
        _write_json_atomic(index_path, index)
        return index

    todo = [i for i, s in enumerate(shards) if s is None]
    bar = tqdm(total=sum(len(planned[i]) for i in todo), unit="utt", desc=f"encode {name}", disable=not progress)
    try:
        for i in todo:
            # Batch utterances of similar length together (less padding); the shard keeps manifest order.
            by_length = sorted(planned[i], key=lambda u: u.duration)
            codes: dict[str, torch.Tensor] = {}
            skipped: list[str] = []
            for start in range(0, len(by_length), batch_size):
                batch = by_length[start : start + batch_size]
                got, bad = _encode_batch(codec, manifest_path, batch)
                codes.update(got)
                skipped.extend(bad)
                bar.update(len(batch))
            ids = [u.id for u in planned[i] if u.id in codes]
            tmp = out / (_shard_file(i) + ".tmp")
            save_file({uid: codes[uid] for uid in ids}, str(tmp), metadata={"codec": name})
            os.replace(tmp, out / _shard_file(i))
            shards[i] = {
                "file": _shard_file(i),
                "ids": ids,
                "frames": [int(codes[uid].shape[-1]) for uid in ids],
                "skipped": [u.id for u in planned[i] if u.id in set(skipped)],
            }
            write_index()
    finally:
        bar.close()
    return write_index()


class CodeShards:
    """Read-only view of an encoded directory: `codes = shards[id]` -> (K, T) int64, or iterate (id, codes).

    Shards are loaded whole on first use; the `cache` most recently used ones stay in memory.
    """

    def __init__(self, out_dir: str | Path, cache: int = 2):
        self.root = Path(out_dir)
        index_path = self.root / INDEX_NAME
        if not index_path.is_file():
            raise DuetError(f"no {INDEX_NAME} in {self.root}: run `duet data encode` first")
        self.index = json.loads(index_path.read_text(encoding="utf-8"))
        self._where: dict[str, tuple[int, int]] = {}  # id -> (shard number, frames)
        for s, shard in enumerate(self.index["shards"]):
            for uid, frames in zip(shard["ids"], shard["frames"], strict=True):
                self._where[uid] = (s, frames)
        self._cache: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()
        self._cache_size = max(1, cache)

    @property
    def codec(self) -> str:
        return self.index["codec"]

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return tuple(self.index["codebook_sizes"])

    @property
    def frame_rate(self) -> float:
        return float(self.index["frame_rate"])

    @property
    def ids(self) -> list[str]:
        return list(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, uid: object) -> bool:
        return uid in self._where

    def frames(self, uid: str) -> int:
        """T of an utterance, from the index (no shard is loaded)."""
        return self._where[uid][1]

    def _shard(self, s: int) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        if s in self._cache:
            self._cache.move_to_end(s)
            return self._cache[s]
        tensors = load_file(str(self.root / self.index["shards"][s]["file"]))
        self._cache[s] = tensors
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tensors

    def __getitem__(self, uid: str) -> torch.Tensor:
        if uid not in self._where:
            raise KeyError(uid)
        return self._shard(self._where[uid][0])[uid].long()  # (K, T)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for s, shard in enumerate(self.index["shards"]):
            tensors = self._shard(s)
            for uid in shard["ids"]:
                yield uid, tensors[uid].long()
