"""Models the speaker tests share: a randomly initialised micro Luna (with its tiny duet-rvq codec), written once
per test module, and its speaker."""

from __future__ import annotations

import pytest

import duet
from checkpoint_testing import write_tiny_luna


@pytest.fixture(scope="module")
def luna_dir(tmp_path_factory):
    return write_tiny_luna(tmp_path_factory.mktemp("luna"))


@pytest.fixture(scope="module")
def luna_speaker(luna_dir):
    return duet.load(luna_dir)
