"""The nearest-training-voice oracle of a cloning set: what a compressor that only retrieves would reach.

    python benchmarks/clone_oracle.py --set SET --manifest C/manifest.jsonl --hold-out-speakers A,B,... --out OUT
    duet eval run --model ground-truth --set OUT --metrics sim      # perfect retrieval, the recordings themselves
    duet eval run --model codec:duet-fsq --set OUT --metrics sim    # the same through the codec a model speaks in

A cloning model trained on N voices can always answer an unseen prompt with the training voice nearest to it; to
clone better than that it has to make a voice it never heard. This script writes that retrieval as a test set: each
item of SET keeps its utt id, prompt and speaker (so `duet eval run` draws the same impostor prompts for SIM other),
and its target becomes a recording of the training voice whose recordings are most similar to the prompt (the mean
speaker-encoder cosine of ``--select`` of them, drawn at a fixed seed), another recording of that voice than the
ones that chose it. Training voices are the manifest's speakers outside ``--hold-out-speakers`` (as
``duet train gepard --hold-out-speakers``), their ``train`` split, 3-8 s recordings.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", required=True, help="a cloning set (meta.lst and speakers.json), e.g. of held-out voices")
    p.add_argument("--manifest", required=True, help="the training corpus's manifest.jsonl")
    p.add_argument("--hold-out-speakers", required=True, help="comma-separated speakers training left out")
    p.add_argument("--select", type=int, default=4, help="recordings per training voice that choose it (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="directory for the oracle set")
    args = p.parse_args(argv)

    from duet.data.manifest import audio_path, read_manifest
    from duet.eval.testset import read_meta, write_meta
    from duet.metrics.speaker import SpeakerEncoder

    set_dir, manifest, out = Path(args.set), Path(args.manifest), Path(args.out)
    held = {s for s in args.hold_out_speakers.split(",") if s}
    recordings: dict[str, list[tuple[Path, str]]] = defaultdict(list)  # training voice -> (wav, text)
    for utt in read_manifest(manifest):
        if utt.speaker and utt.speaker not in held and utt.split == "train" and 3.0 <= utt.duration <= 8.0:
            recordings[utt.speaker].append((audio_path(manifest, utt), utt.text))
    rng = random.Random(args.seed)
    drawn = {v: rng.sample(sorted(r), args.select + 1) for v, r in sorted(recordings.items()) if len(r) > args.select}
    if not drawn:
        print(f"no training voice in {manifest} has {args.select + 1} recordings of 3-8 s", file=sys.stderr)
        return 2

    encoder = SpeakerEncoder()
    names = list(drawn)
    # (V, E): the mean of a voice's unit embeddings, so prompt . centroid is the mean cosine to its choosers
    centroids = np.stack([np.mean([encoder.embed_path(wav) for wav, _ in drawn[v][: args.select]], axis=0)
                          for v in names])
    test_set = read_meta(set_dir / "meta.lst")
    items, nearest = [], defaultdict(list)
    for item in test_set.items:
        if item.prompt_wav is None:
            continue
        voice = names[int(np.argmax(centroids @ encoder.embed_path(item.prompt_wav)))]
        wav, text = drawn[voice][args.select]
        items.append(replace(item, target_text=text, gt_wav=wav))
        nearest[voice].append(item.utt)
    out.mkdir(parents=True, exist_ok=True)
    write_meta(out / "meta.lst", items)
    if (set_dir / "speakers.json").is_file():
        shutil.copy(set_dir / "speakers.json", out / "speakers.json")
    print(f"{len(items)} items, {len(drawn)} training voices -> {out}")
    for voice, utts in sorted(nearest.items(), key=lambda kv: -len(kv[1])):
        print(f"  {voice}: nearest for {len(utts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
