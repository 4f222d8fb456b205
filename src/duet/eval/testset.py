"""Seed-TTS-eval test sets: the ``meta.lst`` format, a tolerant reader, and builders from duet's corpus.

One line per utterance, fields separated by ``|``::

    utt|prompt_text|prompt_wav|target_text[|gt_wav]

``utt`` names the output file (``<utt>.wav``); ``prompt_wav`` and ``gt_wav`` are paths, relative to the directory
of ``meta.lst`` unless absolute; ``target_text`` is what the system must say in the prompt's voice. This is the
layout of Seed-TTS-eval's ``test-en/meta.lst`` (4 fields) and its reconstruction lists (5 fields). We also accept an
empty ``prompt_text`` and ``prompt_wav`` together (no prompt: a system speaks in its default voice).

A bad line never stops a run: it becomes a :class:`Problem` carrying its line number, the line is skipped, and the
report counts it. Bad means: not 4 or 5 fields, an ``utt`` that cannot be a file name or repeats an earlier one, an
empty target text, half a prompt, or a wav path that does not exist. An existing file that turns out to be
unreadable is found when it is read (synthesis or scoring) and reported with the same line number.

Builders (``duet eval build-set``) turn the corpus manifest (:mod:`duet.data.manifest`) into such sets:
- ``clone``: every target of the split with more than ``max_short_words`` words, each paired with a prompt read by
  the same speaker (another sentence; from the same split where one exists, else from any split);
- ``short``: the short register (Gepard §3.3 / DESIGN.md §A): targets of 1-2 words, same pairing. 1-2 word inputs
  are where AR TTS runs away, stops late or skips words, so they get a set of their own.
- ``words`` (:func:`build_word_set`): N prompts of one or two words, without prompt or ground truth: the runaway
  probe at any size, since the corpus test split holds only a few dozen short utterances. The words are the
  corpus's own common words (:func:`corpus_words`: at least 3 uses in the manifest's texts of the language) or,
  without a manifest, a word list (Debian's ``/usr/share/dict/words``).
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from duet.errors import DuetError

_BAD_UTT = re.compile(r"[/\\\x00-\x1f]")
MAX_UTT_CHARS = 200


@dataclass(frozen=True)
class TestItem:
    __test__ = False  # a data class, not a pytest test class

    utt: str
    prompt_text: str  # "" = no prompt
    prompt_wav: Path | None  # resolved against meta.lst's directory
    target_text: str
    gt_wav: Path | None
    line: int  # 1-based line number in meta.lst, for error messages


@dataclass(frozen=True)
class Problem:
    """Something that made an utterance drop out, with where it happened."""

    line: int | None  # meta.lst line; None for problems not tied to one line
    utt: str | None
    stage: str  # "parse" | "synthesis" | "scoring"
    message: str

    def describe(self, source: str = "meta.lst") -> str:
        where = f"{source}:{self.line}" if self.line is not None else source
        return f"{where}: {self.stage}: {self.message}"


@dataclass(frozen=True)
class TestSet:
    __test__ = False

    path: Path  # the meta.lst file
    items: tuple[TestItem, ...]
    problems: tuple[Problem, ...] = ()
    lines: int = 0  # non-blank lines read

    @property
    def name(self) -> str:
        """A set is named by its directory (Seed-TTS-eval's ``test-en/meta.lst`` is "test-en")."""
        return self.path.parent.name or self.path.stem


def _resolve(base: Path, value: str) -> Path:
    p = Path(value)
    return p if p.is_absolute() else base / p


def _parse_line(text: str, lineno: int, base: Path, seen: set[str], check_files: bool) -> TestItem:
    """One ``meta.lst`` line -> a TestItem, or DuetError saying what is wrong with it."""
    fields = text.split("|")
    if len(fields) not in (4, 5):
        raise DuetError(f"expected 4 or 5 '|'-separated fields (utt|prompt_text|prompt_wav|target_text[|gt_wav]), "
                        f"got {len(fields)}")
    utt, prompt_text, prompt_wav, target_text = (f.strip() for f in fields[:4])
    gt_wav = fields[4].strip() if len(fields) == 5 else ""
    if not utt or utt in (".", "..") or _BAD_UTT.search(utt) or len(utt) > MAX_UTT_CHARS:
        raise DuetError(f"utt {utt!r} cannot be a file name")
    if utt in seen:
        raise DuetError(f"utt {utt!r} repeats an earlier line")
    if not target_text:
        raise DuetError(f"utt {utt!r} has an empty target text")
    if bool(prompt_text) != bool(prompt_wav):
        raise DuetError(f"utt {utt!r} has a prompt {'text' if prompt_text else 'wav'} but no prompt "
                        f"{'wav' if prompt_text else 'text'}")
    prompt_path = _resolve(base, prompt_wav) if prompt_wav else None
    gt_path = _resolve(base, gt_wav) if gt_wav else None
    if check_files:
        for what, path in (("prompt wav", prompt_path), ("gt wav", gt_path)):
            if path is not None and not path.is_file():
                raise DuetError(f"{what} is missing: {path}")
    return TestItem(utt, prompt_text, prompt_path, target_text, gt_path, lineno)


def read_meta(path: str | Path, check_files: bool = True) -> TestSet:
    """Read a ``meta.lst`` (or a directory holding one); bad lines become problems, never exceptions."""
    path = Path(path)
    if path.is_dir():
        path = path / "meta.lst"
    if not path.is_file():
        raise DuetError(f"test set not found: {path}")
    base = path.parent
    items: list[TestItem] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    lines = 0
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DuetError(f"{path} is not UTF-8 text: {err}") from err
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            item = _parse_line(line, lineno, base, seen, check_files)
        except DuetError as err:
            utt = line.split("|", 1)[0].strip() or None
            problems.append(Problem(lineno, utt, "parse", str(err)))
            continue
        seen.add(item.utt)
        items.append(item)
    return TestSet(path, tuple(items), tuple(problems), lines)


def format_line(item: TestItem, base: Path) -> str:
    """A TestItem as one ``meta.lst`` line, paths relative to ``base`` (the directory of the meta.lst)."""

    def rel(p: Path | None) -> str:
        return "" if p is None else os.path.relpath(Path(p).resolve(), base.resolve())

    for value in (item.utt, item.prompt_text, item.target_text):
        if "|" in value or "\n" in value:
            raise DuetError(f"{value!r} contains '|' or a newline, which meta.lst cannot hold")
    fields = [item.utt, item.prompt_text, rel(item.prompt_wav), item.target_text]
    if item.gt_wav is not None:
        fields.append(rel(item.gt_wav))
    return "|".join(fields)


def write_meta(path: str | Path, items: list[TestItem]) -> Path:
    """Write ``meta.lst`` atomically, paths relative to its directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(format_line(it, path.parent) + "\n" for it in items), encoding="utf-8")
    os.replace(tmp, path)
    return path


SPEAKERS_FILE = "speakers.json"  # optional, next to meta.lst: utt -> speaker of its prompt and target


def read_speakers(test_set: TestSet) -> dict[str, str]:
    """The set's ``speakers.json`` (written by ``build_set``) or {} when it has none (a Seed-TTS-eval set)."""
    path = test_set.path.parent / SPEAKERS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DuetError(f"{path} is unreadable or not JSON: {err}") from err
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise DuetError(f"{path} must map utterance ids to speaker names")
    return data


def impostor_prompts(items: Sequence[TestItem], speakers: dict[str, str], limit: int = 8) -> dict[str, list[Path]]:
    """utt -> up to ``limit`` prompt wavs of other speakers in the set (a deterministic, per-utt choice).

    What a cloned utterance's similarity to *other* voices is measured against (``sim_other``): a system that
    clones should be much closer to its own prompt than to these.
    """
    by_speaker: dict[str, set[Path]] = defaultdict(set)
    for it in items:
        if it.prompt_wav is not None and it.utt in speakers:
            by_speaker[speakers[it.utt]].add(it.prompt_wav)
    out = {}
    for it in items:
        if it.utt not in speakers:
            continue
        pool = sorted(p for spk, paths in by_speaker.items() if spk != speakers[it.utt] for p in paths)
        if pool:
            out[it.utt] = random.Random(it.utt).sample(pool, min(limit, len(pool)))
    return out


# --------------------------------------------------------------------------------------------------------------
# Building sets from the corpus


@dataclass(frozen=True)
class BuildConfig:
    kind: Literal["clone", "short"] = "clone"
    split: str = "test"  # "all": targets from every split (e.g. of voices held out of training)
    speakers: tuple[str, ...] = ()  # targets of these speakers only (() = all)
    per_speaker: int | None = None  # the first N targets of each speaker (manifest order)
    language: str = "en"  # the bundled ASR is English Whisper; other languages would measure the ASR
    max_short_words: int = 2  # short register: 1..max_short_words words; clone: more than that
    min_prompt_s: float = 2.0
    max_prompt_s: float = 10.0
    min_prompt_words: int = 3
    limit: int | None = None  # keep the first N targets (manifest order)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("clone", "short"):
            raise DuetError(f"set kind must be 'clone' or 'short', got {self.kind!r}")
        if not 0 < self.min_prompt_s <= self.max_prompt_s:
            raise DuetError(f"need 0 < min_prompt_s <= max_prompt_s, got {self.min_prompt_s}, {self.max_prompt_s}")
        if self.limit is not None and self.limit < 1:
            raise DuetError(f"limit must be at least 1, got {self.limit}")
        if self.per_speaker is not None and self.per_speaker < 1:
            raise DuetError(f"per_speaker must be at least 1, got {self.per_speaker}")

    def targets(self, entry) -> bool:
        """Whether a manifest entry's split and speaker make it a candidate target."""
        return ((self.split == "all" or entry.split == self.split)
                and (not self.speakers or entry.speaker in self.speakers))


@dataclass(frozen=True)
class BuiltSet:
    path: Path  # meta.lst
    items: int
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> targets left out


def _words(text: str) -> int:
    from duet.metrics.wer import normalize_text

    return len(normalize_text(text).split())


def build_set(manifest: str | Path, out_dir: str | Path, config: BuildConfig = BuildConfig()) -> BuiltSet:
    """Write ``out_dir/meta.lst`` (5 fields: gt_wav is the target's own recording) from a corpus manifest.

    Prompt choice is deterministic: candidates are sorted by id and one is drawn with a generator seeded by
    (seed, target id), so adding utterances to the corpus does not reshuffle the prompts of existing targets.
    """
    from duet.data.manifest import audio_path, read_manifest, split_key

    entries = read_manifest(manifest)
    if not any(config.targets(e) for e in entries):
        who = f" of speakers {', '.join(config.speakers)}" if config.speakers else ""
        raise DuetError(f"{manifest} has no entries{who} in split {config.split!r}")
    lang = [e for e in entries if e.language == config.language]
    by_speaker = defaultdict(list)
    for e in sorted(lang, key=lambda e: e.id):
        n = _words(e.text)
        if config.min_prompt_s <= e.duration <= config.max_prompt_s and n >= config.min_prompt_words:
            by_speaker[e.speaker].append(e)

    skipped: Counter[str] = Counter()
    items: list[TestItem] = []
    speakers: dict[str, str] = {}
    per_speaker: Counter[str] = Counter()
    for target in (e for e in lang if config.targets(e)):
        if config.per_speaker is not None and per_speaker[target.speaker] >= config.per_speaker:
            continue
        n = _words(target.text)
        is_short = 1 <= n <= config.max_short_words
        if n == 0 or is_short != (config.kind == "short"):
            continue
        if any(c in target.text for c in "|\n"):
            skipped["text holds '|' or a newline"] += 1
            continue
        key = split_key(target.text)
        candidates = [p for p in by_speaker[target.speaker] if p.id != target.id and split_key(p.text) != key
                      and "|" not in p.text]
        same_split = [p for p in candidates if p.split == target.split]
        pool = same_split or candidates
        if not pool:
            skipped["no prompt by the same speaker"] += 1
            continue
        prompt = random.Random(f"{config.seed}\x00{target.id}").choice(pool)
        items.append(TestItem(utt=target.id, prompt_text=prompt.text, prompt_wav=audio_path(manifest, prompt),
                              target_text=target.text, gt_wav=audio_path(manifest, target), line=len(items) + 1))
        speakers[target.id] = target.speaker
        per_speaker[target.speaker] += 1
        if config.limit is not None and len(items) >= config.limit:
            break
    if not items:
        raise DuetError(f"no {config.kind} targets in split {config.split!r} of {manifest} "
                        f"(language {config.language!r})")
    out_dir = Path(out_dir)
    path = write_meta(out_dir / "meta.lst", items)
    (out_dir / SPEAKERS_FILE).write_text(json.dumps(speakers, indent=1, sort_keys=True), encoding="utf-8")
    return BuiltSet(path, len(items), dict(skipped))


WORD_LIST = "/usr/share/dict/words"  # Debian wamerican
_PLAIN_WORD = re.compile(r"^[a-z]{3,10}$")


def corpus_words(manifest: str | Path, language: str = "en", min_count: int = 3) -> list[str]:
    """The plain words (lower-case, 3-10 letters) used at least ``min_count`` times in a manifest's texts."""
    from duet.data.manifest import read_manifest

    counts = Counter(w for e in read_manifest(manifest) if e.language == language
                     for w in re.findall(r"[a-z]+", e.text.lower()))
    return [w for w, n in counts.items() if n >= min_count and _PLAIN_WORD.match(w)]


def build_word_set(out_dir: str | Path, count: int = 100, words: str | Path | list[str] = WORD_LIST,
                   two_word_share: float = 0.3, seed: int = 0, reference=None) -> BuiltSet:
    """``count`` prompts of one word (and a ``two_word_share`` of two words) -> ``meta.lst``.

    ``words``: a list of words or a word-list file; only plain lower-case entries of 3-10 letters count (no names,
    no possessives). They are drawn with a seeded generator; items have no prompt, and no ground truth unless
    ``reference`` (a corpus voice's renderer) reads them (:func:`render_references`).
    """
    if count < 1:
        raise DuetError(f"a word set needs at least 1 item, got {count}")
    if not 0.0 <= two_word_share <= 1.0:
        raise DuetError(f"two_word_share must lie in [0, 1], got {two_word_share}")
    if isinstance(words, list):
        lines = words
    else:
        try:
            lines = Path(words).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as err:
            raise DuetError(f"cannot read the word list {words}: {err} (Debian: apt-get install wamerican)") from err
    pool = sorted({w.strip() for w in lines if _PLAIN_WORD.match(w.strip())})
    two = round(count * two_word_share)
    if len(pool) < count + two:
        raise DuetError(f"{words} has {len(pool)} plain words; {count + two} are needed")
    drawn = random.Random(seed).sample(pool, count + two)
    texts = drawn[: count - two] + [f"{a} {b}" for a, b in zip(drawn[count - two: count], drawn[count:])]
    items = [TestItem(utt=f"word-{i:04d}", prompt_text="", prompt_wav=None, target_text=text, gt_wav=None,
                      line=i + 1) for i, text in enumerate(texts)]
    if reference is not None:
        items = render_references(items, Path(out_dir), reference)
    return BuiltSet(write_meta(Path(out_dir) / "meta.lst", items), len(items), {})


def render_references(items: Sequence[TestItem], out_dir: Path, renderer) -> list[TestItem]:
    """Each item's target read by ``renderer`` (a corpus voice, ``duet.data.sources``) into ``out_dir/gt/``, set as
    its ground truth: a set without recordings then gets expected durations (late stops) and a reference WER."""
    from duet.data.sources.base import RenderItem

    renderer.check()
    gt = out_dir / "gt"
    gt.mkdir(parents=True, exist_ok=True)
    jobs = [RenderItem(it.utt, it.target_text, str(gt / f"{it.utt}.wav")) for it in items]
    errors = [e for e in renderer.render(jobs) if e is not None]
    if errors:
        raise DuetError(f"{renderer.name} could not read {len(errors)} of {len(jobs)} targets; first: {errors[0]}")
    return [replace(it, gt_wav=Path(job.out)) for it, job in zip(items, jobs, strict=True)]
