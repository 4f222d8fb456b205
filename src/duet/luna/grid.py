"""A Luna grid <-> its codec's codes: the one place that knows how a model's (T, Q) grid is laid out in a codec's
(Q_codec, T) codes.

Two grids (``LunaConfig.fsq_levels``):
  * the report's RVQ grid: the codec's first Q codebooks are the grid's Q cells, K codes each; a transpose (a
    residual codec decodes from its first q codebooks, so a grid of fewer cells than the codec has codebooks reads
    and writes a lower-bitrate code of it);
  * the FSQ channel grid: each packed FSQ group index of the codec (0 .. prod(levels) - 1, what duet-fsq and
    NanoCodec return) is unfolded into its len(levels) digits, one ordinal cell each; the codec's G groups become
    Q = G x len(levels) cells (``duet.codecs.fsq.GroupFSQ.unfold``, first digit least significant), and folded
    back for decoding.

Shape legend: T frames, Q grid cells per frame, Q_c the codec's code streams per frame (G groups for FSQ).
"""

from __future__ import annotations

import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.luna.config import LunaConfig


def _fsq(cfg: LunaConfig) -> GroupFSQ:
    levels = cfg.fsq_levels
    assert levels is not None
    return GroupFSQ(FSQConfig(num_groups=cfg.num_codebooks // len(levels), levels=tuple(levels)))


def check_codec(cfg: LunaConfig, codebook_sizes: tuple[int, ...], what: str) -> None:
    """Refuse codes (a codec's, or a shard set's, ``codebook_sizes``) that are not this grid's codec's."""
    want = cfg.codec_codebook_sizes
    if cfg.fsq_levels is None:  # a residual codec's first Q codebooks are a code of their own (a lower bitrate)
        codebook_sizes = tuple(codebook_sizes)[: len(want)]
    if tuple(codebook_sizes) != want:
        grid = (f"{cfg.num_codebooks} FSQ digits of levels {list(cfg.fsq_levels)}" if cfg.fsq_levels
                else f"{cfg.num_codebooks} codebooks x {cfg.codebook_size}")
        have = ", ".join(f"{n}" for n in sorted(set(codebook_sizes)))
        raise DuetError(f"{what}: {len(codebook_sizes)} code streams of {have} codes; the model's grid ({grid}) "
                        f"needs {len(want)} of {want[0]}: use the codec it was trained on")


def grid_from_codes(cfg: LunaConfig, codes: torch.Tensor) -> torch.Tensor:
    """A codec's codes (Q_c, T) -> the model's grid (T, Q) int64."""
    if codes.dim() != 2:
        raise DuetError(f"codes must be (code streams, frames), got shape {tuple(codes.shape)}")
    codes = codes.long()
    if cfg.fsq_levels is not None:
        codes = _fsq(cfg).unfold(codes.to("cpu")[None])[0].to(codes.device)  # (G, T) -> (Q, T)
    else:
        codes = codes[: cfg.num_codebooks]  # a residual codec's first Q codebooks (check_codec)
    if codes.shape[0] != cfg.num_codebooks:
        raise DuetError(f"codes have {codes.shape[0]} streams, the grid {cfg.num_codebooks} cells")
    return codes.T.contiguous()


def codes_from_grid(cfg: LunaConfig, grid: torch.Tensor) -> torch.Tensor:
    """The model's grid (T, Q), every cell decided, -> the codec's codes (Q_c, T) int64, ready for ``decode``."""
    if grid.dim() != 2 or grid.shape[1] != cfg.num_codebooks:
        raise DuetError(f"grid must be (frames, {cfg.num_codebooks}), got shape {tuple(grid.shape)}")
    codes = grid.T.long()  # (Q, T)
    if cfg.fsq_levels is None:
        return codes.contiguous()
    levels = torch.tensor(cfg.cell_levels, device=codes.device)[:, None]  # (Q, 1)
    if codes.numel() and bool(((codes < 0) | (codes >= levels)).any()):
        raise DuetError("the grid holds codes outside its cells' levels (undecided cells?)")
    return _fsq(cfg).fold(codes.to("cpu")[None])[0].to(grid.device)  # (Q, T) -> (G, T)
