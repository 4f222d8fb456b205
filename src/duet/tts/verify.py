"""Verified speech: every piece heard back by a speech recogniser and made again, with other seeds, while it says
something else (``duet speak --verify``, the speech API's ``verify``).

Each piece is made as usual, then scored by a ``duet.metrics.clip.ClipScoring`` (word error rate against the piece's
text).
A piece whose WER is above ``max_wer`` is made again, up to ``tries`` makings in all, and the best is kept (the
lowest WER; the earliest of equals), so verification never makes a piece worse than its first making. Try ``t``
of a piece seeded ``s`` samples with seed ``s + t * SEED_STRIDE``; a model that decodes greedily (temperature 0,
the shipped models' default) would make the same audio under every seed, so its retries sample at
``retry_temperature``, truncated to ``retry_top_k`` where the request has no top-k of its own (Gepard's cooled and
truncated sampling, ``duet.gepard.generate.SPEAK_SAMPLING``). Off by default: every piece costs one transcription (Whisper tiny.en on a CPU core:
about a tenth of the piece's own length), and every retry one more making and transcription
(``benchmarks/results/timestamps.md``).

The scorer is the caller's (``duet.metrics.clip.ClipScorer`` is one): the command line and the server hand it in,
so that nothing loads Whisper until verification is asked for. Its Whisper is the judge: the bundled tiny.en by
default, another with ``ClipScoreConfig(asr_model=...)`` (a CTranslate2 directory, or ``"base"``: OpenAI's Whisper
base from the eval extra; ``duet speak --verify-asr``), e.g.
``verified_speech(speaker, text, ClipScorer(ClipScoreConfig(asr_model="base", normalizer="whisper")))``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from duet.errors import DuetError
from duet.limits import SEED_LIMIT
from duet.metrics.clip import ClipScore, ClipScoring
from duet.tts.request import SynthesisRequest
from duet.tts.speaker import Chunk, Speaker
from duet.tts.speech import Speech

if TYPE_CHECKING:
    import torch

    from duet.tts.luna_edit import EditableLuna, EditedSpeech

SEED_STRIDE = 1_000_003  # a retry's seed offset: far from the next pieces' seeds (seed + i)


@dataclass(frozen=True)
class VerifyConfig:
    max_wer: float = 0.0  # a piece heard with a higher WER is made again
    tries: int = 3  # makings of a piece at most, the first included
    retry_temperature: float = 0.6  # a retry's sampling temperature where the request decodes greedily
    retry_top_k: int = 20  # and its top-k, where the request sets none (0)

    def __post_init__(self) -> None:
        if not 1 <= self.tries <= 16:
            raise DuetError(f"verify tries must be in [1, 16], got {self.tries}")
        if not 0.0 <= self.max_wer <= 1.0:
            raise DuetError(f"verify max_wer must be in [0, 1], got {self.max_wer}")
        if not self.retry_temperature > 0 or self.retry_top_k < 0:
            raise DuetError(f"verify retries need a positive temperature and a top-k >= 0, got "
                            f"{self.retry_temperature} and {self.retry_top_k}")


@dataclass(frozen=True)
class PieceScore:
    """How one piece was verified."""

    piece: int  # its index in the text
    text: str
    wer: float  # of the making kept
    transcript: str  # what the recogniser heard in it
    tries: int  # makings scored
    kept: int  # which of them was kept (0 = the first)
    first_wer: float  # of the first making (what it would have been without verification)


def attempts(request: SynthesisRequest, seed: int, config: VerifyConfig) -> Iterator[tuple[SynthesisRequest, int]]:
    """The requests and seeds of a piece's makings, in order (module docstring)."""
    yield request, seed
    params = request.params
    if params.temperature == 0:
        params = replace(params, temperature=config.retry_temperature, top_k=params.top_k or config.retry_top_k)
    retry = replace(request, params=params)
    for t in range(1, config.tries):
        yield retry, (seed + t * SEED_STRIDE) % SEED_LIMIT


@dataclass
class BestOf:
    """The best making of one piece so far: ``offer`` each scored making; ``done`` once one is good enough or the
    tries are spent."""

    piece: int
    text: str
    config: VerifyConfig
    tries: int = 0
    best: ClipScore | None = None
    kept: int = 0
    first_wer: float = 0.0

    def offer(self, heard: ClipScore) -> bool:
        """Score one making (in order); -> whether it is the best so far (keep it)."""
        if self.tries == 0:
            self.first_wer = heard.wer
        better = self.best is None or heard.wer < self.best.wer
        if better:
            self.best, self.kept = heard, self.tries
        self.tries += 1
        return better

    @property
    def done(self) -> bool:
        return self.tries >= self.config.tries or (self.best is not None and self.best.wer <= self.config.max_wer)

    def score(self) -> PieceScore:
        assert self.best is not None
        return PieceScore(self.piece, self.text, self.best.wer, self.best.transcript, self.tries, self.kept,
                          self.first_wer)


def summary(scores: Sequence[PieceScore]) -> str:
    """One line: pieces, how many were made again, the mean WER before and after."""
    if not scores:
        return "verify: no pieces"
    remade = sum(s.tries > 1 for s in scores)
    before = sum(s.first_wer for s in scores) / len(scores)
    after = sum(s.wer for s in scores) / len(scores)
    return (f"verify: {len(scores)} pieces, {remade} made again ({sum(s.tries for s in scores)} makings); mean WER "
            f"{before:.3f} -> {after:.3f}")


def verified_speech(speaker: Speaker, text: str, scorer: ClipScoring, config: VerifyConfig = VerifyConfig(),
                    **options) -> tuple[Speech, list[PieceScore]]:
    """``speaker.speak(text, **options)`` with every piece verified (module docstring) -> the speech of the kept
    makings and each piece's score."""
    requests = speaker.requests(text, **options)
    kept: list[Chunk] = []
    scores = []
    for i, (request, seed) in enumerate(requests):
        best = BestOf(i, request.text, config)
        choice: list[Chunk] = []
        for attempt, attempt_seed in attempts(request, seed, config):
            chunks = list(speaker.piece_chunks(i, attempt, attempt_seed, timed=speaker.has_timings))
            audio = np.concatenate([c.audio.numpy() for c in chunks]) if chunks else np.zeros(0, np.float32)
            if best.offer(scorer.score(audio, speaker.sample_rate, request.text)):
                choice = chunks
            if best.done:
                break
        kept.extend(choice)
        scores.append(best.score())
    return speaker.assemble(requests, kept), scores


def verified_edit(luna: EditableLuna, audio: np.ndarray | torch.Tensor, text: str,
                  span_seconds: tuple[float, float], scorer: ClipScoring, config: VerifyConfig = VerifyConfig(), *,
                  new_text: str | None = None, seed: int = 0, **options: Any) -> tuple[EditedSpeech, PieceScore]:
    """``edit_speech`` heard back: the edited utterance is scored by ``scorer`` (WER against the whole transcript it
    should now say) and the edit made again while its WER is above ``config.max_wer``, up to ``config.tries``
    makings, the best kept (the lowest WER, the earliest of equals; ``duet.tts.verify.BestOf``). Making ``t`` is
    seeded ``seed + t * SEED_STRIDE``: the seed alone changes a Luna decode (its unmasking order draws Gumbel noise),
    so retries keep the request's sampling. -> (the kept edit, its score)."""
    from duet.tts.luna_edit import edit_speech

    target = (new_text or text).strip()
    best, kept = BestOf(0, target, config), None
    for t in range(config.tries):
        edited = edit_speech(luna, audio, text, span_seconds, new_text=new_text,
                             seed=(seed + t * SEED_STRIDE) % SEED_LIMIT, **options)
        if best.offer(scorer.score(edited.speech.audio, edited.speech.sample_rate, target)):
            kept = edited
        if best.done:
            break
    assert kept is not None
    return kept, best.score()
