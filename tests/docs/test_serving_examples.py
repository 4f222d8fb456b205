"""The API examples of the docs run against a real ``duet serve``: every marked block of docs/serving.md and README.md
(``docs_testing`` says how a block is marked) is run as a user would run it, curl from bash and Python with the
openai client or websockets, against ``duet serve gepard-tiny gepard-clone-tiny`` in its own process on a free port
of 127.0.0.1 (the examples' ``127.0.0.1:8000`` is rewritten to it). The blocks share one working directory, which
holds ``ref.wav`` (the clip the cloning example uploads) before the first runs.

Also: the serving page documents every request field the API takes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import soundfile as sf
from docs_testing import REPO, examples

from duet.serve.schemas import SpeechRequest
from process_testing import duet_serve

SERVING = REPO / "docs" / "serving.md"
EXAMPLES = examples(SERVING) + examples(REPO / "README.md")
DOC_ADDRESS = "127.0.0.1:8000"


@pytest.fixture(scope="module")
def server():
    """``duet serve gepard-tiny gepard-clone-tiny`` in its own process, as a user would start it -> its host:port."""
    with duet_serve("gepard-tiny", "gepard-clone-tiny", "--log-level", "warning") as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="module")
def workdir(server, tmp_path_factory) -> Path:
    """Where the examples run; ``ref.wav`` in it is a clip of gepard-tiny's voice for the cloning example."""
    work = tmp_path_factory.mktemp("examples")
    reply = httpx.post(f"http://{server}/v1/audio/speech", timeout=120,
                       json={"model": "gepard-tiny", "input": "Good morning, how are you today?", "seed": 1})
    assert reply.status_code == 200, reply.text
    (work / "ref.wav").write_bytes(reply.content)
    return work


def test_the_examples_are_found():
    assert len(examples(SERVING)) >= 8
    langs = {e.lang for e in EXAMPLES}
    assert langs == {"bash", "python"}
    assert any("openai" in e.code for e in EXAMPLES) and any("websockets" in e.code for e in EXAMPLES)
    assert all(DOC_ADDRESS in e.code for e in EXAMPLES), "every example talks to the documented address"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_example_runs_against_a_real_server(example, server, workdir):
    if example.lang == "bash" and shutil.which("curl") is None:
        pytest.skip("needs curl (Debian's curl package)")
    code = example.code.replace(DOC_ADDRESS, server)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    command = ["bash", "-e", "-o", "pipefail", "-c", code] if example.lang == "bash" else [sys.executable, "-c", code]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{example.id} failed:\n{done.stdout}\n{done.stderr}"
    for text in example.prints:
        assert text in done.stdout, f"{example.id} did not print {text!r}:\n{done.stdout}"
    for name in example.creates:
        made = workdir / name
        assert made.is_file() and made.stat().st_size > 0, f"{example.id} did not write {name}"
        if made.suffix == ".wav":
            info = sf.info(str(made))
            assert info.samplerate == 22050 and info.frames > 0


def test_the_serving_page_documents_every_request_field():
    text = SERVING.read_text(encoding="utf-8")
    table = text.split("## Request fields", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert documented == set(SpeechRequest.model_fields), "docs/serving.md's request-field table and SpeechRequest differ"
