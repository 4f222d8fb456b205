"""Speaking text while it arrives (``duet.tts.live``, ``duet speak --stdin-stream``) on a random tiny Gepard."""

import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import duet
from checkpoint_testing import write_tiny_gepard
from duet.sampling import FrameBound
from duet.text.segmenter import SegmenterConfig, TextSegmenter
from duet.tts.live import read_deltas, speak_live

TEXT = "Hello there, my good friend. How are you today? Fine"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_gepard(tmp_path_factory.mktemp("live"))


@pytest.fixture(scope="module")
def speaker(model_dir):
    speaker = duet.load(model_dir)
    runtime = speaker.runtime  # random weights rarely stop: a fixed bound keeps each piece short
    runtime.config = replace(runtime.config, bound=FrameBound(frames_per_token=0.0, margin_frames=5),
                             params=replace(runtime.config.params, stop_threshold=0.999999))
    return speaker


def test_pieces_sound_as_the_speaker_says_each_with_its_seed(speaker):
    audio, spoken = [], []
    deltas = [ch for ch in TEXT]  # one character at a time
    ended = speak_live(speaker, deltas, audio.append, seed=11, on_piece=lambda i, p: spoken.append(p))
    seg = TextSegmenter()
    expected = [p for ch in TEXT for p in seg.push(ch)] + seg.finish()
    assert spoken == expected and len(spoken) == 3 and " ".join(spoken) == TEXT
    assert ended == ["bound"] * 3
    gap = np.zeros(round(speaker.config.gap_seconds * speaker.sample_rate), np.float32)
    want = []
    for i, piece in enumerate(spoken):  # piece i: seed + i, as a text-streaming session seeds it
        want += ([gap] if i else []) + [speaker.speak(piece, seed=11 + i).audio]
    np.testing.assert_array_equal(np.concatenate(audio), np.concatenate(want))


def test_a_piece_is_spoken_before_the_input_ends_and_a_stall_releases_words(speaker):
    events = []

    def deltas():
        yield "Hello there. How are"
        events.append("input went on")
        yield None  # nothing new for a while: the clock passes the stall limit
        events.append("input ended")

    times = iter([0.0, 5.0])  # "are" may be half a word: it waits for the end of input
    speak_live(speaker, deltas(), lambda a: None, seed=0, config=SegmenterConfig(idle_seconds=1.0),
               on_piece=lambda i, p: events.append(p), clock=lambda: next(times))
    assert events == ["Hello there.", "input went on", "How", "input ended", "are"]


def test_read_deltas_decodes_utf8_split_across_reads_and_ticks_while_idle():
    r, w = os.pipe()
    data = "café ☕ done".encode()
    cut = data.index("☕".encode()) + 1  # inside the three bytes of the cup

    def write():
        os.write(w, data[:cut])
        time.sleep(0.3)
        os.write(w, data[cut:])
        os.close(w)

    threading.Thread(target=write).start()
    got = list(read_deltas(r, poll_s=0.05))
    os.close(r)
    assert "".join(g for g in got if g is not None) == "café ☕ done"
    assert None in got  # the idle ticks while the writer slept


def test_cli_speaks_piped_text_as_it_comes(model_dir, tmp_path):
    out = tmp_path / "live.wav"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "duet.cli", "speak", "--stdin-stream", "--model", str(model_dir),
                             "--seed", "3", "-o", str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    proc.stdin.write("Good morning. ")
    proc.stdin.flush()
    deadline = time.monotonic() + 240  # the first piece is announced before the input ends
    line = ""
    while "piece 0" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    assert "piece 0: Good morning." in line
    proc.stdin.write("See you")
    proc.stdin.close()
    assert proc.wait(240) == 0, proc.stderr.read()
    assert "in 2 pieces" in proc.stdout.read()
    audio, sr = sf.read(out, dtype="float32")
    assert sr == 22_050 and len(audio) > 0


def test_cli_refuses_a_text_argument_with_stdin_stream(model_dir, tmp_path, capsys):
    from duet.cli import main

    assert main(["speak", "--stdin-stream", "hello", "-o", str(tmp_path / "x.wav"), "--model", str(model_dir)]) == 2
    assert "standard input" in capsys.readouterr().err
