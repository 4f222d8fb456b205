"""Speech for metric tests, synthesised on the spot by festival / espeak-ng (no recordings in the repo)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

FESTIVAL_VOICES = {"kal": "(voice_kal_diphone)", "slt": "(voice_cmu_us_slt_arctic_hts)"}


def festival_wav(text: str, voice: str, path: Path) -> Path:
    """``text2wave`` with one of FESTIVAL_VOICES; skips the test where festival is not installed."""
    if shutil.which("text2wave") is None:
        pytest.skip("festival's text2wave is not installed")
    subprocess.run(
        ["text2wave", "-o", str(path), "-eval", FESTIVAL_VOICES[voice]],
        input=text.encode(),
        check=True,
        capture_output=True,
    )
    return path


def espeak_wav(text: str, voice: str, path: Path) -> Path:
    """``espeak-ng -v voice``; skips the test where espeak-ng is not installed."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
    return path


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="session")
def festival():
    return festival_wav


@pytest.fixture(scope="session")
def espeak():
    return espeak_wav
