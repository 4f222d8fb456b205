"""Cloning as infilling measured (Luna §2.5): does a Luna given a prompt of a corpus voice speak in that voice?

    PYTHONPATH=src .venv/bin/python benchmarks/clone_infill_bench.py --model luna-tiny \\
        --manifest ~/.cache/duet/corpora/expressive/manifest.jsonl --per-voice 8 \\
        --out benchmarks/results/clone_infill.md

Items: ``duet eval build-set --kind clone``'s pairing (``duet.eval.testset.build_set``): the first ``--per-voice``
targets of more than two words of each voice in the ``--split`` (default test), each with a prompt (a 2-10 s
recording and its transcript) of the same voice, another sentence. Plain readings only: an expressive corpus's
readings with inline events (tagged texts, which luna-tiny never heard) are left out. Each voice also gets
``REFERENCES`` recordings that stand for it in the similarity scores: neither a target nor a prompt, nor a target's
sentence (test split first, any split where the test split has too few), drawn at ``--seed``.

Three systems speak every target:

* **recording**: the target's own recording (the ceiling: how alike two recordings of a voice are);
* **clone**: the model given the prompt's codes and transcript before the target text (``Speaker.voice_prompt``,
  what ``duet speak --prompt/--prompt-text`` and the eval's ``SpeakerSynthesizer`` pass), filling in the rest;
* **no prompt**: the model in its own voice (the control: what cloning adds).

Scores, per output: speaker similarity (``duet.metrics.speaker``, Resemblyzer, as ``duet eval run``'s ``sim``) to
the voice's references (**same**, the mean cosine) and to the other voices' references (**other**, the mean over the
other voices of each voice's mean cosine), their difference (**margin**), whether the voice's references are the
nearest of all voices' (**nearest**: identification among the voices of the run), and Whisper tiny.en's WER
(``duet.metrics.asr`` / ``wer``) against the target text, the mean of per-utterance rates with the pooled rate in
brackets. Resemblyzer's cosines of unrelated voices are often 0.5-0.7, so read the margin, not the level.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

REFERENCES = 4  # recordings per voice that stand for it in the similarity scores
SYSTEMS = ("recording", "clone", "no prompt")


def default_voices(entries) -> list[str]:
    """Every speaker of plain or neutral readings; a voice with both (joe in the expressive corpus: its own
    corpus and ``piper-joe-neutral``) counts once, as its plain speaker."""
    plain = {e.speaker for e in entries if e.emotion in ("", "neutral")}
    return sorted(s for s in plain if not (s.endswith("-neutral") and s.removesuffix("-neutral") in plain))


def references(entries, voice: str, used: set[str], k: int, seed: int) -> list:
    """``k`` recordings of ``voice`` (2-10 s, three words or more) whose sentences (``split_key``) are not ``used``."""
    from duet.data.manifest import split_key

    pool = sorted((e for e in entries if e.speaker == voice and 2.0 <= e.duration <= 10.0
                   and len(e.text.split()) >= 3 and split_key(e.text) not in used),
                  key=lambda e: e.id)
    held_out = [e for e in pool if e.split == "test"]
    pool = held_out if len(held_out) >= k else pool
    return random.Random(f"{seed}\x00{voice}").sample(pool, min(k, len(pool)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="luna-tiny", help="a shipped Luna name or an export directory")
    ap.add_argument("--manifest", required=True, type=Path, help="a corpus manifest (its audio; codes not needed)")
    ap.add_argument("--voices", default=None,
                    help="comma-separated corpus speakers (default: every plain or neutral speaker)")
    ap.add_argument("--per-voice", type=int, default=8, help="held-out targets per voice")
    ap.add_argument("--split", choices=("test", "val", "all"), default="test",
                    help="the targets' split ('all': any, for voices the model never heard; default test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch and Whisper threads")
    ap.add_argument("--out", type=Path, default=None, help="a Markdown file for the tables (and a .json beside it)")
    args = ap.parse_args(argv)

    import torch
    from tqdm import tqdm

    from duet.audio import load_audio
    from duet.data.manifest import audio_path, read_manifest, split_key, write_manifest
    from duet.errors import DuetError
    from duet.eval.synth import SpeakerSynthesizer, SynthOptions
    from duet.eval.testset import BuildConfig, build_set, read_meta, read_speakers
    from duet.metrics.asr import ASRConfig, Transcriber
    from duet.metrics.speaker import SpeakerEncoder
    from duet.metrics.wer import aggregate, word_error
    from duet.text.tags import without_events
    from duet.tts import load

    torch.set_num_threads(args.threads)
    entries = read_manifest(args.manifest)
    voices = args.voices.split(",") if args.voices else default_voices(entries)
    # plain speech only (no inline events, which luna-tiny never heard), each path absolute for the copy
    entries = [replace(e, path=str(audio_path(args.manifest, e))) for e in entries
               if e.speaker in voices and not e.events and without_events(e.text) == e.text]
    with tempfile.TemporaryDirectory() as tmp:
        config = BuildConfig(kind="clone", split=args.split, speakers=tuple(voices), per_speaker=args.per_voice,
                             seed=args.seed)
        build_set(write_manifest(Path(tmp) / "plain.jsonl", entries), tmp, config)
        test_set = read_meta(Path(tmp) / "meta.lst")
        speakers = read_speakers(test_set)
        by_voice = defaultdict(list)
        for item in test_set.items:  # its paths are relative to tmp: resolved while it exists
            by_voice[speakers[item.utt]].append(replace(item, prompt_wav=item.prompt_wav.resolve(),
                                                        gt_wav=item.gt_wav.resolve()))
    voices = [v for v in voices if by_voice[v]]
    if len(voices) < 2:
        print(f"note: {len(voices)} voice with held-out targets; 'other' and 'nearest' need two or more",
              file=sys.stderr)

    encoder = SpeakerEncoder()
    refs = {}
    for v in voices:
        used = {split_key(t) for it in by_voice[v] for t in (it.target_text, it.prompt_text)}  # not a prompt
        refs[v] = references(entries, v, used, REFERENCES, args.seed)
    embedded = {v: np.stack([encoder.embed_path(e.path) for e in refs[v]]) for v in voices}  # (R, E) per voice

    speaker = load(args.model)
    if not speaker.clone_from_prompt:
        print(f"{args.model} takes no voice prompt (not a Luna)", file=sys.stderr)
        return 2
    synth = SpeakerSynthesizer(speaker, args.model, SynthOptions(seed=args.seed))
    asr = Transcriber(ASRConfig(cpu_threads=args.threads))

    def spoken(item) -> dict[str, tuple[np.ndarray, int]]:
        """system -> (audio, sample rate) of one target."""
        clone = synth.synthesize([item])[0]
        bare = synth.synthesize([replace(item, prompt_text="", prompt_wav=None)])[0]
        return {"recording": load_audio(item.gt_wav), "clone": (clone.audio, clone.sample_rate),
                "no prompt": (bare.audio, bare.sample_rate)}

    rows, started = [], time.perf_counter()
    work = [(v, it) for v in voices for it in by_voice[v]]
    for v, item in tqdm(work, desc="targets", unit="target"):
        for system, (audio, sr) in spoken(item).items():
            heard = asr.transcribe(audio, sr)
            row = {"voice": v, "utt": item.utt, "system": system, "text": item.target_text, "heard": heard,
                   "prompt_text": item.prompt_text, "wer": word_error(item.target_text, heard),
                   "seconds": len(audio) / sr, "same": None, "other": None, "nearest": None}
            try:
                embedding = encoder.embed(audio, sr)
            except DuetError:  # no speech left after trimming: kept (and counted), as duet eval run keeps it
                rows.append(row)
                continue
            cosines = {w: float(np.mean(embedded[w] @ embedding)) for w in voices}  # (R, E) @ (E,): unit vectors
            others = [c for w, c in cosines.items() if w != v]
            if others:
                row.update(other=float(np.mean(others)), nearest=max(cosines, key=cosines.get) == v)
            rows.append({**row, "same": cosines[v]})
    wall = time.perf_counter() - started

    def table(selected: list[dict]) -> list[str]:
        out = ["| system | targets | same speaker | other speakers | margin | nearest is the voice | "
               "WER (pooled) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for system in SYSTEMS:
            rs = [r for r in selected if r["system"] == system]
            scored = [r for r in rs if r["same"] is not None]
            silent = f" ({len(rs) - len(scored)} without speech)" if len(scored) < len(rs) else ""
            same = f"{np.mean([r['same'] for r in scored]):.3f}" if scored else "n/a"
            other = margin = nearest = "n/a"
            if scored and scored[0]["other"] is not None:
                other_mean = np.mean([r["other"] for r in scored])
                other, margin = f"{other_mean:.3f}", f"{np.mean([r['same'] for r in scored]) - other_mean:+.3f}"
                nearest = f"{sum(r['nearest'] for r in scored)} / {len(rs)}"
            wer = aggregate(r["wer"] for r in rs)
            out.append(f"| {system} | {len(rs)}{silent} | {same} | {other} | {margin} | {nearest} | "
                       f"{100 * wer.mean:.1f}% ({100 * wer.pooled:.1f}%) |")
        return out

    command = "PYTHONPATH=src .venv/bin/python benchmarks/clone_infill_bench.py " + " ".join(argv or sys.argv[1:])
    lines = [f"`{command}`", "",
             f"Model {args.model}; {len(work)} targets ({args.split} split) of {len(voices)} voice(s) from "
             f"{args.manifest}, plain readings (no inline events), "
             f"each spoken by its recording, by the model cloning a prompt of the voice, and by the model without "
             f"a prompt; seed {args.seed}; {wall:.0f} s in all on {args.threads} thread(s). Similarity: Resemblyzer "
             f"cosine to {REFERENCES} other recordings of the voice (same) and of each other voice (other); margin = "
             f"same - other; WER: Whisper tiny.en, mean of utterances (pooled).", ""]
    if args.split != "test":
        lines += [f"Targets of the {args.split} split: a voice the model trained on may have had them in training.",
                  ""]
    for v in voices:
        lines += [f"### {v}", "", *table([r for r in rows if r["voice"] == v]), ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        json_rows = [{**r, "wer": r["wer"].rate} for r in rows]
        args.out.with_suffix(".json").write_text(json.dumps(json_rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
