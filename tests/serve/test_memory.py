"""`duet serve` restarts itself once with MALLOC_ARENA_MAX set (its effect is measured by serve_bench --soak)."""

import os
import platform
import subprocess
import sys

import pytest

SCRIPT = """
import os, sys
from duet.serve.memory import reexec_with_malloc_arenas
print("start", os.environ.get("MALLOC_ARENA_MAX"), sys.argv[1:], flush=True)
reexec_with_malloc_arenas(int(sys.argv[1]))
print("running", os.environ.get("MALLOC_ARENA_MAX"), flush=True)
"""


def run(arenas: str, **env) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    out = subprocess.run([sys.executable, "-c", SCRIPT, arenas], capture_output=True, text=True, env=environ,
                         check=True, timeout=60)
    return out.stdout.splitlines()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_process_starts_once_more_with_the_variable_set():
    assert run("2") == ["start None ['2']", "start 2 ['2']", "running 2"]


def test_off_or_a_users_own_value_changes_nothing():
    assert run("0") == ["start None ['0']", "running None"]
    assert run("2", MALLOC_ARENA_MAX="4") == ["start 4 ['2']", "running 4"]
