"""A weightless model runtime and codec for engine, API and benchmark tests (and ``duet serve --model mock``).

:class:`MockRuntime` implements the family runtime contract (``duet.tts.runtime.FamilyRuntime``) that every real
model's runtime does, so the engine drives it exactly as it drives Gepard, Luna or vLLM.

The mock model has uniform logits over Gepard's 32 channel alphabets ([8, 7, 6, 6] x 8), so what it emits is
decided by each request's sampling parameters and seed alone; its stop head is scripted: a request stops after
``script(request)`` frames (default: ``ceil(len(text) * frames_per_char / speed)``; ``None`` = never stops, so
only the length bound ends it). Its "KV cache" is a position counter, so tests can check the budget.

The mock codec turns each frame into ``samples_per_frame`` samples, frame by frame (so streamed and one-shot
decoding agree exactly): the first K samples are the frame's codes / 16, exactly, so tests can read the sampled
codes back from audio (``MockCodec.codes_from_audio``, also through 16-bit PCM); the rest is a quiet sine whose
pitch follows the codes, so it sounds like something.

Shape legend: B batch, C channels (32), V widest alphabet (8), S samples.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from duet.codecs.base import DecodeResult, EncodeResult
from duet.gepard.sampling import channel_logit_mask, sample_requests
from duet.sampling import SamplingParams
from duet.serve.errors import InvalidRequest
from duet.text.tokens import EMOTIONS, NONVERBALS
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import FamilyTraits, StepCost, StepOutput

GEPARD_CHANNEL_LEVELS = (8, 7, 6, 6) * 8


@dataclass(frozen=True)
class MockConfig:
    name: str = "duet-mock"
    voices: tuple[str, ...] = ("alloy", "echo")
    channel_levels: tuple[int, ...] = GEPARD_CHANNEL_LEVELS
    sample_rate: int = 16_000
    samples_per_frame: int = 320  # 50 frames per second
    frames_per_char: float = 1.0
    max_frames: int = 500
    cache_bytes_per_position: int = 4096
    prefix_positions: int = 8  # speaker prefix (Gepard's K = 8 tokens)
    service_tokens: int = 3  # SOT, EOT, SOS
    stop_prob: float = 1.0  # what the scripted stop head says once the script's length is reached
    step_delay_s: float = 0.0  # sleep per step, to imitate compute (disconnect, queueing and admission tests)
    clone_from_audio: bool = True  # takes a reference clip (the speech API's reference_audio)
    expressive: bool = True  # takes an emotion and inline event tags (and ignores them), as an expressive Luna
    supports_speed: bool = True
    params: SamplingParams = SamplingParams()  # request defaults
    min_speed: float = 0.25
    max_speed: float = 4.0


class MockCodec:
    """Frame-local toy codec: frame t -> `samples_per_frame` samples; no lookahead, so streaming is exact."""

    def __init__(self, sample_rate: int, samples_per_frame: int, channel_levels: Sequence[int]):
        if samples_per_frame < len(channel_levels):
            raise ValueError("samples_per_frame must be at least the number of code streams")
        self.sample_rate = sample_rate
        self.samples_per_frame = samples_per_frame
        self._levels = tuple(channel_levels)

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return self._levels

    def encode(self, audio: torch.Tensor, lengths: torch.Tensor | None = None) -> EncodeResult:
        B, S = audio.shape
        T = S // self.samples_per_frame
        frames = audio[:, : T * self.samples_per_frame].reshape(B, T, self.samples_per_frame)  # (B, T, spf)
        energy = frames.abs().mean(-1).clamp(0, 1)  # (B, T)
        codes = torch.zeros(B, len(self._levels), T, dtype=torch.long)
        codes[:, 0] = (energy * (self._levels[0] - 1)).round().long()
        return EncodeResult(codes=codes, lengths=torch.full((B,), T))

    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> DecodeResult:
        B, K, T = codes.shape
        levels = torch.tensor(self._levels, dtype=torch.float32).view(1, K, 1)
        pitch = (codes.float() / (levels - 1)).mean(1)  # (B, T) in [0, 1]
        freq = 100.0 + 400.0 * pitch  # (B, T) Hz
        n = torch.arange(self.samples_per_frame, dtype=torch.float32) / self.sample_rate  # (spf,)
        audio = 0.25 * torch.sin(2 * math.pi * freq[..., None] * n)  # (B, T, spf)
        audio[..., :K] = codes.transpose(1, 2).float() / 16.0  # (B, T, K): the codes, exactly
        audio = audio.reshape(B, T * self.samples_per_frame)
        return DecodeResult(audio=audio, lengths=torch.full((B,), T * self.samples_per_frame))

    def codes_from_audio(self, audio: np.ndarray) -> np.ndarray:
        """(S,) audio this codec decoded (float, or 16-bit PCM scaled to [-1, 1]) -> codes (K, T)."""
        frames = np.asarray(audio, dtype=np.float64).reshape(-1, self.samples_per_frame)  # (T, spf)
        return np.round(frames[:, : len(self._levels)] * 16.0).astype(np.int64).T

    def stream_decoder(self) -> "MockStreamDecoder":
        return MockStreamDecoder(self)


class MockStreamDecoder:
    def __init__(self, codec: MockCodec):
        self._codec = codec

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        return self._codec.decode(codes).audio

    def flush(self) -> torch.Tensor:
        return torch.zeros(1, 0)


@dataclass(eq=False)
class MockState:
    request: SynthesisRequest
    target_frames: int | None  # None: never stops
    generator: torch.Generator
    positions: int  # cached positions (the mock's KV cache length)
    emitted: int = 0
    released: bool = False


def default_script(config: MockConfig) -> Callable[[SynthesisRequest], int | None]:
    def script(request: SynthesisRequest) -> int | None:
        return max(1, math.ceil(len(request.text) * config.frames_per_char / request.speed))

    return script


@dataclass(eq=False)
class MockRuntime:
    """Implements ``duet.tts.runtime.FamilyRuntime`` with uniform logits and a scripted stop."""

    config: MockConfig = MockConfig()
    script: Callable[[SynthesisRequest], int | None] | None = None
    prefilled: list[SynthesisRequest] = field(default_factory=list)  # every prompt seen, for tests
    max_live_cache_bytes: int = 0  # high-water mark of the cache held by unreleased states

    def __post_init__(self) -> None:
        cfg = self.config
        self.name = cfg.name
        self.codec = MockCodec(cfg.sample_rate, cfg.samples_per_frame, cfg.channel_levels)
        self.traits = FamilyTraits(voices=cfg.voices, clone_from_audio=cfg.clone_from_audio, nucleus=True,
                                   speed=None if cfg.supports_speed else "the mock speaks at one speed",
                                   steps=True, emotions=EMOTIONS if cfg.expressive else (),
                                   tags=NONVERBALS if cfg.expressive else ())
        self.max_frames = cfg.max_frames
        self.default_params = cfg.params
        self.cache_bytes_per_position = cfg.cache_bytes_per_position
        self._script = self.script or default_script(cfg)
        self._mask = channel_logit_mask(cfg.channel_levels)  # (C, V)
        self._live: dict[int, MockState] = {}  # states handed out and not yet released

    def check(self, request: SynthesisRequest) -> None:
        cfg = self.config
        if not cfg.min_speed <= request.speed <= cfg.max_speed:
            raise InvalidRequest(f"speed must be in [{cfg.min_speed}, {cfg.max_speed}]", param="speed")

    def frame_bound(self, request: SynthesisRequest) -> int:
        return self.config.max_frames

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return self.config.prefix_positions + len(request.text) + self.config.service_tokens

    def step_cost(self, request: SynthesisRequest, frames: int) -> StepCost:
        """One frame per step, as Gepard; a scripted stop is known in advance (the step after the script's length
        reads the stop, as an aligned model knows its length)."""
        target = self._script(request)
        return StepCost(frames if target is None else min(frames, target + 1), 1)

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[MockState]:
        states = []
        for request, seed in zip(requests, seeds):
            if request.reference is not None:  # exercise the codec path a real cloning runtime takes
                self.codec.encode(torch.as_tensor(request.reference)[None])
            generator = torch.Generator().manual_seed(seed)
            state = MockState(request, self._script(request), generator, self.prompt_positions(request))
            self.prefilled.append(request)
            self._live[id(state)] = state
            states.append(state)
        self._track()
        return states

    def step(self, states: Sequence[MockState]) -> list[StepOutput]:
        if self.config.step_delay_s:
            time.sleep(self.config.step_delay_s)
        logits = self._mask.expand(len(states), -1, -1)  # (B, C, V) uniform inside each alphabet
        if any(s.released for s in states):
            raise RuntimeError("step() on a released state")
        codes = sample_requests(logits, [s.request.params for s in states], [s.generator for s in states])  # (B, C)
        outs = []
        for state, frame in zip(states, codes):
            done = state.target_frames is not None and state.emitted >= state.target_frames
            state.positions += 1
            state.emitted += 1
            outs.append(StepOutput(codes=frame[:, None], stop_prob=self.config.stop_prob if done else 0.0))
        self._track()
        return outs

    def release(self, state: MockState) -> None:
        state.released = True
        self._live.pop(id(state), None)

    @property
    def live_states(self) -> int:
        return len(self._live)

    @property
    def live_cache_bytes(self) -> int:
        return sum(s.positions for s in self._live.values()) * self.cache_bytes_per_position

    def _track(self) -> None:
        self.max_live_cache_bytes = max(self.max_live_cache_bytes, self.live_cache_bytes)
