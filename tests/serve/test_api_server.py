"""The API behind a real uvicorn server on 127.0.0.1: streaming, disconnects, concurrent clients, 429."""

import asyncio
import io

import httpx
import numpy as np
import soundfile as sf
from serve_testing import uvicorn_server, wait_until

from duet.serve.api import create_app
from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.scheduler import SchedulerConfig

BODY = {"model": "duet-mock", "voice": "alloy"}


def serve(mock: MockConfig, script=None, **scheduler):
    runtime = MockRuntime(mock, script=script)
    engine = Engine(runtime, EngineConfig(scheduler=SchedulerConfig(**scheduler)))
    return create_app(engine), engine, runtime


def test_streamed_wav_over_http_arrives_in_chunks_and_parses():
    app, engine, _ = serve(MockConfig(step_delay_s=0.005))
    with uvicorn_server(app) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            with client.stream("POST", "/v1/audio/speech", json={**BODY, "input": "x" * 40, "seed": 1}) as r:
                assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
                assert r.headers.get("transfer-encoding") == "chunked"
                pieces = list(r.iter_raw())
            audio, sr = sf.read(io.BytesIO(b"".join(pieces)))
            assert sr == 16_000 and audio.shape == (40 * 320,)
            assert len(pieces) > 2  # audio came as it was made, not in one piece at the end
            again = client.post("/v1/audio/speech", json={**BODY, "input": "x" * 40, "seed": 1,
                                                          "response_format": "pcm"})
            np.testing.assert_allclose(np.frombuffer(again.content, "<i2") / 32767, audio, atol=1.5 / 32767)


def test_client_disconnect_mid_stream_frees_the_slot(never_stop):
    app, engine, runtime = serve(MockConfig(step_delay_s=0.01), script=never_stop, max_running=2)
    with uvicorn_server(app) as url:
        for stream_format in ("audio", "sse"):
            with httpx.Client(base_url=url, timeout=30) as client:
                with client.stream("POST", "/v1/audio/speech",
                                   json={**BODY, "input": "forever", "stream_format": stream_format}) as r:
                    assert r.status_code == 200
                    got = 0
                    for piece in r.iter_raw():
                        got += len(piece)
                        if got > 4000:
                            break
                    assert engine.stats().running == 1
            # leaving both context managers closed the connection mid-stream
            wait_until(lambda: engine.stats().running == 0, what="the engine to drop the request")
        assert engine.stats().finished["cancelled"] == 2
        assert runtime.live_states == 0 and engine.stats().cache_bytes_used == 0
        metrics = httpx.get(f"{url}/metrics").text
        assert "duet_active_streams 0" in metrics and 'duet_engine_running{model="duet-mock"} 0' in metrics
        r = httpx.post(f"{url}/v1/audio/speech", json={**BODY, "input": "after", "max_frames": 3}, timeout=30)
        assert r.status_code == 200 and len(r.content) == 44 + 3 * 320 * 2


def test_concurrent_streams_and_429_when_full():
    app, engine, _ = serve(MockConfig(step_delay_s=0.003, max_frames=5000), max_running=4, max_waiting=4)
    lengths = [10 + 3 * i for i in range(8)]

    async def one(client: httpx.AsyncClient, n: int) -> tuple[int, bytes]:
        r = await client.post("/v1/audio/speech", json={**BODY, "input": "y" * n, "response_format": "pcm"})
        return r.status_code, r.content

    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            results = await asyncio.gather(*(one(client, n) for n in lengths))
            assert [s for s, _ in results] == [200] * 8
            assert [len(c) for _, c in results] == [n * 320 * 2 for n in lengths]
            # 8 long requests (3000 frames, 9 s each) fill 4 slots + 4 queue places; the ninth is refused
            busy = [asyncio.create_task(one(client, 3000)) for _ in range(8)]
            for _ in range(1000):
                stats = engine.stats()
                if stats.running + stats.waiting == 8:
                    break
                await asyncio.sleep(0.01)
            assert engine.stats().running + engine.stats().waiting == 8
            refused = await client.post("/v1/audio/speech", json={**BODY, "input": "z"})
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
            assert refused.json()["error"]["code"] == "server_busy"
            for task in busy:
                task.cancel()
            await asyncio.gather(*busy, return_exceptions=True)

    with uvicorn_server(app) as url:
        asyncio.run(run(url))
        # far sooner than the 18 s they would take to finish: running and queued requests both saw their clients go
        wait_until(lambda: engine.stats().running + engine.stats().waiting == 0, timeout=12.0,
                   what="cancelled clients to leave")
        assert engine.stats().finished["cancelled"] == 8


def test_a_stalled_request_body_gets_a_408_and_the_server_keeps_serving():
    import socket
    from urllib.parse import urlparse

    from duet.serve.api import ServeConfig

    runtime = MockRuntime(MockConfig())
    app = create_app(Engine(runtime, EngineConfig()), ServeConfig(body_timeout_s=0.5))
    with uvicorn_server(app) as url:
        u = urlparse(url)
        with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"model\": ")  # ... and nothing more
            reply = b""
            while b"request_timeout" not in reply and (chunk := sock.recv(4096)):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply
        assert httpx.post(f"{url}/v1/audio/speech", json={**BODY, "input": "ok"}, timeout=30).status_code == 200


class FailsLate(MockRuntime):
    """Fails the request "fails late" after 30 frames of audio have gone out."""

    def step(self, states):
        if any(s.request.text == "fails late" and s.emitted >= 30 for s in states):
            raise RuntimeError("broken mid-way")
        return super().step(states)


def _read_stream(url: str, body: dict) -> tuple[int, bool]:
    """Stream a response to its end -> (bytes read, whether the transfer ended cleanly)."""
    got = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        with client.stream("POST", "/v1/audio/speech", json={**BODY, **body}) as r:
            assert r.status_code == 200
            try:
                for piece in r.iter_raw():
                    got += len(piece)
            except httpx.RemoteProtocolError:  # the server closed before the closing chunk
                return got, False
    return got, True


def test_streamed_audio_ends_cleanly_only_when_the_generation_did():
    """Raw streamed audio has sent its headers before it ends, so a failure or a text cut at the frame bound cuts
    the transfer (every client reports an incomplete body) instead of ending it like a whole answer; a bound the
    client set itself ends cleanly."""
    script = lambda request: None if request.text.startswith("never") else 40  # noqa: E731
    runtime = FailsLate(MockConfig(step_delay_s=0.002, max_frames=120), script=script)
    app = create_app(Engine(runtime, EngineConfig()))
    with uvicorn_server(app) as url:
        assert _read_stream(url, {"input": "fine", "response_format": "pcm"}) == (40 * 320 * 2, True)
        got, clean = _read_stream(url, {"input": "fails late", "response_format": "pcm"})
        assert not clean and 0 < got < 40 * 320 * 2
        got, clean = _read_stream(url, {"input": "never stops", "response_format": "wav"})  # cut at 120 frames
        assert not clean and got == 44 + 120 * 320 * 2
        asked = {"input": "never stops", "response_format": "wav", "max_frames": 50}
        assert _read_stream(url, asked) == (44 + 50 * 320 * 2, True)
        assert httpx.get(f"{url}/health").status_code == 200


def test_a_client_that_stops_reading_is_cut_and_frees_its_slot(never_stop):
    import socket
    from urllib.parse import urlparse

    from duet.serve.api import ServeConfig

    runtime = MockRuntime(MockConfig(step_delay_s=0.0005, max_frames=200_000), script=never_stop)
    engine = Engine(runtime, EngineConfig())
    app = create_app(engine, ServeConfig(stream_idle_timeout_s=0.5))
    with uvicorn_server(app) as url:
        u = urlparse(url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills at once
        sock.connect((u.hostname, u.port))
        body = b'{"model": "duet-mock", "voice": "alloy", "input": "forever", "response_format": "pcm"}'
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # ... and never reads the answer
        try:
            wait_until(lambda: engine.stats().running == 1, what="the request to start")
            wait_until(lambda: engine.stats().running == 0, timeout=30.0, what="the stalled stream to be cut")
        finally:
            sock.close()
        assert engine.stats().finished["cancelled"] == 1 and runtime.live_states == 0
        assert httpx.get(f"{url}/metrics").text.count("duet_active_streams 0") == 1
        r = httpx.post(f"{url}/v1/audio/speech", json={**BODY, "input": "after", "max_frames": 3}, timeout=30)
        assert r.status_code == 200 and len(r.content) == 44 + 3 * 320 * 2


def test_a_connection_that_stalls_in_its_headers_is_closed():
    import socket
    import time
    from urllib.parse import urlparse

    from duet.serve.protocol import header_timeout_protocol

    app = create_app(Engine(MockRuntime(MockConfig()), EngineConfig()))
    with uvicorn_server(app, http=header_timeout_protocol(0.5)) as url:
        u = urlparse(url)
        socks = [socket.create_connection((u.hostname, u.port), timeout=10) for _ in range(2)]
        socks[1].sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")  # ... and no more headers
        started = time.monotonic()
        for sock in socks:
            assert sock.recv(4096) == b""  # closed by the server, with nothing to say
            sock.close()
        assert time.monotonic() - started < 5
        r = httpx.post(f"{url}/v1/audio/speech", json={**BODY, "input": "ok"}, timeout=30)  # others are served
        assert r.status_code == 200 and len(r.content) == 44 + 2 * 320 * 2


def test_a_client_gone_while_sending_its_body_is_no_server_error(caplog):
    """It used to be logged as an unhandled error with a traceback and counted as a 500."""
    import logging
    import socket
    import time
    from urllib.parse import urlparse

    app = create_app(Engine(MockRuntime(MockConfig()), EngineConfig()))
    with uvicorn_server(app) as url, caplog.at_level(logging.INFO, logger="duet.serve"):
        u = urlparse(url)
        with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"model\": ")
            time.sleep(0.3)  # the handler is reading the body now
        wait_until(lambda: "client closed" in _speech_statuses(url), what="the request to be counted")
        assert _speech_statuses(url) == {"client closed": 1}
        assert "unhandled error" not in caplog.text and "Traceback" not in caplog.text


def _speech_statuses(url: str) -> dict[str, int]:
    """/metrics' speech-route request counts by status ("client closed" for 499)."""
    counts = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('duet_requests_total{method="POST",route="/v1/audio/speech"'):
            status = line.split('status="')[1].split('"')[0]
            counts["client closed" if status == "499" else status] = int(line.rsplit(" ", 1)[1])
    return counts
