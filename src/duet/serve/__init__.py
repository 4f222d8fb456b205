"""Serving: a continuous-batching engine and an OpenAI-compatible speech API.

``adapter``         the ModelAdapter protocol between the engine and a model, and FamilyAdapter: any family's
                    runtime (``duet.tts.runtime``: Gepard, Luna, Luna Realtime) behind it, with the shared checks
``kv_budget``       the KV-cache byte budget and a request's worst-case reservation
``scheduler``       admission: bounded FIFO queue, slot limit, budget (pure bookkeeping)
``engine``          the engine thread: join/leave at any step, stop / bound / cancel, per-request stream decoders
``mock``            a weightless adapter + codec (uniform logits, scripted stop) for tests and ``--model mock``
``schemas``         request fields, SSE event shapes, ServeConfig and the table of every limit
``audio_io``        wav / pcm / flac bytes out, reference clips in
``metrics``         Prometheus text format, a ``model`` label on what each model does
``models``          the models one server holds: an engine each, found by a request's ``model`` (id or alias)
``api``             the FastAPI app (errors in OpenAI's shape; every limit and timeout is listed in ``schemas``)
``protocol``        uvicorn's HTTP protocol with a deadline on request headers
``cli``             ``duet serve``

FastAPI and uvicorn are imported by ``api`` and ``cli`` only; the engine needs neither.
"""
