"""The models one server holds, and how the ``model`` a request names finds one.

A server holds one model or several (``duet serve gepard-tiny luna-tiny ...``). Each has its own
:class:`~duet.serve.engine.Engine` (its own engine and codec threads, waiting queue, scheduler limits, KV-cache
budget, time budgets and admission by cost) and its own bound on text preparations running at once, so a flood of requests for one model waits
behind that model only: another model's requests are prepared, admitted and stepped by their own engine. A
preparation waiting for its model's turn waits on the event loop, not in a worker thread, so one model's backlog
cannot take the worker threads another model's preparations run in. The engines share the machine's cores and
the event loop; each answers at its own codec's sample rate.

A request names a model by its id (its runtime's ``name``) or by an alias (``ServeConfig.model_aliases``: (alias,
model id) pairs, e.g. OpenAI's ``tts-1``). ``/v1/models`` lists the ids in serving order, then the aliases. The first
model is the default of the routes that may name none (``/v1/audio/voices`` without ``?model=``).
"""

from __future__ import annotations

import asyncio
from typing import Iterator, Sequence

from starlette.concurrency import run_in_threadpool

from duet.errors import DuetError
from duet.serve.engine import Admission, Engine
from duet.serve.errors import ModelNotFound
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import FamilyRuntime

__all__ = ["ServedModel", "ServedModels"]


class ServedModel:
    """One model of the server: its engine, and the bound on its text preparations running at once."""

    def __init__(self, engine: Engine, max_preparing: int):
        self.engine = engine
        self._preparing = asyncio.Semaphore(max_preparing)  # bound to the server's loop at its first wait

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def runtime(self) -> FamilyRuntime:
        return self.engine.runtime

    @property
    def sample_rate(self) -> int:
        return self.engine.sample_rate

    async def admit(self, request: SynthesisRequest) -> Admission:
        """``Engine.admit`` (text preparation: normalisation, phonemes, a duration model) in a worker thread, at
        most ``max_preparing`` of this model at once: the others wait here, on the event loop, for a turn, so a
        burst of expensive texts takes neither every core from the engine threads nor the worker threads (a
        limited pool) from other models' requests."""
        async with self._preparing:
            return await run_in_threadpool(self.engine.admit, request)

    def close(self) -> None:
        """Stop the engine (what it still holds ends as ``cancelled``), then release what the runtime owns (the
        vLLM runtime's processes)."""
        self.engine.stop()
        close = getattr(self.runtime, "close", None)
        if close is not None:
            close()


class ServedModels:
    """The server's models by id and alias. Raises a one-line DuetError for two models of one id, an alias that
    is also a model id or given twice, or an alias of a model the server does not hold."""

    def __init__(self, engines: Sequence[Engine], aliases: Sequence[tuple[str, str]] = (), max_preparing: int = 2):
        if not engines:
            raise DuetError("a server needs at least one model")
        self.models = tuple(ServedModel(engine, max_preparing) for engine in engines)
        ids = [model.name for model in self.models]
        twice = sorted({name for name in ids if ids.count(name) > 1})
        if twice:
            raise DuetError(f"two models have the id {', '.join(twice)}; every model needs its own (a checkpoint "
                            "directory's id is its directory's name)")
        self._by_id = {model.name: model for model in self.models}
        _check_aliases(aliases, tuple(self._by_id))
        self._aliases = dict(aliases)

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self.models)

    @property
    def default(self) -> ServedModel:
        return self.models[0]

    def find(self, name: str) -> ServedModel:
        """The model of an id or alias; ModelNotFound for any other name."""
        model = self._by_id.get(self._aliases.get(name, name))
        if model is None:
            raise ModelNotFound(name, tuple(known for known, _ in self.listing()))
        return model

    def listing(self) -> list[tuple[str, str]]:
        """Every name a request may use, with the id of its model: the ids in serving order, then the aliases."""
        return [(model.name, model.name) for model in self.models] + list(self._aliases.items())

    def start(self) -> None:
        for model in self.models:
            model.engine.start()

    def close(self) -> None:
        for model in self.models:
            model.close()


def _check_aliases(aliases: Sequence[tuple[str, str]], ids: tuple[str, ...]) -> None:
    """A one-line DuetError for an alias that is a model id, is given twice or names a model not served."""
    names = [alias for alias, _ in aliases]
    for alias, target in aliases:
        if alias in ids:
            problem = "the alias is a model's id already"
        elif names.count(alias) > 1:
            problem = "the alias is given twice"
        elif target not in ids:
            problem = f"no such model; this server has {', '.join(ids)}"
        else:
            continue
        raise DuetError(f"model alias {alias}={target}: {problem}")
