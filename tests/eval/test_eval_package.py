"""`duet.metrics` exports resolve lazily, and registering `duet eval` (as `duet --help` does) stays light."""

import subprocess
import sys

import duet.metrics


def test_every_export_resolves_to_its_module():
    assert sorted(duet.metrics.__all__) == sorted(duet.metrics._EXPORTS)
    for name in duet.metrics.__all__:
        obj = getattr(duet.metrics, name)
        assert obj.__module__ == f"duet.metrics.{duet.metrics._EXPORTS[name]}"


def test_cli_registration_imports_no_heavy_module():
    code = (
        "import argparse, sys; import duet.eval.cli as c; c.register(argparse.ArgumentParser().add_subparsers());"
        "print(sorted(m for m in ('scipy', 'soundfile', 'faster_whisper', 'torch', 'jiwer') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
