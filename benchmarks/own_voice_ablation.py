"""Which recipe makes the clearest own voice: ``duet voice train``'s settings compared under one budget on one
prepared Asterisk set, scored by the voice's held-out WER and similarity (``benchmarks/own_voice_bench.py`` is the
proof of the chosen recipe; this is how it was chosen).

    PYTHONPATH=src .venv/bin/python benchmarks/own_voice_ablation.py --language en --minutes 25 --threads 1 \\
        --arm upper:3e-4 --arm heads:1e-3 --arm all:3e-4 --out benchmarks/results/own_voice_ablation.md

Each ``--arm TRAINED:LR[:BASE]`` is a ``VoiceTrainConfig`` with those trained weights
(``duet.voice.recipe.TRAINED``), peak learning rate and base model (default gepard-tiny), everything else as shipped.
The first arm prepares the data (checks, alignment, codes) as ``duet voice train`` does; the others start from a copy of its prepared corpus and codes, so every arm trains on the
same clips with the same held-out set and the same wall-clock budget for calibration, training and scoring (its own
step plan: an arm with fewer trained weights takes faster steps and gets more of them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = ("corpus", "codes", "base", "data.json")  # the prepared data every arm trains on


def arm_dir(work: Path, language: str, arm: str) -> Path:
    return work / f"ablation-{language}" / arm.replace(":", "-")


def run_arm(data: Path, out: Path, first: Path | None, arm: str, minutes: float, language: str, threads: int,
            asr_model: str | None) -> tuple[dict, float]:
    """One arm's voice, trained and scored (resumed if ``out`` holds it) -> (its facts, wall seconds)."""
    from duet.config_io import write_json
    from duet.voice.corpus import VoiceDataConfig
    from duet.voice.recipe import VoicePaths, VoiceTrainConfig, train_voice

    trained, lr, *base = arm.split(":")
    cfg = VoiceTrainConfig(data=VoiceDataConfig(language=language), minutes=minutes, trained=trained, lr=float(lr),
                           asr_model=asr_model, base_model=base[0] if base else "gepard-tiny")
    paths = VoicePaths(out)
    done = json.loads((out / "config.json").read_text())["info"]["voice"] if (out / "config.json").is_file() else {}
    if "scores" in done:  # scored by an earlier invocation
        return done, 0.0
    resume = paths.config.is_file()
    if first is not None and not resume:  # start from the first arm's prepared data
        src = VoicePaths(first)
        paths.build.mkdir(parents=True, exist_ok=True)
        for name in (n for n in SHARED if (src.build / n).exists()):  # base/: only for a language it re-marks
            (shutil.copytree if (src.build / name).is_dir() else shutil.copyfile)(src.build / name, paths.build / name)
        write_json(paths.config, cfg)
        resume = True
    started = time.monotonic()
    result = train_voice(data, out, None if resume else cfg, resume=resume, threads=threads)
    return result.facts, time.monotonic() - started


def row(arm: str, facts: dict) -> str:
    t, s = facts["training"], facts.get("scores") or {}
    wer, sim = s.get("wer", {}), s.get("sim", {})

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    return (f"| {arm} | {t['steps']} of {t['planned_steps']} ({t['stopped'].replace('_', ' ')}) | {t['exported_step']} "
            f"| {t['sec_per_step']:.2f} | {pct(wer.get('voice'))} | {sim.get('voice', 0):.3f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--language", default="en")
    p.add_argument("--minutes", type=float, default=25.0, help="each arm's budget (calibration, training, scoring)")
    p.add_argument("--arm", action="append", required=True, metavar="TRAINED:LR[:BASE]")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--asr-model", default=None, help="a CTranslate2 Whisper directory (non-English)")
    p.add_argument("--work", default=str(Path.home() / ".cache" / "duet" / "voice-bench"))
    p.add_argument("--out", default=None, help="markdown file for the table (printed either way)")
    args = p.parse_args(argv)

    sys.path.insert(0, str(REPO / "benchmarks"))
    from own_voice_bench import write_ljspeech

    work = Path(args.work).expanduser()
    data = work / f"asterisk-{args.language}"
    write_ljspeech(args.language, data, None)
    rows, first, base = [], None, None
    for arm in args.arm:
        out = arm_dir(work, args.language, arm)
        facts, wall = run_arm(data, out, first, arm, args.minutes, args.language, args.threads, args.asr_model)
        first = first or out
        scores = facts.get("scores") or {}
        base = base or scores
        rows.append(row(arm, facts))
        print(rows[-1], f"({wall / 60:.1f} min)", flush=True)
    wer, sim = base.get("wer", {}), base.get("sim", {})
    text = "\n".join([
        f"## {args.language}: {len(args.arm)} arms, {args.minutes:g} minutes each, {args.threads} thread(s)", "",
        "`PYTHONPATH=src .venv/bin/python benchmarks/own_voice_ablation.py --language "
        f"{args.language} --minutes {args.minutes:g} --threads {args.threads} "
        + " ".join(f"--arm {a}" for a in args.arm) + "`", "",
        f"Held out: {base.get('clips', 0)} clips. The recordings: WER {100 * (wer.get('recordings') or 0):.1f}%, "
        f"similarity to each other {sim.get('recordings') or 0:.3f}; gepard-tiny (control): WER "
        f"{100 * (wer.get('base') or 0):.1f}%, similarity {sim.get('base') or 0:.3f}.", "",
        "| trained:lr[:base] | steps (ended by) | exported step | s/step | WER | similarity |",
        "| --- | --- | ---: | ---: | ---: | ---: |", *rows, ""])
    print(text)
    if args.out:
        from own_voice_bench import merge

        out = Path(args.out)
        out.write_text(merge(out, text.splitlines()[0], text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
