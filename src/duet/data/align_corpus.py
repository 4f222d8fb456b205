"""Align a coded corpus for Luna's duration predictor: ``duet data align`` -> an alignment file (``duet.data.align``).

The utterances are exactly the ones Luna training reads (``duet.data.token_rows.select_rows`` with the same tokenizer,
languages and text preparation), so every alignment's token count matches a training row. Features are log-mels of the
utterance's audio at the code grid's frame rate (one per code frame; the audio is resampled to a rate the frame
rate divides, the hop is one frame), minus the utterance's mean.

Shape legend: S tokens of the wrapped text, T frames, D mel bins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from duet.data.align import AlignerConfig, AlignItem, AlignResult, fit_alignments, write_alignments
from duet.errors import DuetError

FEATURE_RATES = (24_000, 22_050, 16_000, 48_000, 44_100)  # Hz: the first one a code frame divides is used


@dataclass(frozen=True)
class CorpusAlignment:
    result: AlignResult
    utterances: int
    frames: int


def frame_features(audio: np.ndarray, sample_rate: int, frame_rate: float, frames: int,
                   cfg: AlignerConfig = AlignerConfig()) -> np.ndarray:
    """audio (N,) -> (frames, n_mels) log-mels, one per code frame (hop = sample_rate / frame_rate, which must be a
    whole number of samples), centred, minus their mean over the utterance."""
    from duet.codecs.modules import LogMel

    hop = sample_rate / frame_rate
    if abs(hop - round(hop)) > 1e-6:
        raise DuetError(f"a code frame of {frame_rate:g} Hz is not a whole number of samples at {sample_rate} Hz")
    hop = round(hop)
    x = torch.zeros(frames * hop)
    n = min(len(audio), frames * hop)
    x[:n] = torch.from_numpy(np.asarray(audio[:n], dtype=np.float32))
    mel = LogMel(sample_rate, cfg.n_fft, hop, cfg.n_mels)(x[None])[0].T.numpy()  # (T, D)
    return (mel - mel.mean(0, keepdims=True)).astype(np.float32)


def align_corpus(manifest: str | Path, shards: str | Path, tokenizer_json: str | Path, out: str | Path,
                 languages: tuple[str, ...] = (), cfg: AlignerConfig = AlignerConfig(), limit: int | None = None,
                 progress: bool = True) -> CorpusAlignment:
    """Align the train and val utterances Luna would train on; write ``out``. See the module doc."""
    from tqdm import tqdm

    from duet.audio import load_audio
    from duet.data.manifest import audio_path, read_manifest
    from duet.data.shards import CodeShards
    from duet.data.token_rows import LunaDataConfig, duration_targets, select_rows, spread_frames
    from duet.text import get_tokenizer
    from duet.text.tokens import service_ids

    tokenizer = get_tokenizer(tokenizer_json)
    code_shards = CodeShards(shards)
    entries = {e.id: e for e in read_manifest(manifest)}
    data_cfg = LunaDataConfig(languages=languages)
    items = []
    for split in ("train", "val"):
        rows = select_rows(code_shards, manifest, tokenizer, data_cfg, split)[0]
        if not rows and split == "train":
            raise DuetError("no utterances left for Luna training (check the split, languages and lengths)")
        items += rows
    items = items[:limit] if limit is not None else items
    sample_rate, frame_rate = _feature_rate(code_shards.frame_rate), code_shards.frame_rate
    service = service_ids(tokenizer)
    utts = []
    for item in tqdm(items, desc="features", unit="utt", disable=not progress):
        audio, _ = load_audio(audio_path(manifest, entries[item.id]), sample_rate=sample_rate)
        ids = np.array([service.sot, *item.ids, service.eot])  # (S,)
        if item.frames >= len(ids):  # EM starts from the spread, SOT and EOT a frame each
            init = [1, *spread_frames(item.weights, item.frames - 2), 1]
        else:  # too few frames to align: the spread targets stay (fit_alignments lists it as a fallback)
            init = duration_targets(item.weights, item.frames)
        utts.append(AlignItem(item.id, ids, frame_features(audio, sample_rate, frame_rate, item.frames, cfg),
                              np.array(init, dtype=np.int64)))
    result = fit_alignments(utts, len(tokenizer), cfg, progress=progress)
    write_alignments(out, result.durations, tokenizer_json,
                     info={"shards": str(shards), "frame_rate": frame_rate, "rounds": cfg.iterations,
                           "log_lik": list(result.log_lik), "fallback": len(result.fallback)})
    return CorpusAlignment(result, len(utts), sum(u.feats.shape[0] for u in utts))


def _feature_rate(frame_rate: float) -> int:
    """The first of ``FEATURE_RATES`` whose hop for ``frame_rate`` is a whole number of samples."""
    for rate in FEATURE_RATES:
        hop = rate / frame_rate
        if abs(hop - round(hop)) < 1e-6:
            return rate
    raise DuetError(f"no whole-sample hop for code frames of {frame_rate:g} Hz at {FEATURE_RATES} Hz")
