"""Duration predictors side by side: predicted length against the true frame count of held-out utterances.

For every English utterance of a split (test by default) with codes in the shards, each model's duration predictor
reads the text (prepared and tokenised as for speaking) and its total (sum of expected token durations, rounded, as
decoding uses it) is compared with the utterance's frame count. Printed per model: mean absolute error in frames
and seconds, median, mean signed error (bias), and the share within 10% of the truth; then, where the corpus has
the voice's timing, the same per token (what an aligned model's layout rests on).

    PYTHONPATH=src .venv/bin/python benchmarks/duration_bench.py --models luna-tiny runs/luna-dur-export \\
        --shards data/base/codes-duet-rvq --split test
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch


def main(argv: list[str] | None = None) -> int:
    from duet.data.manifest import read_manifest
    from duet.data.shards import CodeShards
    from duet.luna.shipped import load_luna
    from duet.shipped import resolve_model
    from duet.text.prompts import luna_prompt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", required=True, help="shipped Luna names or export directories")
    p.add_argument("--shards", default="data/base/codes-duet-rvq")
    p.add_argument("--manifest", default="data/base/manifest.jsonl")
    p.add_argument("--split", default="test")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    shards = CodeShards(args.shards)
    utts = [u for u in read_manifest(args.manifest)
            if u.split == args.split and u.language.startswith("en") and u.id in shards]
    truth = np.array([shards.frames(u.id) for u in utts], dtype=np.float64)
    print(f"{len(utts)} English utterances of the {args.split} split; true length {truth.mean():.1f} frames on "
          f"average ({truth.mean() / shards.frame_rate:.2f} s)\n")
    print("| model | MAE frames | MAE s | median abs | bias frames | within 10% |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.models:
        loaded = load_luna(resolve_model(name))
        predictor = loaded.bundle.duration.eval()
        predicted = []
        with torch.no_grad():
            for u in utts:
                ids = luna_prompt(u.text, loaded.tokenizer, language=u.language)
                text, lengths = torch.tensor([ids]), torch.tensor([len(ids)])
                predicted.append(round(float(predictor.token_durations(text, lengths).sum())))
        err = np.array(predicted, dtype=np.float64) - truth
        within = np.mean(np.abs(err) <= 0.1 * truth)
        print(f"| {name} | {np.abs(err).mean():.2f} | {np.abs(err).mean() / shards.frame_rate:.3f} | "
              f"{np.median(np.abs(err)):.1f} | {err.mean():+.2f} | {within:.0%} |")
    per_token(args, shards, utts)
    return 0


def per_token(args: argparse.Namespace, shards, utts: list) -> None:
    """Per-token accuracy where the corpus has timing (an aligned model lays its text out token by token, so the
    total is not enough): each model reads the tokens the voice's own timing gives durations to, and its expected
    frames per token are compared with them (SOT and EOT, the edge silences, included)."""
    from pathlib import Path

    from duet.data.token_timing import timed_texts
    from duet.luna.shipped import load_luna
    from duet.shipped import resolve_model
    from duet.text.prompts import wrap_ids
    from duet.text.tokens import service_ids

    print("\n| model | utterances | tokens | MAE frames per token | median abs | correlation | within 1 frame |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        loaded = load_luna(resolve_model(name))
        predictor = loaded.bundle.duration.eval()
        try:
            timed = timed_texts(utts, Path(args.manifest).parent, loaded.tokenizer, shards.frames,
                                shards.frame_rate, {})
        except Exception as err:  # not a phoneme tokenizer, or no timing in this corpus
            print(f"| {name} | per-token timing not comparable: {err} | | | | | |")
            continue
        truth, guess = [], []
        with torch.no_grad():
            for t in timed:
                ids = wrap_ids(t.ids, service_ids(loaded.tokenizer), start_of_speech=False)
                text, lengths = torch.tensor([ids]), torch.tensor([len(ids)])
                guess.extend(predictor.token_durations(text, lengths)[0].tolist())
                truth.extend(t.durations)
        truth_a, guess_a = np.array(truth), np.array(guess)
        err = np.abs(guess_a - truth_a)
        corr = float(np.corrcoef(truth_a, guess_a)[0, 1])
        print(f"| {name} | {len(timed)} | {len(truth)} | {err.mean():.2f} | {np.median(err):.2f} | {corr:.3f} | "
              f"{np.mean(err <= 1.0):.0%} |")


if __name__ == "__main__":
    sys.exit(main())
