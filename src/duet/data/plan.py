"""What a corpus contains: `CorpusPreset` (the recipe) -> `plan_corpus` -> one `PlannedUtterance` per audio file.

Planning is cheap and deterministic under a seed (text pools are sorted, every random draw is seeded by
(seed, speaker)), so a rerun plans exactly the same ids and paths, which is what makes the build resumable.
Ids are `<speaker>-<hash of the text>` for synthesised speech and `<source>-<language>-<prompt name>` for
recordings, so they stay stable when a preset grows.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from duet.data.everyday import everyday_sentences
from duet.data.expressive import ExpressiveQuota, plan_readings
from duet.data.manifest import assign_split
from duet.data.sources.asterisk import AsteriskPrompts, list_prompts
from duet.data.sources.base import Renderer
from duet.data.sources.espeak import EspeakSpeaker
from duet.data.sources.festival import FestivalSpeaker
from duet.data.sources.flite import FliteSpeaker
from duet.data.sources.piper import PiperSpeaker
from duet.data.sources.pocketsphinx import PocketsphinxTestdata, list_recordings
from duet.data.sources.recorded import RecordedSpeaker
from duet.data.text_sources import EVERYDAY, WORDS, classic_source, sentence_pool, short_utterances, sourced_pool

SynthSpeaker = FestivalSpeaker | EspeakSpeaker | FliteSpeaker | PiperSpeaker


@dataclass(frozen=True)
class SpeakerQuota:
    """How much one synthetic speaker reads: `sentences` from its language's pool, `short` 1-2 word items and
    `everyday` conversational sentences (greetings, requests, questions: `duet.data.everyday`)."""

    speaker: SynthSpeaker
    sentences: int
    short: int = 0  # English only: the short register comes from an English word list
    everyday: int = 0  # English only; planned after the other items, so adding them replans nothing else


@dataclass(frozen=True)
class CorpusPreset:
    name: str
    voices: tuple[SpeakerQuota, ...]
    asterisk: tuple[AsteriskPrompts, ...] = ()
    pocketsphinx: PocketsphinxTestdata | None = None
    en_templates: int = 1000  # number/date/abbreviation sentences added to the English pool
    short_pool: int = 5000  # distinct 1-2 word utterances the speakers draw from
    val_fraction: float = 0.02
    test_fraction: float = 0.02
    batch_size: int = 16  # utterances per worker task
    # language -> text collections its voices read (duet.data.text_sources.sourced_pool); a language not named
    # here reads the first corpus's pool (fortunes + templates, `sentence_pool`), drawn as `base` always drew it
    text_sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # voices read in speaking styles with inline non-verbal events (duet.data.expressive); planned after the rest
    expressive: tuple[ExpressiveQuota, ...] = ()


@dataclass(frozen=True)
class PlannedUtterance:
    id: str
    text: str
    language: str
    speaker: str
    source: str
    path: str  # relative to the corpus directory
    split: str
    renderer: Renderer
    origin: str = ""  # recordings: the source file
    text_source: str = ""  # synthesised speech: the text collection (manifest `text_source`)
    emotion: str = ""  # expressive readings: the speaking style (manifest `emotion`)


@dataclass
class Plan:
    utterances: list[PlannedUtterance]
    dropped: dict[str, Counter[str]] = field(default_factory=dict)  # source -> reason -> count (not planned)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_")


def _text_id(speaker: str, text: str) -> str:
    return f"{speaker}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def _pick_sentences(preset: CorpusPreset, language: str, n: int, seed: int, rng: random.Random,
                    ) -> list[tuple[str, str]]:
    """A speaker's ``n`` sentences with their text source. Named collections: the first n of a permutation of the
    pool seeded by the speaker (so a larger n keeps every earlier pick); otherwise `base`'s draw, unchanged."""
    if language in preset.text_sources:
        pool = sourced_pool(language, preset.text_sources[language], seed, preset.en_templates)
        order = list(range(len(pool)))
        rng.shuffle(order)
        return [pool[i] for i in order[:n]]
    pool = sentence_pool(language, seed, preset.en_templates)
    return [(text, classic_source(text, language)) for text in rng.sample(pool, min(n, len(pool)))]


def _first_of_each(picked: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A short item may equal a pool sentence: keep the first of each text."""
    seen: dict[str, str] = {}
    for text, source in picked:
        seen.setdefault(text, source)
    return list(seen.items())


def plan_corpus(preset: CorpusPreset, seed: int = 0) -> Plan:
    """Every utterance of the corpus, with its text, speaker, split and output path (nothing is rendered)."""
    out: list[PlannedUtterance] = []
    dropped: dict[str, Counter[str]] = {}

    def add(uid: str, text: str, renderer: Renderer, origin: str = "", text_source: str = "", emotion: str = "",
            spoken: str | None = None) -> None:
        # split by the spoken words: a tagged reading lands in its sentence's split
        split = assign_split(text if spoken is None else spoken, seed, preset.val_fraction, preset.test_fraction)
        path = f"wavs/{renderer.name}/{uid}.wav"
        lang, name, source = renderer.language, renderer.name, renderer.source
        out.append(PlannedUtterance(uid, text, lang, name, source, path, split, renderer, origin, text_source,
                                    emotion))

    short = short_utterances(preset.short_pool, seed) if any(q.short for q in preset.voices) else []
    for quota in preset.voices:
        spk = quota.speaker
        if quota.short and spk.language != "en":
            raise ValueError(f"{spk.name}: the short register is English only (wamerican), got {spk.language}")
        rng = random.Random(f"{seed}:{spk.name}")
        picked = _pick_sentences(preset, spk.language, quota.sentences, seed, rng)
        if quota.short:
            picked += [(text, WORDS) for text in rng.sample(short, min(quota.short, len(short)))]
        if quota.everyday:
            if spk.language != "en":
                raise ValueError(f"{spk.name}: the everyday register is English only, got {spk.language}")
            picked += [(text, EVERYDAY) for text in everyday_sentences(quota.everyday, seed)]
        for text, text_source in _first_of_each(picked):
            add(_text_id(spk.name, text), text, spk, text_source=text_source)

    for cfg in preset.asterisk:
        prompts, why = list_prompts(cfg)
        dropped.setdefault("asterisk", Counter()).update(why)
        speaker = RecordedSpeaker(cfg.speaker, "asterisk", cfg.language, needs_ffmpeg=True)
        for p in prompts:
            add(f"asterisk-{cfg.language}-{_slug(p.name)}", p.text, speaker, str(p.path))

    if preset.pocketsphinx is not None:
        for rec in list_recordings(preset.pocketsphinx):
            speaker = RecordedSpeaker(rec.speaker, "pocketsphinx", "en")
            add(f"pocketsphinx-en-{_slug(rec.name)}", rec.text, speaker, str(rec.path))

    for equota in preset.expressive:
        voice = equota.voice
        rng = random.Random(f"{seed}:{voice.name}:expressive")
        picked = _pick_sentences(preset, voice.language, equota.sentences, seed, rng)
        for tagged, text, text_source, spk, style in plan_readings(equota, picked, seed):
            add(_text_id(spk.name, tagged), tagged, spk, text_source=text_source, emotion=style, spoken=text)

    ids = Counter(u.id for u in out)
    clashes = [i for i, n in ids.items() if n > 1]
    if clashes:
        raise ValueError(f"preset {preset.name!r} plans duplicate ids, e.g. {clashes[:3]}")
    return Plan(out, dropped)
