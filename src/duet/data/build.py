"""Build a corpus: plan it, render what is missing on all cores, write the manifest and the summary.

Resumable by construction: every audio file is written atomically (temp file + rename, `sources.base`), so an
existing file at a planned path is complete; a rerun measures it and renders only what is missing. The manifest
is written once, atomically, at the end, from the plan and the files on disk, so an interrupted build leaves the
previous manifest (if any) intact and the next run finishes the job. ``max_hours`` stops a build on purpose once
that much new audio is rendered and writes the manifest of everything finished so far: a first slice to start
training on while a later run renders the rest.

``reuse`` names other corpus directories whose finished files (audio and timing sidecar) at the same relative path
are linked instead of rendered: presets that share a speaker (`joe` and `large` share the Piper voice) render
its utterances once.

A source file that cannot be decoded, or a synthesiser that fails on one text, costs that one utterance: it is
skipped, counted by reason and listed in the summary. Missing binaries or voices stop the build before any work
with a one-line `MissingDependency`.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from duet.data.expressive import manifest_events
from duet.data.manifest import Utterance, write_manifest
from duet.data.plan import CorpusPreset, PlannedUtterance, plan_corpus
from duet.data.sources.base import Renderer, RenderItem, finished_duration
from duet.data.summary import summarize, write_summary
from duet.data.timing import timing_path
from duet.text.prompts import prepare_input

MANIFEST_NAME = "manifest.jsonl"
_MAX_EXAMPLES = 10  # failure messages kept verbatim in the summary


@dataclass(frozen=True)
class BuildReport:
    out_dir: Path
    utterances: int  # in the manifest
    rendered: int  # newly written this run
    reused: int  # already on disk and valid
    skipped: int  # failed to render this run
    seconds: float
    summary: dict


def render_batch(renderer: Renderer, items: Sequence[RenderItem]) -> list[tuple[float | None, str | None]]:
    """Worker entry point: render items, then measure each written file. Per item (duration, None) or (None, error)."""
    try:
        errors = renderer.render(items)
    except Exception as err:  # a renderer bug must not lose the rest of the corpus; it is reported per item
        errors = [f"renderer crashed: {type(err).__name__}: {err}"] * len(items)
    results: list[tuple[float | None, str | None]] = []
    for item, err in zip(items, errors, strict=True):
        if err is not None:
            results.append((None, err))
            continue
        duration = finished_duration(item.out)
        results.append((duration, None) if duration else (None, f"unreadable output: {item.out}"))
    return results


def _batches(todo: list[PlannedUtterance], size: int) -> list[list[PlannedUtterance]]:
    """Batches of one speaker each, interleaved across speakers so every speaker progresses and the bar's ETA
    reflects the mix of slow (Festival) and fast (espeak-ng, recordings) work. Within a speaker the order is a
    seeded shuffle, so a partial build (``max_hours``) holds sentences and short items alike."""
    by_speaker: dict[str, list[PlannedUtterance]] = defaultdict(list)
    for u in todo:
        by_speaker[u.speaker].append(u)
    for speaker, utts in by_speaker.items():
        random.Random(f"render-order:{speaker}").shuffle(utts)
    per_speaker = [[utts[i : i + size] for i in range(0, len(utts), size)] for utts in by_speaker.values()]
    return [b for group in itertools.zip_longest(*per_speaker) for b in group if b]


def spoken_text(u: PlannedUtterance) -> str:
    """What a synthesiser reads: the text as every model reads it at inference (``duet.text.prompts.prepare_input``:
    English numbers, money and abbreviations written out; tags kept), so the audio, its timing sidecar and a model's
    tokens say the same words. The manifest keeps the text as written; recordings are read as they are."""
    return u.text if u.origin else prepare_input(u.text, u.language)


def _run(
    batches: list[list[PlannedUtterance]], root: Path, workers: int
) -> Iterator[tuple[list[PlannedUtterance], list[tuple[float | None, str | None]]]]:
    def items(batch: list[PlannedUtterance]) -> list[RenderItem]:
        return [RenderItem(u.id, spoken_text(u), str(root / u.path), u.origin) for u in batch]

    if workers <= 1:
        for batch in batches:
            yield batch, render_batch(batch[0].renderer, items(batch))
        return
    # fork, not spawn: spawn re-runs the caller's __main__, which breaks scripts without a main guard. Workers
    # only run subprocesses and soundfile, so threads the parent may hold (tqdm, torch) are never touched in them.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        pending: dict[Future, list[PlannedUtterance]] = {}
        queue = iter(batches)
        try:
            # Keep a few tasks per worker in flight rather than submitting thousands up front.
            for batch in itertools.islice(queue, 4 * workers):
                pending[pool.submit(render_batch, batch[0].renderer, items(batch))] = batch
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    batch = pending.pop(fut)
                    yield batch, fut.result()
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[pool.submit(render_batch, nxt[0].renderer, items(nxt))] = nxt
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def build_corpus(
    preset: CorpusPreset,
    out_dir: str | Path,
    workers: int | None = None,
    seed: int = 0,
    progress: bool = True,
    max_hours: float | None = None,
    reuse: Sequence[str | Path] = (),
) -> BuildReport:
    """Build (or finish building) `preset` into `out_dir`; returns counts and the summary dict."""
    start = time.monotonic()
    root = Path(out_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))

    plan = plan_corpus(preset, seed)
    for renderer in {u.renderer for u in plan.utterances}:
        renderer.check()

    durations: dict[str, float] = {}
    todo: list[PlannedUtterance] = []
    for u in plan.utterances:
        _link_finished(u.path, root, reuse)
        d = finished_duration(root / u.path)
        if d is None:
            todo.append(u)
        else:
            durations[u.id] = d
    reused = len(durations)

    skipped: dict[str, Counter[str]] = defaultdict(Counter)
    examples: list[str] = []
    rendered, new_seconds = 0, 0.0
    bar = tqdm(total=len(todo), unit="utt", desc=f"corpus {preset.name}", disable=not progress, smoothing=0.05)
    try:
        for batch, results in _run(_batches(todo, preset.batch_size), root, workers):
            for u, (duration, err) in zip(batch, results, strict=True):
                if err is None and duration is not None:
                    durations[u.id] = duration
                    rendered += 1
                    new_seconds += duration
                else:
                    skipped[u.source][str(err).split(":")[0]] += 1
                    if len(examples) < _MAX_EXAMPLES:
                        examples.append(f"{u.id}: {err}")
            bar.update(len(batch))
            if max_hours is not None and new_seconds >= 3600 * max_hours:
                break  # closing the generator shuts the pool down; the manifest below lists what is finished
    finally:
        bar.close()

    entries = [
        Utterance(u.id, u.text, u.language, u.speaker, u.path, round(durations[u.id], 4), u.source, u.split,
                  u.text_source, u.emotion, manifest_events(root / u.path) if u.emotion else ())
        for u in plan.utterances
        if u.id in durations
    ]
    entries.sort(key=lambda e: e.id)
    write_manifest(root / MANIFEST_NAME, entries)

    seconds = time.monotonic() - start
    n_skipped = sum(sum(c.values()) for c in skipped.values())
    extra = {
        "preset": preset.name,
        "seed": seed,
        "build": {"rendered": rendered, "reused": reused, "skipped": n_skipped, "workers": workers,
                  "planned": len(plan.utterances)},
        "seconds": round(seconds, 1),
        "skipped_examples": examples,
    }
    summary = summarize(entries, skipped, plan.dropped, extra)
    text = write_summary(root, summary)
    if progress:
        print(text)
        print(
            f"{len(entries)} utterances in {root / MANIFEST_NAME}: {rendered} rendered, {reused} reused, "
            f"{n_skipped} skipped, {seconds:.0f} s"
        )
    return BuildReport(root, len(entries), rendered, reused, n_skipped, seconds, summary)


def _link_finished(rel: str, root: Path, reuse: Sequence[str | Path]) -> None:
    """Hard-link (else copy) a finished file at ``rel`` and its timing sidecar from the first reuse directory that
    has it, unless ``root`` already has it."""
    target = root / rel
    if not reuse or target.exists():
        return
    for other in reuse:
        source = Path(other).resolve() / rel
        if finished_duration(source) is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        sidecar = timing_path(source)
        if sidecar.is_file():  # the sidecar first, as the renderers write it: a finished audio file has its timing
            link_or_copy(sidecar, timing_path(target))
        link_or_copy(source, target)
        return


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` becomes a hard link to ``source`` (a copy across file systems), put in place atomically."""
    tmp = target.with_name(target.name + ".link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # another file system
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
