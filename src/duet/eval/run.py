"""``duet eval run``: synthesise a test set with one system, score it, write the report. Resumable at every step.

Run directory::

    run.json            what was run (model spec, system name, set, options); a second run into the same
                        directory must name the same model and set
    wavs/<utt>.wav      one per test item (Seed-TTS-eval layout); written atomically, so a file that exists is done
    wavs/<utt>.json     what the synthesiser reported (wall time, time to first audio, frames, how it ended)
    probes/<utt>.json   per-frame entropy and stop probability, with a plot (.png), for systems that return probes
    scores.jsonl        one row of scores per utterance, keyed by the wav's size and mtime and the metric config,
                        appended as each is scored, so an interrupted scoring pass resumes too
    summary.json        set-level numbers, problems (with meta.lst line numbers), counts
    report.md, report.html, plots/*.png

Resuming: items whose ``<utt>.wav`` exists (and whose sidecar says it was made for the same texts and wavs, so an
edited meta.lst line is redone) are not synthesised again, and utterances whose score row matches their current
wav and the metric configuration are not scored again. Delete a wav to redo it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from duet.errors import DuetError
from duet.eval.scoring import ScoreConfig, Scorer, summarize
from duet.eval.synth import Synthesis, Synthesizer, SynthOptions, load_synthesizer
from duet.eval.testset import Problem, TestItem, TestSet, impostor_prompts, read_meta, read_speakers

RUN_FORMAT = 1


@dataclass(frozen=True)
class RunConfig:
    model: str  # synthesiser spec, e.g. "ground-truth", "codec:duet-fsq"
    test_set: Path  # meta.lst or its directory
    out_dir: Path
    synth: SynthOptions = SynthOptions()
    score: ScoreConfig = ScoreConfig()
    limit: int | None = None  # first N items of the set
    progress: bool = True
    report: bool = True


@dataclass
class RunResult:
    out_dir: Path
    summary: dict[str, Any]
    rows: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    synthesized: int = 0  # items synthesised in this invocation (the rest were already on disk)
    scored: int = 0  # items scored in this invocation


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _check_run_dir(out_dir: Path, info: dict[str, Any]) -> None:
    """Refuse to mix two systems or two sets in one directory (their wavs would be confused)."""
    path = out_dir / "run.json"
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        for key in ("model", "test_set"):
            if old.get(key) != info[key]:
                raise DuetError(f"{out_dir} holds a run of {key} {old.get(key)!r}, not {info[key]!r}; "
                                "use another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(path, info)


def _signature(item: TestItem) -> dict[str, str]:
    """What an output depends on in its test item; an edited meta.lst line makes the old wav stale."""
    return {"target_text": item.target_text, "prompt_text": item.prompt_text,
            "prompt_wav": str(item.prompt_wav or ""), "gt_wav": str(item.gt_wav or "")}


def is_done(out_dir: Path, item: TestItem) -> bool:
    """A wav exists and was made for this very item (same texts and wavs) by an earlier pass."""
    if not (out_dir / "wavs" / f"{item.utt}.wav").is_file():
        return False
    sidecar = out_dir / "wavs" / f"{item.utt}.json"
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return True  # a wav put there by hand, without a sidecar: keep it
    return meta.get("item", _signature(item)) == _signature(item)


def _save_synthesis(out_dir: Path, item: TestItem, synthesis: Synthesis) -> None:
    """Sidecar and probes first, the wav last and atomically: an existing wav means the item is complete."""
    from duet.audio import save_audio

    meta = {k: v for k, v in asdict(synthesis).items() if k not in ("audio", "stop_prob", "entropy")}
    meta["duration_s"] = synthesis.duration_s
    meta["item"] = _signature(item)
    _write_json(out_dir / "wavs" / f"{item.utt}.json", meta)
    if synthesis.stop_prob is not None and synthesis.entropy is not None:
        import torch

        from duet.gepard.probes import FrameProbes, save_probes

        probes = FrameProbes(entropy=torch.tensor(synthesis.entropy, dtype=torch.float32)[None],  # (1, N, C)
                             stop_prob=torch.tensor(synthesis.stop_prob, dtype=torch.float32)[None])  # (1, N)
        save_probes(probes, out_dir / "probes" / item.utt, frame_rate=synthesis.frame_rate,
                    title=f"{item.utt}: {item.target_text[:60]}")
    tmp_dir = out_dir / "wavs" / ".partial"
    tmp = save_audio(tmp_dir / f"{item.utt}.wav", synthesis.audio, synthesis.sample_rate)
    os.replace(tmp, out_dir / "wavs" / f"{item.utt}.wav")


def synthesize_set(synthesizer: Synthesizer, items: Sequence[TestItem], out_dir: Path,
                   progress: bool = True) -> tuple[int, list[Problem]]:
    """Synthesise the items whose wav is missing, batch by batch; returns (count done, problems)."""
    from tqdm import tqdm

    (out_dir / "wavs").mkdir(parents=True, exist_ok=True)
    todo = [it for it in items if not is_done(out_dir, it)]
    problems: list[Problem] = []
    done = 0
    size = max(1, synthesizer.batch_size)
    with tqdm(total=len(todo), desc=f"synthesise {synthesizer.name}", unit="utt", disable=not progress) as bar:
        for start in range(0, len(todo), size):
            batch = todo[start:start + size]
            try:
                results: list[Synthesis | DuetError] = list(synthesizer.synthesize(batch))
            except DuetError as err:
                if len(batch) == 1:
                    results = [err]
                else:  # find the item that failed: redo the batch one by one
                    results = []
                    for it in batch:
                        try:
                            results.extend(synthesizer.synthesize([it]))
                        except DuetError as one:
                            results.append(one)
            if len(results) != len(batch):
                raise DuetError(f"{synthesizer.name} returned {len(results)} results for {len(batch)} items")
            for item, res in zip(batch, results, strict=True):
                if isinstance(res, DuetError):
                    problems.append(Problem(item.line, item.utt, "synthesis", str(res)))
                else:
                    _save_synthesis(out_dir, item, res)
                    done += 1
            bar.update(len(batch))
    return done, problems


def _load_cache(path: Path) -> dict[str, dict]:
    cache: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                cache[row["utt"]] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut short by an interruption: that utterance is scored again
    return cache


def _cache_key(wav: Path, fingerprint: str, impostors: Sequence[Path] = ()) -> dict[str, Any]:
    """What a cached score row depends on: the wav, the score config and (for ``sim_other``) the other speakers'
    prompts it was compared with, which change with the set's ``speakers.json`` and ``--limit``."""
    st = wav.stat()
    key: dict[str, Any] = {"wav_bytes": st.st_size, "wav_mtime_ns": st.st_mtime_ns, "metrics": fingerprint}
    if impostors:
        key["impostors"] = [str(p) for p in impostors]
    return key


def score_set(scorer: Scorer, items: Sequence[TestItem], out_dir: Path, reconstructs_reference: bool,
              progress: bool = True) -> tuple[list[dict], int, list[Problem]]:
    """Score every item that has a wav; reuses cached rows. Returns (rows in set order, newly scored, problems)."""
    from tqdm import tqdm

    cache_path = out_dir / "scores.jsonl"
    cache = _load_cache(cache_path)
    fingerprint = scorer.config.fingerprint()
    rows: list[dict] = []
    problems: list[Problem] = []
    fresh = 0
    present = [it for it in items if (out_dir / "wavs" / f"{it.utt}.wav").is_file()]
    with open(cache_path, "a", encoding="utf-8") as cache_file:
        for item in tqdm(present, desc="score", unit="utt", disable=not progress):
            wav = out_dir / "wavs" / f"{item.utt}.wav"
            impostors = scorer.impostors.get(item.utt, []) if "sim" in scorer.config.metrics else []
            key = _cache_key(wav, fingerprint, impostors)
            cached = cache.get(item.utt)
            if cached is not None and cached.get("key") == key:
                rows.append(cached)
                continue
            sidecar = out_dir / "wavs" / f"{item.utt}.json"
            synthesis = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.is_file() else {}
            try:
                row = scorer.score(item, wav, synthesis, reconstructs_reference)
            except DuetError as err:
                problems.append(Problem(item.line, item.utt, "scoring", str(err)))
                continue
            row["key"] = key
            cache_file.write(json.dumps(row, ensure_ascii=False) + "\n")
            cache_file.flush()
            rows.append(row)
            fresh += 1
    # Compact: the rows of this set's current wavs only, replaced atomically.
    tmp = cache_path.with_name(cache_path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, cache_path)
    return rows, fresh, problems


def per_speaker(rows: Sequence[dict], speakers: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Speaker -> the set-level numbers of its utterances (sets that name their speakers; {} otherwise)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if r["utt"] in speakers:
            by.setdefault(speakers[r["utt"]], []).append(r)
    return {name: summarize(by[name]) for name in sorted(by)}


def run_eval(config: RunConfig, synthesizer: Synthesizer | None = None) -> RunResult:
    """Synthesise (what is missing), score (what is not cached), summarise and report one system on one set."""
    test_set: TestSet = read_meta(config.test_set)
    items = list(test_set.items)
    if config.limit is not None:
        if config.limit < 1:
            raise DuetError(f"--limit must be at least 1, got {config.limit}")
        items = items[: config.limit]
    if synthesizer is None:
        synthesizer = load_synthesizer(config.model, config.synth)
    out_dir = Path(config.out_dir)
    info = {"format": RUN_FORMAT, "model": config.model, "system": synthesizer.name,
            "test_set": str(test_set.path.resolve()), "set_name": test_set.name,
            "reconstructs_reference": synthesizer.reconstructs_reference,
            "synth": asdict(config.synth), "score": json.loads(config.score.fingerprint()), "limit": config.limit}
    _check_run_dir(out_dir, info)

    started = time.perf_counter()
    try:
        synthesized, synth_problems = synthesize_set(synthesizer, items, out_dir, config.progress)
    finally:
        close = getattr(synthesizer, "close", None)
        if close is not None:
            close()
    speakers = read_speakers(test_set)
    impostors = impostor_prompts(items, speakers)
    rows, scored, score_problems = score_set(Scorer(config.score, impostors), items, out_dir,
                                             synthesizer.reconstructs_reference, config.progress)
    problems = list(test_set.problems) + synth_problems + score_problems
    summary = {
        **{k: info[k] for k in ("model", "system", "test_set", "set_name", "reconstructs_reference")},
        "score_config": info["score"],
        "set_lines": test_set.lines,
        "set_items": len(items),
        "skipped": {stage: sum(p.stage == stage for p in problems) for stage in ("parse", "synthesis", "scoring")},
        "problems": [asdict(p) for p in problems],
        "metrics": summarize(rows),
        "per_speaker": per_speaker(rows, speakers),
        "elapsed_s": time.perf_counter() - started,
    }
    _write_json(out_dir / "summary.json", summary)
    result = RunResult(out_dir, summary, rows, problems, synthesized, scored)
    if config.report:
        from duet.eval.report import write_report

        write_report(out_dir, summary, rows)
    return result
