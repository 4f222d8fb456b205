"""Gepard on vLLM from duet's side: prompt embeddings in, frames out, and the runtime behind ``duet serve
--engine vllm``.

:class:`GepardVLLM` owns one vLLM ``LLMEngine`` for a model (a shipped name, a duet Gepard checkpoint, exported
to a temporary directory for as long as the engine lives, or a directory ``export.py`` wrote) and drives it one
step at a time (``add`` / ``step`` / ``abort``), so duet's own engine thread (``duet.serve.engine``) keeps admission
control, cancellation, the codec's stream decoders and the HTTP API, and vLLM does the batching, the paged KV cache
(sized to duet's limits on CPU, ``kv_cache.py``) and the model.

Per request: the text is tokenised with the checkpoint's tokenizer and wrapped as [SOT, text, EOT, SOS]
(``duet.text.prompts.gepard_prompt``), embedded with the checkpoint's own text embedding *outside* vLLM and sent
as ``prompt_embeds``, after the voice prefix of a model that has one; vLLM decodes one frame-slot id per
step (``sampler.py``, ``frames.py``), ending with STOP or at ``max_tokens = bound + 1`` (one spare step, so that
a stop decision exactly at the bound reads as "stop", as in ``duet.gepard.generate``); the client turns ids back
into (C, T) channel codes from the frame bank, checking each slot's stamp.

A model with aligned text input (``duet.gepard.aligned``) runs its duration predictor and ``AlignedInput`` here, in
the client, once per request (``duet.gepard.decode``: Gepard's one input layout, as the built-in runtime lays it
out): the aligned vector of the SOS position joins the prompt embeddings, and those of
positions 1 .. bound go into the request's table (``frames.AlignedTables``), which the model inside vLLM adds to
each fed frame. The stock backbone inside vLLM is unchanged.

A model with the voice compressor (``GepardConfig.voice``) reads K prefix vectors before its text, computed here
in the client (``voice.VoicePrefix``): a request's reference clip compressed, or ``null_prefix`` for a request
without one, as the built-in runtime (``duet.tts.gepard``) does. They are the first K prompt embeddings, so the
prompt is [prefix | SOT, text, EOT, SOS] and the decode steps are unchanged.

vLLM is imported when a GepardVLLM is built, never when this module is imported; building one spawns vLLM's
worker process(es), so scripts that build it need an ``if __name__ == "__main__":`` guard.

Shape legend: S prompt ids, K prefix vectors, D width, C channels (32), G packed groups (8), T frames.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from duet.errors import DuetError, MissingDependency
from duet.gepard.decode import AlignedLayout, prompt_inputs
from duet.sampling import SamplingParams
from duet.serve.errors import InvalidRequest
from duet.serve.scheduler import SchedulerConfig
from duet.serve.vllm.frames import EXTRA_KEY, STOP_ID, AlignedTables, FrameBank, create_bank_file
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import StepCost, StepOutput


@dataclass(frozen=True)
class VLLMConfig:
    """How the vLLM engine is built (the fields map onto vLLM's EngineArgs)."""

    max_num_seqs: int = 16  # concurrent requests vLLM decodes together
    dtype: str = "float32"  # CPU: float32 or bfloat16; GPU: bfloat16
    kv_cache_gib: float | None = None  # CPU: KV-cache space (default: sized to the limits, kv_cache.py); GPU: unused
    kv_budget_bytes: int = SchedulerConfig.cache_budget_bytes  # CPU: the most KV cache a computed size may take
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True  # no torch.compile / graph capture: starts in seconds (set False for speed on GPU)
    max_model_len: int | None = None  # default: the backbone's max_positions
    seed: int = 0


@dataclass(eq=False)
class VLLMRequest:
    rid: str
    key: int  # the frame-bank stamp of this request (frames.py)
    bound: int  # frames at most
    frames: list[torch.Tensor] = field(default_factory=list)  # (C, t) chunks not yet taken
    emitted: int = 0  # frames read from the bank so far
    finished: bool = False
    stopped: bool = False  # ended by STOP (not by the bound)


class GepardVLLM:
    """One vLLM engine serving one Gepard model, stepped by the caller. ``close`` (or a failed start) shuts vLLM
    down and removes what the engine wrote: the frame bank and a temporary export."""

    def __init__(self, model: str | os.PathLike, config: VLLMConfig = VLLMConfig()):
        try:
            import vllm  # noqa: F401
        except ImportError as err:
            raise MissingDependency("vllm", "bash scripts/setup_vllm_cpu.sh (CPU) or pip install vllm (CUDA)") from err
        from duet.serve.vllm.export import VLLMModelDir

        self.files = VLLMModelDir.open(model)
        self.bank_path: Path | None = None
        self._requests: dict[str, VLLMRequest] = {}
        try:
            self._load(config)
            self.engine = self._build_engine()
        except BaseException:
            self._remove_files()
            raise

    def _load(self, config: VLLMConfig) -> None:
        """duet's side of the model: its config, tokenizer, text embedding, aligned layout, voice compressor and
        frame bank."""
        from safetensors import safe_open

        from duet.gepard.config import GepardConfig
        from duet.serve.vllm.voice import VoicePrefix
        from duet.text import get_tokenizer
        from duet.text.prompts import gepard_prompt

        self.model_dir = self.files.path
        hf = json.loads((self.model_dir / "config.json").read_text())
        self.hf = hf
        self.gepard = GepardConfig.from_dict(hf["duet"]["config"])
        self.levels = tuple(hf["channel_levels"])
        self.tokenizer = get_tokenizer(self.model_dir / "tokenizer.json")
        tokenizer = self.tokenizer
        self.encode = lambda request: gepard_prompt(request.text, tokenizer)  # [SOT, text, EOT, SOS], as trained
        with safe_open(str(self.model_dir / "model.safetensors"), framework="pt") as f:
            self.text_embedding = f.get_tensor("model.embed_tokens.weight").float()  # (V_text, D)
            self.layout = AlignedLayout.load(self.gepard, f) if self.gepard.aligned is not None else None
            self.voice = VoicePrefix.load(self.gepard.voice, f) if self.gepard.voice is not None else None
        self.dtype = getattr(torch, config.dtype)
        self.config = config
        self.max_model_len = config.max_model_len or self.gepard.backbone.max_positions
        self.bank_path = create_bank_file(hf["frame_slots"], len(self.levels))
        self.bank = FrameBank(hf["frame_slots"], len(self.levels), self.bank_path)
        self.tables = AlignedTables(self.bank_path, self.gepard.backbone.width) if self.layout is not None else None

    def _build_engine(self):
        from vllm import EngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.llm_engine import LLMEngine

        from duet.serve.vllm.sampler import GepardFrameSampler

        cfg = self.config
        kv_bytes = self.kv_cache_memory_bytes() if current_platform.is_cpu() else None
        args = EngineArgs(
            model=str(self.model_dir), skip_tokenizer_init=True, enable_prompt_embeds=True,
            logits_processors=[GepardFrameSampler], hf_overrides={"frame_bank_path": str(self.bank_path)},
            dtype=cfg.dtype, max_num_seqs=cfg.max_num_seqs, max_model_len=self.max_model_len,
            enforce_eager=cfg.enforce_eager, gpu_memory_utilization=cfg.gpu_memory_utilization, seed=cfg.seed,
            enable_prefix_caching=False,  # prompt embeds are not token ids: nothing to share across requests
            kv_cache_memory_bytes=kv_bytes,
        )
        return LLMEngine.from_engine_args(args)

    def kv_cache_memory_bytes(self) -> int | None:
        """The CPU KV cache for this model and these limits (``kv_cache.py``: the user's setting, else sized to
        ``max_num_seqs`` full-length requests)."""
        from duet.serve.vllm.kv_cache import kv_cache_memory_bytes
        from duet.tts.runtime import kv_cache_bytes

        bb, cfg = self.gepard.backbone, self.config
        per_position = kv_cache_bytes(bb.num_layers, bb.num_kv_heads, bb.head_dim, self.dtype)
        return kv_cache_memory_bytes(per_position, cfg.max_num_seqs, self.max_model_len, cfg.kv_budget_bytes,
                                     cfg.kv_cache_gib, os.environ)

    # --- requests -----------------------------------------------------------------------------------------------

    def prompt_embeds(self, token_ids: Sequence[int], prefix: torch.Tensor | None = None,
                      sos: torch.Tensor | None = None) -> torch.Tensor:
        """Wrapped text ids (S,) [+ speaker prefix (K, D)] [+ the aligned input (1, D) of SOS] -> prompt embeddings
        (K + S, D): Gepard's one prompt layout (``duet.gepard.decode.prompt_inputs``)."""
        text = self.text_embedding[torch.as_tensor(list(token_ids), dtype=torch.long)][None]  # (1, S, D)
        x = prompt_inputs(text, None if prefix is None else prefix.float()[None], None if sos is None else sos[None])
        return x[0].to(self.dtype)

    @property
    def trained_codec(self) -> str:
        """The name (or directory) of the codec the model was trained with: what it is served with by default."""
        return self.hf["duet"].get("codec", {}).get("name") or "duet-fsq"

    @property
    def num_prefix(self) -> int:
        """Prompt positions before the text: K for a model with the voice compressor, else 0."""
        return self.voice.num_vectors if self.voice is not None else 0

    def reference_prefix(self, codec, audio) -> torch.Tensor:
        """A reference clip (mono float32 at ``codec``'s rate) -> the voice prefix (K, D) that ``add`` takes."""
        if self.voice is None:
            raise DuetError(f"{self.gepard.name} has no voice compressor: it cannot clone a voice")
        return self.voice.of_clip(codec, audio)

    def predicted_frames(self, token_ids: Sequence[int], speed: float = 1.0) -> float:
        """How many frames an aligned model's duration predictor gives this text (wrapped ids)."""
        assert self.layout is not None, "only a model with aligned text input predicts its length"
        return float(self.layout.durations(token_ids, speed).sum())

    def add(self, token_ids: Sequence[int], params: SamplingParams, bound: int, seed: int,
            speed: float = 1.0, prefix: torch.Tensor | None = None) -> VLLMRequest:
        """Queue one request (wrapped text ids) to produce at most ``bound`` frames (``speed``: an aligned model's
        speaking rate, > 1 faster; ``prefix`` (K, D): the voice prefix of a reference clip, ``reference_prefix``;
        a model with the voice compressor reads ``null_prefix`` without one)."""
        from vllm import SamplingParams as VSamplingParams

        if self.voice is None and prefix is not None:
            raise DuetError(f"{self.gepard.name} has no voice compressor: it takes no prefix")
        if self.voice is not None and prefix is None:
            prefix = self.voice.null()  # (K, D)
        need = self.num_prefix + len(token_ids) + bound + 1
        if need > self.max_model_len:
            raise InvalidRequest(f"prompt + frames = {need} positions exceeds vLLM's max_model_len "
                                 f"{self.max_model_len}", param="input", code="context_length_exceeded")
        key = random.SystemRandom().randrange(1, 2**31 - 1)
        vparams = VSamplingParams(temperature=0.0, max_tokens=bound + 1, stop_token_ids=[STOP_ID], detokenize=False,
                                  extra_args={EXTRA_KEY: request_params(params, seed, key)})
        rid = uuid.uuid4().hex
        table = None
        if self.layout is not None:
            table = self.layout.table(self.text_embedding, token_ids, bound + 1, speed)  # (bound + 1, D)
        embeds = self.prompt_embeds(token_ids, prefix, None if table is None else table[:1])  # (K + S, D): SOS's
        if table is not None:  # row 0 rides in the prompt (SOS predicts frame 0); frame t reads row t + 1
            assert self.tables is not None
            self.tables.write(key, table)
        try:
            self.engine.add_request(rid, {"prompt_embeds": embeds}, vparams)
        except BaseException:
            self._forget(key)
            raise
        req = self._requests[rid] = VLLMRequest(rid, key, bound)
        return req

    def _forget(self, key: int) -> None:
        if self.tables is not None:
            self.tables.remove(key)

    def step(self) -> None:
        """One vLLM engine step; new frames land in their requests' ``frames``."""
        for out in self.engine.step():
            req = self._requests.get(out.request_id)
            if req is None:
                continue
            ids = list(out.outputs[0].token_ids)
            new = ids[req.emitted :]
            stop = STOP_ID in new
            if stop:
                new = new[: new.index(STOP_ID)]
            new = new[: max(0, req.bound - req.emitted)]  # the spare step's frame is never emitted
            if new:
                req.frames.append(self.bank.read(new, req.key, req.emitted))  # (C, t)
                req.emitted += len(new)
            if out.finished:
                req.finished, req.stopped = True, stop
                self._forget(req.key)

    def take(self, req: VLLMRequest) -> torch.Tensor:
        """The frames produced since the last take: (C, t) channel codes."""
        frames = torch.cat(req.frames, dim=1) if req.frames else torch.zeros((len(self.levels), 0), dtype=torch.long)
        req.frames = []
        return frames

    def abort(self, req: VLLMRequest) -> None:
        if not req.finished:
            self.engine.abort_request([req.rid])
        self._forget(req.key)
        self._requests.pop(req.rid, None)

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished_requests()

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if shutdown is not None:
                shutdown()
            self.engine = None
        for req in self._requests.values():
            self._forget(req.key)
        self._remove_files()

    def _remove_files(self) -> None:
        if self.bank_path is not None:
            self.bank_path.unlink(missing_ok=True)
        self.files.cleanup()

    def __enter__(self) -> "GepardVLLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(eq=False)
class _State:
    request: SynthesisRequest
    vreq: VLLMRequest


class VLLMGepardRuntime:
    """Implements ``duet.tts.runtime.FamilyRuntime`` over :class:`GepardVLLM`: duet's engine admits, streams and
    cancels; each duet engine step is one vLLM step for every running request. A model with the voice compressor
    clones from a request's reference clip (its prefix is computed here, in prefill, with the served codec)."""

    cache_bytes_per_position = 0  # vLLM owns the KV cache and its budget; duet only bounds concurrency

    def __init__(self, vllm: GepardVLLM, codec, name: str | None = None, voices: tuple[str, ...] = ("default",)):
        from duet.codecs.fsq import FSQConfig, GroupFSQ
        from duet.tts.gepard import GepardRuntimeConfig
        from duet.tts.runtime import FamilyTraits

        self.vllm, self.codec = vllm, codec
        self.name = name or vllm.files.source.name  # the model id clients send: the directory's name, as built-in
        built_in = GepardRuntimeConfig()  # the built-in engine's Gepard defaults and frame bound
        self.default_params = built_in.params
        no_speed = None if vllm.layout is not None else "it has no duration predictor (no aligned text input)"
        self.traits = FamilyTraits(voices=voices, speed=no_speed, nucleus=True,
                                   clone_from_audio=vllm.voice is not None,
                                   clone_from_audio_note=": it has no voice compressor (train one with duet train "
                                                         "gepard --voice-prefix)")
        self.fsq = GroupFSQ(FSQConfig())
        if tuple(self.fsq.config.channel_levels) != vllm.levels:
            raise DuetError("the FSQ packing does not match the model's channel levels")
        if len(codec.codebook_sizes) != self.fsq.config.num_groups:
            raise DuetError(f"codec has {len(codec.codebook_sizes)} code streams, Gepard packs "
                            f"{self.fsq.config.num_groups} groups")
        self._bound = built_in.bound
        self.max_frames = min(self._bound.max_frames, vllm.max_model_len - 4)

    def check(self, request: SynthesisRequest) -> None:
        """What only this path knows: no guidance, a clip the codec can encode, the predicted length and vLLM's
        positions."""
        from duet.tts.gepard import check_predicted_length, check_reference

        if request.params.cfg_scale not in (None, 1.0):
            raise InvalidRequest("the vLLM path samples without classifier-free guidance; cfg_scale must be 1",
                                 param="cfg_scale")
        if request.reference is not None:
            check_reference(request.reference, self.codec.samples_per_frame)
        if self.vllm.layout is not None and request.params.max_frames is None:
            check_predicted_length(self.vllm.predicted_frames(self.vllm.encode(request), request.speed),
                                   self.frame_bound(request), self.codec.frame_rate, self._bound.margin_frames)
        need = self.prompt_positions(request) + (request.params.max_frames or self.frame_bound(request)) + 1
        if need > self.vllm.max_model_len:
            raise InvalidRequest(f"prompt + frames = {need} positions exceeds the model's {self.vllm.max_model_len}",
                                 param="input", code="context_length_exceeded")

    def frame_bound(self, request: SynthesisRequest) -> int:
        from duet.gepard.model import NUM_SERVICE_TOKENS

        return min(self.max_frames, self._bound.frames(len(self.vllm.encode(request)) - NUM_SERVICE_TOKENS))

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return self.vllm.num_prefix + len(self.vllm.encode(request))  # [prefix | text ending in SOS]

    def step_cost(self, request: SynthesisRequest, frames: int) -> StepCost:
        return StepCost(frames, 1)  # one vLLM step per frame, as the built-in runtime (no CFG here)

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[_State]:
        states = []
        for request, seed in zip(requests, seeds):
            bound = request.params.max_frames or self.frame_bound(request)
            prefix = None if request.reference is None else self.vllm.reference_prefix(self.codec, request.reference)
            vreq = self.vllm.add(self.vllm.encode(request), request.params, bound, seed, request.speed, prefix)
            states.append(_State(request, vreq))
        return states  # vLLM prefills them in its next step

    def step(self, states: Sequence[_State]) -> list[StepOutput]:
        self.vllm.step()
        outs = []
        for s in states:
            frames = self.vllm.take(s.vreq)  # (C, t)
            packed = self.fsq.fold(frames[None])[0]  # (G, t)
            # A request vLLM ended short of its bound without STOP (aborted inside vLLM) also ends here.
            short = s.vreq.finished and not s.vreq.stopped and s.vreq.emitted < s.vreq.bound
            outs.append(StepOutput(codes=packed, final=s.vreq.finished and (s.vreq.stopped or short)))
        return outs

    def release(self, state: _State) -> None:
        self.vllm.abort(state.vreq)

    def close(self) -> None:
        """Shut vLLM's engine-core process down (the server calls this on exit; nothing is left running)."""
        self.vllm.close()


def load_vllm_runtime(model: str, codec: str | None = None, config: VLLMConfig = VLLMConfig(),
                      name: str | None = None) -> VLLMGepardRuntime:
    """``duet serve --engine vllm``: the engine for a model (see :class:`GepardVLLM`), its codec (by name or
    directory; default the one it was trained with), served as ``name`` (default the directory's name, as
    ``duet.tts.load_runtime`` names a built-in one)."""
    from duet.codecs import load

    engine = GepardVLLM(model, config)
    try:
        return VLLMGepardRuntime(engine, load(codec or engine.trained_codec), name=name)
    except BaseException:
        engine.close()
        raise


def request_params(params: SamplingParams, seed: int, key: int) -> dict[str, Any]:
    """What ``sampler.GepardFrameSampler`` reads from ``SamplingParams.extra_args["duet"]``."""
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
            "stop_threshold": params.stop_threshold, "seed": seed, "key": key}
