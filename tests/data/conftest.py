"""One tiny corpus, built once per test session and shared read-only by the data tests (a test that changes a
corpus copies it first)."""

from __future__ import annotations

import pytest

from duet.data.build import build_corpus
from duet.data.presets import tiny


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-corpus")
    report = build_corpus(tiny(), out, workers=2, seed=0, progress=False)
    return report
