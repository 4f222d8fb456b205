"""Reconstruct held-out sentences with duet's codecs and score them side by side with the originals, in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/codec_bench.py [--codecs duet-fsq duet-rvq] [--per-speaker 10]

For each codec (a shipped name or a directory), over test-split utterances (sentences never in training: the
corpus splits by text) of several voices (the most frequent ones), or of the voices ``--speakers`` names:
- Whisper WER of the originals and of the reconstructions (``duet.eval``; tiny.en), both as the mean of
  per-utterance rates and pooled over the set (all errors / all reference words: steadier on short utterances),
  and their ratios (the issue's target: at most 1.3x);
- PESQ-WB, STOI and MCD (trim-aligned) of the reconstruction against the original at the codec's rate;
- DNSMOS (P.835 OVRL, SIG, BAK and P.808; reference-free, ``duet.metrics.dnsmos``) of the originals and of the
  reconstructions: how natural each sounds, which the codec decoder caps for every model that speaks through it;
- encode and decode speed as multiples of real time (audio seconds / compute seconds, batch 1, ``--threads``).
A residual codec named ``NAME@q`` decodes from its first q codebooks only (``duet-rvq@1``: what codebook 0 alone
carries, the semantic anchor's measure).
Prints a Markdown table and writes it, with the raw per-utterance numbers as JSON, next to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from duet.audio import load_audio, save_audio
from duet.codecs import load
from duet.errors import DuetError
from duet.metrics.asr import Transcriber
from duet.metrics.dnsmos import DNSMOS
from duet.metrics.signal import MCDConfig, mel_cepstral_distance, pesq_wb, stoi
from duet.metrics.wer import aggregate, word_error
from duet.train.audio_crops import ManifestEntry, read_manifest


def pick_utterances(manifest: Path, split: str, speakers: list[str] | None, n_speakers: int, per_speaker: int,
                    language: str | None) -> list[ManifestEntry]:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    lang = {r.get("id"): r.get("language") for r in rows}
    entries = [e for e in read_manifest(manifest, split) if language is None or lang.get(e.id) in (None, language)]
    named = speakers is not None  # voices the caller chose (one is enough); else the most frequent, at least two
    if speakers is None:
        counts = Counter(e.speaker for e in entries)
        speakers = [s for s, _ in counts.most_common(n_speakers)]
    chosen = []
    for spk in speakers:
        mine = sorted((e for e in entries if e.speaker == spk), key=lambda e: e.id)
        # Whole sentences (>= 1.5 s), so WER is not dominated by one-word prompts.
        mine = [e for e in mine if e.duration >= 1.5] or mine
        chosen += mine[:per_speaker]
    if not chosen or (not named and len({e.speaker for e in chosen}) < 2):
        raise DuetError(f"need test utterances from at least two voices, found {sorted({e.speaker for e in chosen})}")
    return chosen


def time_it(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def dnsmos_of(mos: DNSMOS, audio, sample_rate: int) -> dict[str, float]:
    score = mos.score(audio, sample_rate)
    return {"ovrl": score.ovrl, "sig": score.sig, "bak": score.bak, "p808": score.p808}


def split_spec(spec: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME@q`` -> (the codec's name or directory, the codebooks to decode from; None: all)."""
    name, sep, q = spec.rpartition("@")
    if not sep:
        return spec, None
    if not q.isdigit() or int(q) < 1:
        raise DuetError(f"{spec!r}: the part after @ is a number of codebooks (1 or more)")
    return name, int(q)


def bench_codec(spec: str, utts: list[ManifestEntry], asr: Transcriber, mos: DNSMOS, save_dir: Path | None) -> dict:
    name, codebooks = split_spec(spec)
    codec = load(name)
    label = Path(name).name + (f"@{codebooks}" if codebooks else "")
    sr = codec.sample_rate
    warm = torch.zeros(1, sr)
    codec.decode(codec.encode(warm).codes)  # first-call allocations out of the timings
    rows = []
    for e in utts:
        audio, _ = load_audio(e.path, sr)
        x = torch.from_numpy(audio).unsqueeze(0)
        enc, t_enc = time_it(codec.encode, x)
        codes = enc.codes if codebooks is None else enc.codes[:, :codebooks]  # (B, q, T)
        dec, t_dec = time_it(codec.decode, codes)
        recon = dec.audio[0, : len(audio)].numpy()
        hyp = asr.transcribe(recon, sr)
        row = {"id": e.id, "speaker": e.speaker, "seconds": len(audio) / sr, "enc_s": t_enc, "dec_s": t_dec,
               "hyp": hyp, "wer": word_error(e.text, hyp).rate}
        for metric, fn in (("pesq", pesq_wb), ("stoi", stoi)):
            try:
                row[metric] = fn(audio, recon, sr)
            except DuetError:
                row[metric] = None
        row["mcd"] = mel_cepstral_distance(audio, recon, sr, MCDConfig(align="trim"))
        row.update(dnsmos_of(mos, recon, sr))
        rows.append(row)
        if save_dir is not None:
            save_audio(save_dir / label / f"{e.id}.wav", recon, sr)
    return {"codec": label, "sample_rate": sr, "rows": rows,
            "info": json.loads((Path(codec_dir(name)) / "config.json").read_text()).get("info", {})}


def codec_dir(name: str) -> Path:
    from duet.codecs.registry import resolve

    return resolve(name)


def summarize(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(vals) if vals else None


def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def mos_cells(rows: list[dict]) -> str:
    return " | ".join(fmt(summarize(rows, key), ".2f") for key in ("ovrl", "sig", "bak", "p808"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--codecs", nargs="+", default=["duet-fsq", "duet-rvq"])
    p.add_argument("--manifest", default="data/base/manifest.jsonl")
    p.add_argument("--split", default="test")
    p.add_argument("--speakers", nargs="*", default=None, help="speaker names (default: the most frequent ones)")
    p.add_argument("--num-speakers", type=int, default=3)
    p.add_argument("--per-speaker", type=int, default=10)
    p.add_argument("--language", default="en")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="benchmarks/results/codec_bench.md")
    p.add_argument("--save-audio", default=None, help="directory for the reconstructions (WAV)")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    utts = pick_utterances(Path(args.manifest), args.split, args.speakers, args.num_speakers, args.per_speaker,
                           args.language)
    asr, mos = Transcriber(), DNSMOS()
    originals = []
    for e in utts:
        audio, sr = load_audio(e.path)
        hyp = asr.transcribe(audio, sr)
        originals.append({"id": e.id, "speaker": e.speaker, "hyp": hyp, "wer": word_error(e.text, hyp).rate,
                          "text": e.text, **dnsmos_of(mos, audio, sr)})
    results = []
    for name in args.codecs:
        try:
            results.append(bench_codec(name, utts, asr, mos, Path(args.save_audio) if args.save_audio else None))
        except DuetError as err:
            print(f"skipping {name}: {err}", file=sys.stderr)

    speakers = list(dict.fromkeys(e.speaker for e in utts))
    command = " ".join(["benchmarks/codec_bench.py", *(sys.argv[1:] if argv is None else argv)])
    lines = [f"`{command}`", "", f"Codec benchmark: {len(utts)} held-out ({args.split}) utterances, {len(speakers)} voices, "
             f"{sum(r['seconds'] for r in results[0]['rows']) if results else 0:.0f} s of audio; "
             f"torch threads {args.threads}; Whisper tiny.en WER: mean of per-utterance rates (Seed-TTS-eval) and "
             "pooled (all errors / all reference words), each with its ratio recon / orig; DNSMOS of the "
             "reconstructions, the originals' on the `original` rows.", "",
             "| codec | voice | n | WER orig | WER recon | ratio | pooled orig | pooled recon | pooled ratio | PESQ-WB "
             "| STOI | MCD dB | OVRL | SIG | BAK | P.808 | encode xRT | decode xRT |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for spk in speakers + ["all"]:
        rows = [o for o in originals if spk in ("all", o["speaker"])]
        orig = aggregate([word_error(o["text"], o["hyp"]) for o in rows])
        lines.append(f"| original | {spk} | {len(rows)} | {fmt(orig.mean)} | | | {fmt(orig.pooled)} | | | | | "
                     f"| {mos_cells(rows)} | | |")
    text = {o["id"]: o["text"] for o in originals}
    for res in results:
        for spk in speakers + ["all"]:
            rows = [r for r in res["rows"] if spk in ("all", r["speaker"])]
            orig = aggregate([word_error(o["text"], o["hyp"]) for o in originals if spk in ("all", o["speaker"])])
            rec = aggregate([word_error(text[r["id"]], r["hyp"]) for r in rows])
            secs = sum(r["seconds"] for r in rows)
            enc_x = secs / sum(r["enc_s"] for r in rows)
            dec_x = secs / sum(r["dec_s"] for r in rows)
            ratio = rec.mean / orig.mean if orig.mean > 0 else None
            pooled_ratio = rec.pooled / orig.pooled if orig.pooled > 0 else None
            lines.append(f"| {res['codec']} | {spk} | {len(rows)} | {fmt(orig.mean)} | {fmt(rec.mean)} "
                         f"| {fmt(ratio, '.2f')} | {fmt(orig.pooled)} | {fmt(rec.pooled)} | {fmt(pooled_ratio, '.2f')} "
                         f"| {fmt(summarize(rows, 'pesq'), '.2f')} | {fmt(summarize(rows, 'stoi'))} "
                         f"| {fmt(summarize(rows, 'mcd'), '.2f')} | {mos_cells(rows)} | {enc_x:.0f} | {dec_x:.0f} |")
    lines.append("")
    for res in results:
        lines.append(f"{res['codec']}: {json.dumps(res['info'])}")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table + "\n")
    out.with_suffix(".json").write_text(json.dumps({"originals": originals, "codecs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
