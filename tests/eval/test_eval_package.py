"""`duet.eval` exports resolve lazily, and importing the package (as `duet --help` does) stays light."""

import subprocess
import sys

import duet.eval


def test_every_export_resolves_to_its_module():
    assert sorted(duet.eval.__all__) == sorted(duet.eval._EXPORTS)
    for name in duet.eval.__all__:
        obj = getattr(duet.eval, name)
        assert obj.__module__ == f"duet.eval.{duet.eval._EXPORTS[name]}"


def test_cli_registration_imports_no_heavy_module():
    code = (
        "import argparse, sys; import duet.eval.cli as c; c.register(argparse.ArgumentParser().add_subparsers());"
        "print(sorted(m for m in ('scipy', 'soundfile', 'faster_whisper', 'torch', 'jiwer') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
