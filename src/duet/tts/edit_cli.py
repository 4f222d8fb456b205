"""``duet edit IN.wav --text "what IN says" --span START:END [--new-text "the new transcript"] -o OUT.wav
[--model luna-tiny] [--steps S] [--seed N] [--temperature T] [--top-k K] [--cfg-scale W] [--emotion NAME]
[--verify [--verify-tries N] [--verify-asr DIR|base]]``.

Speech editing with a Luna model (``duet.tts.luna_edit``): the seconds START to END of the recording are
regenerated, under the same transcript (a retake) or under ``--new-text``, the whole new transcript; the rest of the
recording keeps its codec codes and its samples (beyond a 20 ms crossfade at each side of the span). ``--verify``
hears the edited utterance back with Whisper (the eval extra; the ``duet`` command hands the recogniser in) and makes
the edit again with another seed while any word of the new transcript is misheard, up to ``--verify-tries`` (3)
makings, keeping the best (``duet.tts.verify.verified_edit``); ``--verify-asr`` picks the Whisper, as for ``duet
speak``. Bad input (a span that is not START:END in seconds or
lies outside the recording, an empty transcript, a missing or silent recording, a model that is not Luna, an output
path that cannot be written) ends with one line on stderr and exit code 2, and nothing is written.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

from duet.errors import DuetError
from duet.limits import SEED_LIMIT


def register(subparsers) -> None:
    p = subparsers.add_parser("edit", help="regenerate a stretch of a recording with a Luna model (speech editing)",
                              description="Regenerate seconds START to END of a recording, under its transcript or "
                                          "a new one; the rest keeps its codes.")
    p.add_argument("input", help="the recording to edit (any format libsndfile reads; resampled to the codec's rate)")
    p.add_argument("--text", required=True, help="what the recording says (its whole transcript)")
    p.add_argument("--span", required=True, help="START:END, the seconds to regenerate (e.g. 0.8:1.6)")
    p.add_argument("--new-text", default=None,
                   help="the whole new transcript (default: the same text, a retake of the span)")
    p.add_argument("-o", "--output", required=True, help="output file: .wav, .flac or .ogg")
    p.add_argument("--model", default="luna-tiny", help="a Luna model: shipped name or checkpoint directory")
    p.add_argument("--steps", type=int, default=None, help="refinement steps (default 32; 16, 8 faster)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same audio)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--cfg-scale", type=float, default=None, help="classifier-free guidance scale (1 = off)")
    p.add_argument("--emotion", default=None, metavar="NAME",
                   help="the utterance's emotion (as duet speak --emotion), in the context of both transcripts")
    p.add_argument("--verify", action="store_true",
                   help="hear the edit back (Whisper) and make it again with another seed while a word of the new "
                        "transcript is misheard, keeping the best (slower: one transcription per making)")
    p.add_argument("--verify-tries", type=int, default=3, metavar="N",
                   help="with --verify: makings at most, the first included (default 3)")
    from duet.tts.cli import add_verify_asr_flag

    add_verify_asr_flag(p)
    p.set_defaults(func=run_edit)


def parse_span(span: str) -> tuple[float, float]:
    """"START:END" in seconds -> (start, end); anything else is a DuetError."""
    parts = span.split(":")
    try:
        start, end = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        start, end = math.nan, math.nan
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise DuetError(f"--span must be START:END in seconds with 0 <= START < END (e.g. 0.8:1.6), got {span!r}")
    return start, end


def _check_verify(args: argparse.Namespace):
    """``--verify``: (its config, the recogniser the ``duet`` command hands in), or (None, None) without it."""
    if not args.verify:
        for flag, given in (("--verify-tries", args.verify_tries != 3), ("--verify-asr", args.verify_asr)):
            if given:
                raise DuetError(f"{flag} goes with --verify")
        return None, None
    from duet.tts.cli import verify_recogniser
    from duet.tts.verify import VerifyConfig

    config = VerifyConfig(tries=args.verify_tries)  # a bad count is a DuetError here, before loading
    return config, verify_recogniser(args)


def run_edit(args: argparse.Namespace) -> int:
    import soundfile as sf

    from duet.audio import load_audio
    from duet.shipped import model_type
    from duet.tts import load
    from duet.tts.cli import check_emotion_flag, check_luna_options, check_output

    span = parse_span(args.span)
    out = Path(args.output)
    fmt = check_output(out)
    if not Path(args.input).is_file():
        raise DuetError(f"{args.input}: no such file")
    check_luna_options(args.model, args.steps, None)  # --steps: positive (speak's check)
    emotion = check_emotion_flag(args.emotion)  # a known name, before loading
    _, kind = model_type(args.model)
    if kind != "luna":
        raise DuetError(f"editing needs a Luna model (it fills a masked span); {args.model} is a {kind} model")
    verify, scorer = _check_verify(args)
    speaker = load(args.model)
    audio, _ = load_audio(args.input, sample_rate=speaker.sample_rate)
    started = time.perf_counter()
    options = dict(new_text=args.new_text, steps=args.steps, temperature=args.temperature, top_k=args.top_k,
                   cfg_scale=args.cfg_scale, **emotion)
    if verify is None:
        edited = speaker.edit(audio, args.text, span, seed=args.seed, **options)
    else:
        from duet.tts.verify import verified_edit

        seed = random.SystemRandom().randrange(SEED_LIMIT) if args.seed is None else args.seed
        edited, score = verified_edit(speaker.runtime, audio, args.text, span, scorer, verify, seed=seed, **options)
        print(f"verify: {score.tries} making(s), kept making {score.kept + 1}: WER {score.first_wer:.3f} -> "
              f"{score.wer:.3f}, heard {score.transcript!r}")
    wall = time.perf_counter() - started
    sf.write(out, edited.speech.audio, edited.speech.sample_rate, format=fmt)
    a, b = edited.span_seconds
    print(f"{out}: {span[0]:g}-{span[1]:g} s regenerated as {a:.2f}-{b:.2f} s ({edited.span[1] - edited.span[0]} "
          f"frames) of {edited.speech.seconds:.2f} s, in {wall:.2f} s")
    return 0
