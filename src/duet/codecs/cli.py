"""``duet codec ...``: inspect duet's codecs and run them on files.

    duet codec info duet-fsq                       # rates, code streams, bitrate, training provenance
    duet codec reconstruct IN.wav OUT.wav [--codec duet-rvq]
    duet codec encode IN.wav CODES.npy [--codec duet-fsq]
    duet codec decode CODES.npy OUT.wav [--codec duet-fsq]

Codes files are ``.npy`` int64 arrays of shape (K, T) (numpy's format holds no pickled objects:
``allow_pickle=False`` on load). Training lives in ``duet train codec`` (``duet.train.cli``).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    codec = subparsers.add_parser("codec", help="duet's own audio codecs (duet-fsq, duet-rvq)")
    sub = codec.add_subparsers(dest="codec_command", metavar="ACTION")
    sub.required = True

    info = sub.add_parser("info", help="describe a codec")
    info.add_argument("codec", nargs="?", default="duet-fsq", help="name or directory")
    info.set_defaults(func=_info)

    rec = sub.add_parser("reconstruct", help="encode and decode an audio file")
    rec.add_argument("input")
    rec.add_argument("output")
    rec.add_argument("--codec", default="duet-fsq")
    rec.set_defaults(func=_reconstruct)

    enc = sub.add_parser("encode", help="audio file -> codes (.npy, (K, T) int64)")
    enc.add_argument("input")
    enc.add_argument("output")
    enc.add_argument("--codec", default="duet-fsq")
    enc.set_defaults(func=_encode)

    dec = sub.add_parser("decode", help="codes (.npy) -> audio file")
    dec.add_argument("input")
    dec.add_argument("output")
    dec.add_argument("--codec", default="duet-fsq")
    dec.set_defaults(func=_decode)


def _info(args: argparse.Namespace) -> int:
    import json

    from duet.codecs.base import bitrate
    from duet.codecs.registry import load, resolve

    codec = load(args.codec)
    meta = json.loads((resolve(args.codec) / "config.json").read_text())
    params = sum(p.numel() for p in codec.parameters())
    print(f"{meta['type']}: {codec.sample_rate} Hz, {codec.samples_per_frame} samples/frame "
          f"({codec.frame_rate:.2f} frames/s), {len(codec.codebook_sizes)} code streams of "
          f"{codec.codebook_sizes[0]}, {bitrate(codec) / 1000:.3f} kbps, {params / 1e6:.1f}M parameters, "
          f"decoder context (left, right) = {codec.decoder_context} frames")
    if meta.get("info"):
        print("trained: " + ", ".join(f"{k} {v}" for k, v in meta["info"].items()))
    return 0


def _reconstruct(args: argparse.Namespace) -> int:
    from duet.audio import load_audio, save_audio
    from duet.codecs.registry import load

    codec = load(args.codec)
    audio, _ = load_audio(args.input, codec.sample_rate)  # documented conversions: mono, resampled
    out = codec.decode(codec.encode(audio).codes).audio[0, : len(audio)].numpy()
    save_audio(args.output, out, codec.sample_rate)
    print(f"{args.input} -> {args.output} ({len(audio) / codec.sample_rate:.2f} s through {args.codec})")
    return 0


def _encode(args: argparse.Namespace) -> int:
    import numpy as np

    from duet.audio import load_audio
    from duet.codecs.registry import load

    codec = load(args.codec)
    audio, _ = load_audio(args.input, codec.sample_rate)
    codes = codec.encode(audio).codes[0].numpy()  # (K, T)
    np.save(args.output, codes)
    print(f"{args.input} -> {args.output}: codes {codes.shape}")
    return 0


def _decode(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from duet.audio import save_audio
    from duet.codecs.registry import load
    from duet.errors import DuetError

    codec = load(args.codec)
    try:
        codes = np.load(args.input, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DuetError(f"cannot read codes from {args.input}: {err}") from err
    audio = codec.decode(torch.from_numpy(codes)).audio[0].numpy()
    save_audio(args.output, audio, codec.sample_rate)
    print(f"{args.input} -> {args.output} ({len(audio) / codec.sample_rate:.2f} s)")
    return 0
