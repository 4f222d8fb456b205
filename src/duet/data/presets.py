"""Named corpus presets: `tiny` (tests; under a minute on 2 cores), `base` (~10 h; the first shipped models'
corpus, kept as it was), `joe` (12+ h of the neural Piper voice alone, for single-voice demo models), `large`
(25+ h of English over many voices, `joe`'s Piper audio included, plus the other languages as in `base`), `voices`
(~18 h of 83 timed English voices for voice cloning, four of them for unseen-voice evaluation) and `expressive`
(`joe` plus styled readings with inline non-verbal events, `duet.data.expressive`).

`joe` and `large` read ten times `base`'s distinct text: the fortunes, the templates and four books
(``duet.data.books``), each sentence tagged with its collection (the manifest's `text_source`).

Each preset is a function returning a frozen `CorpusPreset`, so a test can build every one of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from duet.data.expressive import ExpressiveQuota
from duet.data.plan import CorpusPreset, SpeakerQuota
from duet.data.sources.asterisk import AsteriskPrompts
from duet.data.sources.espeak import EspeakSpeaker
from duet.data.sources.festival import FestivalSpeaker
from duet.data.sources.flite import FliteSpeaker
from duet.data.sources.piper import PiperSpeaker
from duet.data.sources.pocketsphinx import PocketsphinxTestdata

ASTERISK_EN = AsteriskPrompts()
ASTERISK_ES = AsteriskPrompts(
    language="es",
    speaker="asterisk-allison",  # the same voice actor as the English set (es_MX_f_Allison)
    sound_dir=Path("/usr/share/asterisk/sounds/es"),
    transcripts=Path("/usr/share/doc/asterisk-core-sounds-es/core-sounds-es.txt.gz"),
    packages="asterisk-core-sounds-es asterisk-core-sounds-es-g722",
)
ASTERISK_FR = AsteriskPrompts(
    language="fr",
    speaker="asterisk-june",
    sound_dir=Path("/usr/share/asterisk/sounds/fr"),
    transcripts=Path("/usr/share/doc/asterisk-core-sounds-fr/core-sounds-fr.txt.gz"),
    packages="asterisk-core-sounds-fr asterisk-core-sounds-fr-g722",
)

_FESTIVAL_SHORT = {"cmu_us_slt_arctic_hts": "slt", "kal_diphone": "kal", "ked_diphone": "ked"}


def festival(voice: str, rate: float = 1.0, semitones: float = 0.0, formant: float | None = None) -> FestivalSpeaker:
    name = f"festival-{_FESTIVAL_SHORT.get(voice, voice)}"
    if rate != 1.0 or semitones:
        name += f"-p{semitones:+g}-r{rate:g}"
    if formant is not None:
        name += f"-t{formant:g}"
    return FestivalSpeaker(name, voice, rate=rate, semitones=semitones, formant=formant)


def espeak(voice: str, variant: str = "", pitch: int = 50, rate: int = 175, language: str = "en") -> EspeakSpeaker:
    name = f"espeak-{voice}" + (f"-{variant}" if variant else "") + f"-p{pitch}-s{rate}"
    return EspeakSpeaker(name, voice, variant=variant, pitch=pitch, rate=rate, language=language)


def tiny() -> CorpusPreset:
    """~40 short utterances, 7 speakers, 4 sources, 2 languages: for tests."""
    return CorpusPreset(
        name="tiny",
        voices=(
            SpeakerQuota(festival("cmu_us_slt_arctic_hts"), sentences=8, short=3),
            SpeakerQuota(festival("kal_diphone"), sentences=6, short=2),
            SpeakerQuota(festival("kal_diphone", rate=1.15, semitones=2), sentences=3),
            SpeakerQuota(espeak("en-us", "f3", pitch=60, rate=165), sentences=6, short=2),
            SpeakerQuota(espeak("es", language="es"), sentences=4),
        ),
        asterisk=(AsteriskPrompts(max_prompts=6),),
        pocketsphinx=PocketsphinxTestdata(max_items=2),
        en_templates=50,
        short_pool=200,
        val_fraction=0.15,
        test_fraction=0.15,
        batch_size=4,
    )


# espeak-ng English speakers for `base`: (voice, variant, pitch, rate). Spread over both accents, male and female
# variants, and pitch/rate corners, so the models see many voices; each reads a little (Whisper finds them hard).
_BASE_ESPEAK_EN = (
    ("en-us", "", 50, 175),
    ("en-us", "f3", 60, 165),
    ("en-us", "m3", 45, 180),
    ("en-us", "klatt", 50, 170),
    ("en-us", "f1", 65, 160),
    ("en-us", "m1", 40, 175),
    ("en-us", "f5", 55, 185),
    ("en-us", "m7", 35, 160),
    ("en-us", "Annie", 55, 170),
    ("en-us", "Andy", 45, 175),
    ("en-us", "f4", 70, 150),
    ("en-us", "m2", 50, 195),
    ("en-gb", "", 50, 175),
    ("en-gb", "f2", 60, 170),
    ("en-gb", "m4", 40, 165),
    ("en-gb", "klatt3", 50, 180),
    ("en-gb", "f4", 62, 160),
    ("en-gb", "m5", 45, 185),
    ("en-gb", "adam", 48, 170),
    ("en-gb", "Alicia", 58, 165),
)
_BASE_ESPEAK_OTHER = (
    ("es", "", 50, 170),
    ("es", "f3", 62, 160),
    ("pt-br", "", 50, 170),
    ("pt-br", "m3", 45, 165),
    ("nl", "", 50, 170),
    ("nl", "f2", 60, 160),
    ("ky", "", 50, 165),
)


def base() -> CorpusPreset:
    """About 10 h: Festival slt and kal get the largest share (Whisper understands them, DESIGN §C), 8 Festival
    rate/pitch variants and 20 espeak-ng English voices add speakers, all usable English Asterisk prompts and the
    pocketsphinx recordings add real speech, ~10% is other languages (Asterisk es/fr, espeak-ng es/pt-br/nl/ky)
    and ~10% of the hours are 1-2 word utterances (the short register the tiny models failed on, DESIGN §D).

    Festival renders about 15-25x real time per process, so this takes roughly 15-40 minutes on 2 cores.
    """
    slt, kal, ked = "cmu_us_slt_arctic_hts", "kal_diphone", "ked_diphone"
    variants = (
        festival(slt, 1.0, 2),
        festival(slt, 0.9, -2),
        festival(slt, 1.15, 0),
        festival(slt, 1.1, 3),
        festival(kal, 1.1, 2),
        festival(kal, 0.9, -2),
        festival(kal, 1.0, 4),
        festival(ked, 0.9, 2),
    )
    voices = (
        SpeakerQuota(festival(slt), sentences=2200, short=900),
        SpeakerQuota(festival(kal), sentences=1500, short=600),
        SpeakerQuota(festival(ked), sentences=500, short=150),
        *(SpeakerQuota(v, sentences=150, short=50) for v in variants),
        *(SpeakerQuota(espeak(v, var, p, r), sentences=80, short=25) for v, var, p, r in _BASE_ESPEAK_EN),
        *(SpeakerQuota(espeak(v, var, p, r, language=v), sentences=60) for v, var, p, r in _BASE_ESPEAK_OTHER),
    )
    return CorpusPreset(
        name="base",
        voices=voices,
        asterisk=(ASTERISK_EN, ASTERISK_ES, replace(ASTERISK_FR, max_prompts=300)),
        pocketsphinx=PocketsphinxTestdata(),
        en_templates=1500,
        short_pool=6000,
        val_fraction=0.02,
        test_fraction=0.02,
        batch_size=16,
    )


# English collections of the large presets, in de-duplication order (a sentence is credited to the first that has it)
LARGE_TEXTS = ("fortunes", "templates", "austen", "wordnet", "tdavid", "web")


def piper(length_scale: float = 1.0, formant: float = 1.0, semitones: float = 0.0) -> PiperSpeaker:
    name = "piper-joe" + (f"-l{length_scale:g}" if length_scale != 1.0 else "")
    if formant != 1.0 or semitones:
        name += f"-t{formant:g}{semitones:+g}"
    return PiperSpeaker(name, length_scale=length_scale, formant=formant, semitones=semitones)


def _joe_quota() -> SpeakerQuota:
    return SpeakerQuota(piper(), sentences=11000, short=1500, everyday=600)


def joe() -> CorpusPreset:
    """The neural Piper voice alone: 11,000 sentences from the large pool, 1,500 one/two-word items and 600
    everyday sentences (greetings, requests, questions; planned last, so a `joe` built before them only adds them):
    about 12.4 h (the first probe was intelligible from 4.4 h of one voice; distinct text matters more than hours).
    Piper writes its phone timing next to each file, which aligned text input trains on. About 35 minutes on 2
    otherwise idle cores."""
    return CorpusPreset(
        name="joe",
        voices=(_joe_quota(),),
        en_templates=1500,
        short_pool=6000,
        val_fraction=0.02,
        test_fraction=0.02,
        batch_size=16,
        text_sources={"en": LARGE_TEXTS},
    )


def flite(voice: str, rate: float = 1.0, pitch: float | None = None, formant: float = 1.0) -> FliteSpeaker:
    name = f"flite-{voice}" + (f"-f{pitch:g}" if pitch is not None else "") + (f"-r{rate:g}" if rate != 1.0 else "")
    name += f"-t{formant:g}" if formant != 1.0 else ""
    return FliteSpeaker(name, voice, rate=rate, pitch=pitch, formant=formant)


def large() -> CorpusPreset:
    """About 30 h of English (an estimate before the first build) over 39 voices, and other languages as in base:

    - the Piper voice as in `joe` (12.1 h; `--reuse` a built `joe` to link its audio instead of rendering it),
      and a faster reading of it (length scale 0.85);
    - Festival slt, kal and ked and their rate/pitch variants (about 9 h: what Whisper understands best after Piper);
    - Flite's statistical voices awb (Scottish male), rms (US male) and slt (about 5 h), the new speakers;
    - `base`'s espeak-ng English voices, a little each; the recordings and the other languages as in `base`.

    Every English voice reads from the large pool (`LARGE_TEXTS`), so most sentences are read once; splits are by
    text, so a test sentence is never heard in training in any voice. Besides `joe`'s Piper hours, roughly 30-40
    minutes on 2 cores (Festival is the slow part).
    """
    slt, kal, ked = "cmu_us_slt_arctic_hts", "kal_diphone", "ked_diphone"
    variants = (
        festival(slt, 1.0, 2),
        festival(slt, 0.9, -2),
        festival(slt, 1.15, 0),
        festival(kal, 1.1, 2),
        festival(kal, 0.9, -2),
        festival(ked, 0.9, 2),
    )
    voices = (
        _joe_quota(),
        SpeakerQuota(piper(0.85), sentences=800, short=100),
        SpeakerQuota(festival(slt), sentences=3000, short=600),
        SpeakerQuota(festival(kal), sentences=2000, short=400),
        SpeakerQuota(festival(ked), sentences=800, short=150),
        *(SpeakerQuota(v, sentences=250, short=50) for v in variants),
        SpeakerQuota(flite("awb"), sentences=1500, short=300),
        SpeakerQuota(flite("rms"), sentences=1500, short=300),
        SpeakerQuota(flite("slt"), sentences=800, short=150),
        SpeakerQuota(flite("awb", 1.15), sentences=300, short=50),
        *(SpeakerQuota(espeak(v, var, p, r), sentences=100, short=25) for v, var, p, r in _BASE_ESPEAK_EN),
        *(SpeakerQuota(espeak(v, var, p, r, language=v), sentences=60) for v, var, p, r in _BASE_ESPEAK_OTHER),
    )
    # recordings, templates, short pool, splits and batches as in `base`
    return replace(base(), name="large", voices=voices, text_sources={"en": LARGE_TEXTS, "es": ("fortunes", "sparv")})


# Piper timbres for `voices`: (length scale, formant scale, semitones). Lower formants with a lower pitch sound like
# larger (male) speakers, higher ones with a raised pitch like smaller (female, younger) ones; each is another
# speaker to the speaker encoder (Resemblyzer cosine 0.4-0.7 to joe, against ~0.9 between two readings of one voice).
_PIPER_TIMBRES = (
    (1.0, 0.86, -5), (1.1, 0.9, -3), (0.95, 0.93, 2), (1.0, 0.96, -2), (1.05, 1.05, 3), (0.9, 1.08, 5),
    (1.0, 1.12, 7), (1.1, 1.15, 10), (0.95, 1.18, 12), (1.0, 1.22, 9),
    (1.05, 0.83, -8), (0.95, 0.89, 0), (1.0, 1.0, -4), (1.05, 1.1, 1),
)
# Flite and Festival timbres for `voices`, the same vocal-tract move for the engines' own voices, so a voice of an
# engine that training never heard (Flite rms, Festival ked) has neighbours of its engine: Flite (voice, f0 Hz,
# rate, formant scale) and Festival (voice, rate, semitones, formant scale where the formants end)
_FLITE_TIMBRES = (
    ("awb", 100, 1.0, 0.92), ("awb", 110, 0.95, 0.97), ("awb", 150, 1.05, 1.08), ("awb", 185, 1.0, 1.16),
    ("slt", 105, 1.0, 0.8), ("slt", 125, 1.05, 0.86), ("slt", 150, 0.95, 0.93), ("slt", 230, 1.0, 1.08),
)
_FESTIVAL_TIMBRES = (
    ("kal_diphone", 1.0, -2, 0.9), ("kal_diphone", 1.05, 3, 1.1), ("kal_diphone", 0.95, 6, 1.2),
    ("cmu_us_slt_arctic_hts", 1.0, -6, 0.84), ("cmu_us_slt_arctic_hts", 1.1, -3, 0.9),
    ("cmu_us_slt_arctic_hts", 0.95, 2, 1.08),
)
# espeak-ng English speakers for `voices`: accents x variants x pitch; none of the held-out ones' variants (f3, m4)
_VOICES_ESPEAK_EN = tuple(
    (voice, variant, pitch, rate)
    for voice, variants in (
        ("en-us", ("", "m1", "f1", "m3", "f2", "klatt", "Andy", "Annie", "m7", "f5", "Alex", "linda")),
        ("en-gb", ("", "m2", "f4", "klatt3", "adam", "Alicia", "m5", "steph", "edward")),
        ("en-gb-scotland", ("", "m6", "f2", "klatt2")),
        ("en-gb-x-rp", ("", "m8", "f5", "belinda")),
        ("en-us-nyc", ("", "m3", "f1", "travis")),
        ("en-029", ("", "m1", "f4")),
        ("en-gb-x-gbclan", ("", "f1")),
    )
    for i, variant in enumerate(variants)
    for pitch, rate in ((40 + (7 * i) % 35, 160 + (11 * i) % 40),)
)
# Held out of `voices` training by `--hold-out-speakers` (their own accents or engines are not heard otherwise), read
# only so evaluation has prompts and targets of voices the model never heard
VOICES_HELD_OUT = ("flite-rms", "festival-ked", "espeak-en-us-f3-p60-s165", "espeak-en-gb-m4-p40-s165")


def voices() -> CorpusPreset:
    """Many timed English voices for voice cloning, about 18 h: a cloning prefix trained on a few voices picks
    among them; describing a new one takes many. Every speaker writes phone and word timing (aligned text input):

    - Piper joe (as in `joe`, a share of it) and fourteen timbres of it (formant scale and pitch after synthesis,
      with a speaking rate each: `_PIPER_TIMBRES`), the natural-sounding speakers;
    - Festival slt and kal with four rate/pitch variants and six timbres (`_FESTIVAL_TIMBRES`), Flite awb and slt
      with four pitch and rate variants and eight timbres (`_FLITE_TIMBRES`);
    - 40 espeak-ng English voices over seven accents (`_VOICES_ESPEAK_EN`), timed through its library;
    - 40 sentences each of the held-out voices `VOICES_HELD_OUT`, for evaluation on unseen speakers.

    English only, read from the large pool; splits are by text, as in `large`. 18,320 utterances, 18.1 h, built
    in 23 minutes on 2 cores (Piper is most of it)."""
    slt, kal = "cmu_us_slt_arctic_hts", "kal_diphone"
    held_out = (flite("rms"), festival("ked_diphone"), espeak("en-us", "f3", pitch=60, rate=165),
                espeak("en-gb", "m4", pitch=40, rate=165))
    voices = (
        SpeakerQuota(piper(), sentences=1500, short=200, everyday=100),
        *(SpeakerQuota(piper(*t), sentences=300, short=40) for t in _PIPER_TIMBRES[:10]),
        *(SpeakerQuota(piper(*t), sentences=250, short=30) for t in _PIPER_TIMBRES[10:]),
        SpeakerQuota(festival(slt), sentences=600, short=100),
        SpeakerQuota(festival(kal), sentences=500, short=100),
        *(SpeakerQuota(festival(v, r, p), sentences=150, short=20)
          for v, r, p in ((slt, 0.9, -3), (slt, 1.1, 4), (kal, 1.1, 3), (kal, 0.95, -3))),
        SpeakerQuota(flite("awb"), sentences=500, short=80),
        SpeakerQuota(flite("slt"), sentences=500, short=80),
        *(SpeakerQuota(flite(v, r, pitch=f0), sentences=200, short=30)
          for v, f0, r in (("awb", 80, 1.0), ("awb", 140, 1.1), ("slt", 140, 0.95), ("slt", 220, 1.0))),
        *(SpeakerQuota(flite(v, r, pitch=f0, formant=f), sentences=200, short=30) for v, f0, r, f in _FLITE_TIMBRES),
        *(SpeakerQuota(festival(v, r, p, formant=f), sentences=200, short=30) for v, r, p, f in _FESTIVAL_TIMBRES),
        *(SpeakerQuota(espeak(v, var, p, r), sentences=100, short=20) for v, var, p, r in _VOICES_ESPEAK_EN),
        *(SpeakerQuota(v, sentences=40) for v in held_out),
    )
    assert tuple(q.speaker.name for q in voices[-len(held_out):]) == VOICES_HELD_OUT
    return replace(joe(), name="voices", voices=voices)


def expressive() -> CorpusPreset:
    """`joe` plus its voice in six speaking styles (neutral, happy, sad, angry, surprised, whisper: each sentence
    read in all six) with breath, cough, laughter and sigh spliced into half of the readings, and a few other voices
    in the same styles so a style is not one voice's habit (the emotion classifier, ``duet.eval.emotion``, trains on
    them all): Festival slt and Flite awb with events (both write word timing), espeak-ng without (its styled readings
    go through the program with SSML for the pitch range, which writes no timing).

    About 600 x 6 Piper readings (~4.5 h) and 150 x 6 for each other voice (~2.5 h) on top of `joe`'s 12.4 h;
    `--reuse` a built `joe` to link its audio. Roughly 15-25 minutes on 2 cores besides `joe`."""
    styled = (
        ExpressiveQuota(piper(), sentences=600),
        ExpressiveQuota(festival("cmu_us_slt_arctic_hts"), sentences=150),
        ExpressiveQuota(flite("awb"), sentences=150),
        ExpressiveQuota(espeak("en-us", "f3", pitch=60, rate=165), sentences=150, event_share=0.0),
    )
    return replace(joe(), name="expressive", expressive=styled)


PRESETS: dict[str, Callable[[], CorpusPreset]] = {"tiny": tiny, "base": base, "joe": joe, "large": large,
                                                  "voices": voices, "expressive": expressive}


def get_preset(name: str) -> CorpusPreset:
    from duet.config_io import pick_preset

    return pick_preset(PRESETS, name, "corpus")


def synth_speaker(name: str):
    """The synthetic speaker called ``name`` in any preset (e.g. ``piper-joe``, ``festival-slt``): a renderer of
    :mod:`duet.data.sources`, for reading new text in a corpus voice (reference recordings of an eval set)."""
    from duet.errors import DuetError

    found = {q.speaker.name: q.speaker for make in PRESETS.values() for q in make().voices}
    if name not in found:
        raise DuetError(f"no corpus voice is called {name!r}; choose from {', '.join(sorted(found))}")
    return found[name]
