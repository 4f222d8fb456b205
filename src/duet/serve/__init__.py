"""Serving: a continuous-batching engine and an OpenAI-compatible speech API.

The engine drives a model through its family runtime (``duet.tts.runtime.FamilyRuntime``: Gepard, Luna, Luna
Realtime, Gepard on vLLM and the mock implement the one contract).

``kv_budget``       the KV-cache byte budget and a request's worst-case reservation
``scheduler``       admission: bounded FIFO queue, slot limit, budget (pure bookkeeping)
``cost``            admission by cost: a request's steps x the measured seconds of a step at the load it would join
``engine``          the engine thread: join/leave at any step, stop / bound / cancel, time budgets
``decode_worker``   the codec thread: every request's stream decoder, batched across requests, beside the model
``mock``            a weightless runtime + codec (uniform logits, scripted stop) for tests and ``--model mock``
``schemas``         request fields, SSE event shapes, ServeConfig and the table of every limit
``audio_io``        wav / pcm / flac bytes out, reference clips in
``word_feed``       a request's word timings as its audio goes out (timestamps events, the ``json`` format)
``text_stream``     the WebSocket that speaks text (plain or SSML) while it arrives
``metrics``         Prometheus text format, a ``model`` label on what each model does
``models``          the models one server holds: an engine each, found by a request's ``model`` (id or alias)
``api``             the FastAPI app (errors in OpenAI's shape; every limit and timeout is listed in ``schemas``)
``protocol``        uvicorn's HTTP protocol with a deadline on request headers
``cli``             ``duet serve``

FastAPI and uvicorn are imported by ``api`` and ``cli`` only; the engine needs neither.
"""
