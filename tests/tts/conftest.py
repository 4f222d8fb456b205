"""Models the speaker tests share, written once per test module: a randomly initialised micro Luna (with its tiny
duet-rvq codec) and its speaker; and one micro model with aligned text input per family (``gepard``, ``luna``,
``realtime``, and ``speaker`` over the three), for the tests of timings and pacing. A module that tests shipped
models defines its own ``gepard`` or ``luna``, which takes precedence."""

from __future__ import annotations

import pytest

import duet
from checkpoint_testing import never_stops, write_tiny_gepard, write_tiny_luna, write_tiny_luna_realtime

ALIGNED_FAMILIES = ["gepard", "luna", "realtime"]


@pytest.fixture(scope="module")
def luna_dir(tmp_path_factory):
    return write_tiny_luna(tmp_path_factory.mktemp("luna"))


@pytest.fixture(scope="module")
def luna_speaker(luna_dir):
    return duet.load(luna_dir)


@pytest.fixture(scope="module")
def gepard(tmp_path_factory):
    return never_stops(duet.load(write_tiny_gepard(tmp_path_factory.mktemp("gepard"), aligned=True)))


@pytest.fixture(scope="module")
def luna(tmp_path_factory):
    return duet.load(write_tiny_luna(tmp_path_factory.mktemp("luna"), aligned=True))


@pytest.fixture(scope="module")
def realtime(tmp_path_factory):  # the end head never fires: a piece runs to its bound (2x predicted + a block)
    return duet.load(write_tiny_luna_realtime(tmp_path_factory.mktemp("realtime"), end_bias=-20.0, aligned=True))


@pytest.fixture(params=ALIGNED_FAMILIES)
def speaker(request):
    return request.getfixturevalue(request.param)
