"""The web page highlights each word while it plays: a real headless Chromium against ``duet serve`` with a
randomly initialised aligned micro Luna (a model with word timings). The page asks for timestamps, shows the words
the SSE events bring, and marks the one whose audio is playing. Skipped only when Debian's chromium is not
installed."""

from __future__ import annotations

import pytest
from browser_testing import Browser, chromium_available

from checkpoint_testing import write_tiny_luna
from process_testing import duet_serve

pytestmark = pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium (apt-get install chromium)")

TEXT = "Hello there, how are you today? The quick brown fox."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = write_tiny_luna(tmp_path_factory.mktemp("luna"), aligned=True)
    with duet_serve("--model", str(model), "--log-level", "warning") as url:
        yield url


def test_words_appear_and_each_is_highlighted_while_it_plays(server):
    with Browser(server + "/") as browser:
        page = browser.page
        page.wait_for("window.duet && window.duet.state === 'idle'")
        assert page.eval("window.duet.timings") is True
        page.type("#text", TEXT)
        page.click("#speak")
        # while the audio plays, some word is marked (the highlight follows the AudioContext's clock)
        page.wait_for("document.querySelector('#words span.now') !== null || window.duet.state === 'error'")
        assert page.eval("window.duet.error") is None
        page.wait_for("window.duet.state === 'done'")
        words = page.eval("window.duet.words.map(w => w.word)")
        assert words[:3] == ["Hello", "there", "how"] and len(words) == 10
        assert page.eval("[...document.querySelectorAll('#words span')].map(s => s.textContent)") == words
