"""The one speaker of every family: text -> sentences -> a request per piece -> the family's own step code
(``duet.tts.runtime``) -> the codec's stream decoder -> audio.

``duet.load`` returns a :class:`Speaker` over the model's :class:`FamilyRuntime` (Gepard, Luna or Luna Realtime);
``duet serve``'s engine (``duet.serve.engine``) drives the same runtime, and both read a step's output with
``runtime.settle``, so one model, text and seed give the same frames spoken and served.

Long text is split at sentence boundaries (``duet.text.sentences``) and each piece is generated on its own, with
``gap_seconds`` of silence between pieces; piece i samples with seed ``seed + i`` (a random seed when none is
given), so a seed fixes the whole utterance. Each piece is bounded by its family's frame bound (a piece that runs
into it ends "bound", ``duet.finish``), so the Speaker never refuses a sentence for its length the way the speech
API refuses a long request. Every piece is checked before any decoding (``runtime.check_common``, then the
runtime's ``check`` on the bounded piece), so bad input is one DuetError from ``speak``, ``stream`` or ``chunks``
themselves, not from their first chunk.

Cloning from a reference clip alone (no transcript; a Gepard with the voice compressor): ``voice_ref`` is a sound
file's path or mono samples (at ``voice_ref_rate``, default the codec's rate); it is read and resampled to the
codec's rate once, and every piece's request carries the same array (``SynthesisRequest.reference``, what the
speech API's ``reference_audio`` becomes), so spoken and served cloning run the same step code. A model that cannot
clone from a clip refuses it through the shared check (``runtime.check_common``).

Expressive control (Luna): ``emotion`` (one of ``duet.text.tokens.EMOTIONS``) goes with every piece's request, and
inline event tags in the text (``"Well [laugh] hello"``) stay in their piece; a family without emotion control
refuses it through the shared check, before any decoding.

``chunks`` yields each piece's codes and audio as the codec's stream decoder gives them: a family that makes one
frame per step (Gepard) pushes ``chunk_frames`` frames, then twice as many each time up to ``max_chunk_frames`` (as
the serving engine grows its chunks); one that makes a block of frames at once (a Luna Realtime block, a Luna
sentence) pushes each block as it comes; ``stream`` yields their audio with the gaps
as chunks of their own; ``speak`` joins the same chunks, so ``speak(text).audio`` is the concatenation of
``stream(text)`` exactly.

SSML (``duet.text.ssml``): a text that starts with ``<speak>`` is read as markup; its plain text is split into
pieces as any other, and each piece's request carries its breaks and rates (``SynthesisRequest.pace``,
``duet.tts.pace``), which an aligned model lays into its durations. A break where one piece ends and the next
begins sizes the gap between them (the pause from the last word of one to the first word of the next is the break;
``gap_seconds`` otherwise), and a break after the text's last word is silence after its audio.
:meth:`requests` with ``pace`` speaks a piece already cut from a stream (``duet.tts.live``) with its marks.

The parts of ``speak`` are public for callers that choose between makings of a piece (``duet.tts.verify``):
:meth:`piece_chunks` makes one piece, :meth:`assemble` joins the chunks of every piece into the utterance
(:meth:`join_pieces`: gaps, pauses and words).

Retiming a piece's audio after generation (``duet.tts.retime``, which the serving engine runs too): a speed
outside ``RetimeConfig.followed_speeds`` is made at the nearest speed inside and time-stretched the rest of the way;
an SSML break between two words is fitted to its length in the audio (such a piece is held until it ends and comes
as one chunk); an SSML break between two pieces is sized from the quiet measured at the end of the one
(``Chunk.trail``) and at the start of the other (``Chunk.lead``; that piece is held until it ends), and a break after
the text from the quiet at the end of the last. Timings move with the audio, so they stay on the samples they were
on. ``RetimeConfig.fit_pauses`` off leaves pauses as the layout puts them, sized from word to word.

Word timings (``duet.tts.timestamps``), for a model whose frames follow a layout of its text (``has_timings``): each
piece's words come from the layout its runtime hands out with every step and the frames the piece produced, and are
placed in the utterance where the piece's audio starts (after the gaps before it). ``speak`` puts them on
``Speech.words``; ``stream(..., words=[])`` collects the same ones as each piece ends; with ``chunks(..., timed=True)``
a piece's last chunk carries its own, in seconds from the piece's start. A model without a layout has none (None).

Shape legend: K code streams of the codec, t frames, s samples.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from duet.errors import DuetError
from duet.limits import SEED_LIMIT
from duet.text.sentences import split_sentences
from duet.text.ssml import read_text
from duet.tts.pace import Pace, PacedPiece, gap_seconds, paced_pieces
from duet.tts.request import SynthesisRequest, VoicePrompt
from duet.tts.retime import RetimeConfig, Retimer, made_request
from duet.tts.runtime import FamilyRuntime, check_common, settle
from duet.tts.speech import Speech, silence
from duet.tts.timestamps import TextLayout, WordTiming, shifted


@dataclass(frozen=True)
class SpeakConfig:
    max_chars: int = 200  # longest piece of text per generation
    gap_seconds: float = 0.15  # silence between pieces
    # Frames gathered before a push into the codec's stream decoder: ``chunk_frames`` for a piece's first audio,
    # then twice the last chunk's, up to ``max_chunk_frames`` (a family that makes blocks pushes each block). A
    # decoder with context (duet-fsq: 19 frames either side) decodes that context again with every push, so chunks
    # of 4 frames cost a sentence 2-3.5x the decoding of chunks growing to 32 (benchmarks/results/
    # single_stream.md). A chunk is made far faster than it plays (RTF well under 0.5): the later, larger chunks
    # come before the audio before them has played.
    chunk_frames: int = 4
    max_chunk_frames: int = 32
    # speeds made at one the model follows and time-stretched, SSML pauses fitted in the audio (duet.tts.retime):
    # the serving engine's EngineConfig.retime is the same
    retime: RetimeConfig = RetimeConfig()


@dataclass(frozen=True)
class Chunk:
    """Audio of one piece as it is decoded."""

    piece: int  # which piece of the text (0, 1, ...)
    codes: torch.Tensor  # (K, t) the frames behind this chunk (its audio: them decoded, then any retiming)
    audio: torch.Tensor  # (s,) float32; the piece's last chunk includes the decoder's flush
    end: str | None  # None while the piece goes on; "stop" or "bound" on its last chunk (duet.finish)
    # on the last chunk of a timed piece: its words, in seconds from the piece's start (duet.tts.timestamps)
    words: tuple[WordTiming, ...] | None = None
    # on the first chunk of a piece with an SSML pause before it: seconds of its audio before its first word (with
    # fitted pauses: of quiet at its start, measured; the piece comes whole); Retimer.lead
    lead: float | None = None
    # on the last chunk of a timed piece, or of any with fitted pauses: seconds of its audio after its last word
    # (with fitted pauses: of quiet at its end, measured); Retimer.trail
    trail: float | None = None


class Speaker:
    """A loaded model of any family with its codec: ``speak``, ``stream``, ``chunks``; ``voice_prompt`` and
    ``edit`` where the family clones or edits (Luna)."""

    def __init__(self, runtime: FamilyRuntime, config: SpeakConfig = SpeakConfig()):
        self.runtime = runtime
        self.config = config

    @property
    def name(self) -> str:
        return self.runtime.name

    @property
    def voices(self) -> tuple[str, ...]:
        return self.runtime.traits.voices

    @property
    def codec(self):
        return self.runtime.codec

    @property
    def sample_rate(self) -> int:
        return self.runtime.codec.sample_rate

    @property
    def has_timings(self) -> bool:
        """Whether the model reports word timings (its frames follow a layout of its text: aligned text input)."""
        return self.runtime.traits.timings

    @property
    def clone_from_prompt(self) -> bool:
        """Whether ``prompt`` (a voice prompt: a clip and its transcript, ``voice_prompt``) is taken."""
        return self.runtime.traits.clone_from_prompt

    @property
    def clone_from_audio(self) -> bool:
        """Whether ``voice_ref`` (a reference clip alone, no transcript) is taken."""
        return self.runtime.traits.clone_from_audio

    def reference_audio(self, voice_ref: str | Path | np.ndarray | torch.Tensor,
                        sample_rate: int | None = None) -> np.ndarray:
        """A reference clip (a sound file's path, or mono samples at ``sample_rate``, default the codec's) -> mono
        float32 samples (S,) at the codec's rate, what ``SynthesisRequest.reference`` holds."""
        from duet.audio import check_audio, load_audio, resample, to_mono

        if isinstance(voice_ref, (str, Path)):
            if sample_rate is not None:
                raise DuetError("voice_ref_rate is for samples; a sound file carries its own rate")
            return load_audio(voice_ref, sample_rate=self.sample_rate)[0]
        samples = voice_ref.detach().cpu().numpy() if isinstance(voice_ref, torch.Tensor) else voice_ref
        audio = check_audio(to_mono(samples), what="the reference clip")
        return resample(audio, sample_rate or self.sample_rate, self.sample_rate)

    def voice_prompt(self, audio: np.ndarray | torch.Tensor, text: str, sample_rate: int | None = None) -> VoicePrompt:
        """A reference clip (S,) and its transcript -> a prompt that ``speak(..., prompt=)`` clones (Luna §2.5)."""
        if not self.clone_from_prompt:
            raise DuetError(f"{self.name} cannot clone a voice (no voice prompts)")
        return self.runtime.voice_prompt(audio, text, sample_rate)  # type: ignore[attr-defined]

    def edit(self, audio: np.ndarray | torch.Tensor, text: str, span_seconds: tuple[float, float], **options: Any):
        """Speech editing (Luna): regenerate ``span_seconds`` of a recording whose transcript is ``text`` ->
        ``duet.tts.luna_edit.EditedSpeech``; ``options`` as ``edit_speech`` takes them."""
        from duet.tts.luna import LunaRuntime
        from duet.tts.luna_edit import edit_speech

        if not isinstance(self.runtime, LunaRuntime):
            raise DuetError(f"editing needs a Luna model (it fills a masked span); {self.name} is not one")
        return edit_speech(self.runtime, audio, text, span_seconds, **options)

    # ---- the requests (checked eagerly: before any decoding) -------------------------------------------------------
    def requests(self, text: str, *, voice: str | None = None, seed: int | None = None,
                 temperature: float | None = None, top_k: int | None = None, cfg_scale: float | None = None,
                 speed: float | None = None, steps: int | None = None, prompt: VoicePrompt | None = None,
                 voice_ref: str | Path | np.ndarray | torch.Tensor | None = None,
                 voice_ref_rate: int | None = None, emotion: str | None = None,
                 pace: Pace | None = None) -> list[tuple[SynthesisRequest, int]]:
        """One checked (request, seed) per piece of ``text``, each bounded by its family's frame bound; every piece
        carries the same ``emotion``. ``text`` is SSML when it starts with ``<speak>`` (``duet.text.ssml``); with
        ``pace``, it is one piece already cut (a text stream's, ``duet.tts.pace.MarkedPieces``) spoken with those
        marks, neither parsed nor split."""
        if steps is not None and not self.runtime.traits.steps:
            raise DuetError(f"{self.name} decodes one frame per step: steps applies to Luna models only")
        given = {k: v for k, v in (("temperature", temperature), ("top_k", top_k), ("cfg_scale", cfg_scale),
                                   ("steps", steps)) if v is not None}
        params = replace(self.runtime.default_params, **given)  # a bad value is a DuetError here
        if pace is not None:
            pieces = [PacedPiece(" ".join(text.split()), None if pace == Pace() else pace)] if text.strip() else []
        else:
            marked = read_text(text)  # SSML when it starts with <speak> (duet.text.ssml), else plain
            pieces = paced_pieces(marked, split_sentences(marked.text, self.config.max_chars))
        if not pieces:
            raise DuetError("the text is empty")
        seed = random.SystemRandom().randrange(SEED_LIMIT // 2) if seed is None else seed
        if voice_ref is None and voice_ref_rate is not None:
            raise DuetError("voice_ref_rate goes with voice_ref")
        reference = None if voice_ref is None else self.reference_audio(voice_ref, voice_ref_rate)
        out = []
        for i, piece in enumerate(pieces):
            request = SynthesisRequest(piece.text, voice=voice, speed=1.0 if speed is None else speed, params=params,
                                       prompt=prompt, reference=reference, emotion=emotion, pace=piece.pace)
            check_common(request, self.name, self.runtime.traits)
            bounded = replace(request, params=replace(params, max_frames=self.runtime.frame_bound(request)))
            self.runtime.check(bounded)
            made, _ = self.made_request(bounded)
            if made is not bounded:  # made at another speed: that one must fit too
                self.runtime.check(made)
            out.append((bounded, seed + i))
        return out

    # ---- the speaker surface ---------------------------------------------------------------------------------------
    def chunks(self, text: str, *, ended: list[str] | None = None, timed: bool = False,
               **options: Any) -> Iterator[Chunk]:
        """Every piece's chunks in order; ``ended`` (if given) collects "stop" or "bound" per piece; with ``timed``
        each piece's last chunk carries its words (a model with timings)."""
        requests = self.requests(text, **options)
        return self._chunks(requests, ended, timed)

    def stream(self, text: str, *, ended: list[str] | None = None, words: list[WordTiming] | None = None,
               **options: Any) -> Iterator[np.ndarray]:
        """Audio chunks (float32 (s,)) as they are decoded, the gaps between pieces as chunks of their own;
        ``words`` (if given) collects each piece's words as it ends, in seconds of the stream (a model with
        timings; it stays empty for others)."""
        requests = self.requests(text, **options)
        return self.join_pieces(requests, self._chunks(requests, ended, words is not None), words)

    def speak(self, text: str, **options: Any) -> Speech:
        """The whole utterance: the same chunks as ``stream``, joined, with the words' timings where the model has
        them. Options: ``voice``, ``seed``, ``temperature``, ``top_k``, ``cfg_scale``, ``speed``, ``steps``,
        ``prompt``, ``voice_ref``, ``voice_ref_rate`` and ``emotion`` (those the family takes)."""
        requests = self.requests(text, **options)
        return self.assemble(requests, self._chunks(requests, None, self.has_timings))

    def assemble(self, requests: list[tuple[SynthesisRequest, int]], chunks: Iterable[Chunk]) -> Speech:
        """The utterance of ``requests`` (from :meth:`requests`) from its pieces' chunks, in order (each piece's
        from :meth:`piece_chunks`, timed where the model has timings): gaps, pauses and words placed as ``speak``
        places them."""
        ended: list[str] = []

        def ends() -> Iterator[Chunk]:
            for chunk in chunks:
                if chunk.end is not None:
                    ended.append(chunk.end)
                yield chunk

        words: list[WordTiming] | None = [] if self.has_timings else None
        parts = list(self.join_pieces(requests, ends(), words))
        audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return Speech(audio.astype(np.float32), self.sample_rate, tuple(r.text for r, _ in requests), tuple(ended),
                      None if words is None else tuple(words))

    def _chunks(self, requests: list[tuple[SynthesisRequest, int]], ended: list[str] | None,
                timed: bool = False) -> Iterator[Chunk]:
        # a pause between pieces is sized from the words on either side (duet.tts.pace.gap_seconds)
        timed = timed or any(r.pace is not None and (r.pace.before or r.pace.after) for r, _ in requests)
        for i, (request, seed) in enumerate(requests):
            for chunk in self.piece_chunks(i, request, seed, timed):
                if chunk.end is not None and ended is not None:
                    ended.append(chunk.end)
                yield chunk

    def join_pieces(self, requests: list[tuple[SynthesisRequest, int]], chunks: Iterator[Chunk],
               words: list[WordTiming] | None = None) -> Iterator[np.ndarray]:
        """The chunks' audio (each piece's from :meth:`piece_chunks`, in order) with a gap before each piece after
        the first (sized by an SSML pause there: ``duet.tts.pace.gap_seconds``) and the silence of a pause after a
        piece; ``words`` collects each piece's words placed where its audio starts. ``requests`` may grow while
        the chunks come (a text stream's pieces): a piece's request is read when its first chunk arrives."""
        rate = self.sample_rate
        piece, samples, start = 0, 0, 0  # samples yielded so far; the first sample of the current piece
        trail = 0.0  # seconds of the piece before after its last word
        for chunk in chunks:
            if chunk.piece != piece:
                piece = chunk.piece
                pace = requests[piece][0].pace
                seconds = self.config.gap_seconds
                if pace is not None and pace.before:
                    seconds = gap_seconds(pace.before, trail, chunk.lead or 0.0)
                gap = silence(seconds, rate)
                yield gap
                samples += len(gap)
                start = samples
            if chunk.audio.numel():
                samples += chunk.audio.numel()
                yield chunk.audio.numpy()
            if chunk.words is not None and words is not None:
                words.extend(shifted(chunk.words, start / rate))
            if chunk.trail is not None:
                trail = chunk.trail
            pace = requests[chunk.piece][0].pace
            if chunk.end is not None and pace is not None and pace.after:
                after = silence(gap_seconds(pace.after, trail, 0.0), rate)
                samples += len(after)
                yield after

    def made_request(self, request: SynthesisRequest) -> tuple[SynthesisRequest, float]:
        """The request the model makes for ``request`` (``duet.tts.retime.made_request``, bounded for its own speed)
        and the factor its audio is then stretched by."""
        made, factor = made_request(request, self.config.retime)
        if made is request:
            return request, 1.0
        made = replace(made, params=replace(made.params, max_frames=None))
        return replace(made, params=replace(made.params, max_frames=self.runtime.frame_bound(made))), factor

    def piece_chunks(self, index: int, request: SynthesisRequest, seed: int, timed: bool = False) -> Iterator[Chunk]:
        """One piece (``index`` of the text): prefill, then steps until ``settle`` ends it; frames go through the
        stream decoder, then the retiming (``duet.tts.retime``). With ``timed``, its last chunk carries its words,
        read from the layout its steps hand out; with an SSML pause before it, its first chunk carries its lead."""
        made, factor = self.made_request(request)
        retimer = Retimer(request, factor, self.codec, self.config.retime, self.has_timings)
        lead = request.pace is not None and request.pace.before > 0
        measured = self.config.retime.fit_pauses
        held: list[torch.Tensor] = []  # the codes of a held piece (duet.tts.retime)
        for codes, audio, end, layout, produced in self._decoded(made, seed):
            out = retimer.push(audio)
            if retimer.held:
                held.append(codes)
                if end is None:
                    continue
                codes = torch.cat(held, dim=-1)  # (K, t)
            words, trail = None, None
            if end is not None:
                out = np.concatenate([out, retimer.finish(layout, produced)])
                if timed and layout is not None:
                    words = retimer.words(layout)
                if measured or words is not None:
                    trail = retimer.trail(layout)
            first = retimer.lead(layout) if lead else None
            lead = False
            yield Chunk(index, codes, torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)), end, words,
                        first, trail)
            if end is not None:
                return

    def _decoded(self, request: SynthesisRequest,
                 seed: int) -> Iterator[tuple[torch.Tensor, np.ndarray, str | None, TextLayout | None, int]]:
        """One piece made and decoded: (codes (K, t), audio (s,), end, the layout so far, frames produced so far)
        in growing chunks (``SpeakConfig.chunk_frames``) and at its end."""
        runtime, params = self.runtime, request.params
        bound = params.max_frames
        assert bound is not None  # requests() sets it
        decoder = self.codec.stream_decoder()
        state = runtime.prefill([request], [seed])[0]
        produced, pending = 0, []
        chunk = self.config.chunk_frames
        layout: TextLayout | None = None
        try:
            while True:
                out = runtime.step([state])[0]
                if out.error is not None:
                    raise RuntimeError(out.error)
                layout = out.layout or layout
                codes, end = settle(out, produced, bound, params.stop_threshold)
                produced += codes.shape[-1]
                if codes.shape[-1]:
                    pending.append(codes)
                if end is None and codes.shape[-1] < 2 and sum(c.shape[-1] for c in pending) < chunk:
                    continue  # frame by frame: gather a chunk (a block of several frames goes as it comes)
                codes = torch.cat(pending, dim=-1) if pending else out.codes[..., :0]  # (K, t)
                pending = []
                chunk = min(2 * chunk, max(self.config.max_chunk_frames, self.config.chunk_frames))
                with torch.no_grad():
                    parts = [decoder.push(codes[None])[0]] if codes.shape[-1] else []  # (s,)
                    if end is not None:
                        parts.append(decoder.flush()[0])
                audio = torch.cat(parts).float().cpu().numpy() if parts else np.zeros(0, np.float32)
                yield codes, audio, end, layout, produced
                if end is not None:
                    return
        finally:
            runtime.release(state)
