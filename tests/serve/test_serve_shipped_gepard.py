"""`duet serve --model gepard --checkpoint DIR`: the runtime built from a shipped-format checkpoint serves speech."""

import io

import soundfile as sf
from fastapi.testclient import TestClient

from checkpoint_testing import write_tiny_gepard
from duet.serve.api import ServeConfig, create_app
from duet.serve.engine import Engine, EngineConfig
from duet.tts import load_runtime


def test_shipped_checkpoint_serves_wav(tmp_path):
    runtime = load_runtime(str(write_tiny_gepard(tmp_path)))
    assert runtime.name == "gepard-test" and runtime.codec.sample_rate == 22050
    engine = Engine(runtime, EngineConfig())
    with TestClient(create_app(engine, ServeConfig())) as client:
        body = {"model": "gepard-test", "input": "Hello there.", "max_frames": 5, "seed": 1}
        reply = client.post("/v1/audio/speech", json=body)
        assert reply.status_code == 200, reply.text
        audio, sr = sf.read(io.BytesIO(reply.content))
        assert sr == 22050 and 0 < len(audio) <= 5 * runtime.codec.samples_per_frame
        assert client.post("/v1/audio/speech", json={**body, "input": ""}).status_code == 400
