"""How long the `duet` command takes, whole processes: `duet --help` and a one-sentence `duet speak`.

    python benchmarks/cli_startup.py [--runs 5] [--text "Hello there"] [--model gepard-tiny] [--against HEAD]
        [--out benchmarks/results/cli_startup.md]

Each command runs ``--runs`` times as a fresh process, started as the ``duet`` script starts it (``from duet.cli
import main``); the table gives the median, min and max wall time, and for ``duet speak`` the median of the
synthesis time it prints itself (speech: the model and codec at work), so the rest is start-up (imports, parsing,
loading). ``--against REV`` runs the source tree of git revision REV too (``git archive`` into a temporary
directory, put first on PYTHONPATH; same interpreter and checkpoints), its runs interleaved with the working tree's
so that both see the same load. The load average before and after goes with the table: the machine's cores may be
shared with training runs, which slows everything here and makes single runs noisy.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from duet.cli import main; sys.exit(main())"  # what the `duet` console script runs
SPOKEN = re.compile(r"of audio in ([0-9.]+) s")


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} cores)"


def run_once(argv: list[str], src: Path | None) -> tuple[float, float | None]:
    """-> (wall seconds of the whole process, the synthesis seconds it printed, if any)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("DUET_CHECKPOINTS", str(ROOT / "checkpoints"))  # the extracted tree has none of its own
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ENTRY, *argv], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(['duet', *argv])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    spoken = SPOKEN.search(proc.stdout)
    return wall, float(spoken.group(1)) if spoken else None


def extract(rev: str, into: Path) -> Path:
    """The ``src/`` tree of git revision ``rev`` (read with git archive; the repository is left as it is)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="processes per command and tree (median of them)")
    p.add_argument("--text", default="Hello there", help="what duet speak says")
    p.add_argument("--model", default="gepard-tiny", help="the model duet speak speaks with")
    p.add_argument("--against", default=None, metavar="REV", help="also time git revision REV's source tree")
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        wav = str(Path(tmp) / "speak.wav")
        commands = {"duet --help": ["--help"],
                    f'duet speak "{args.text}" --model {args.model}': ["speak", args.text, "-o", wav, "--model",
                                                                       args.model, "--seed", "0"]}
        trees: dict[str, Path | None] = {"working tree": None}
        if args.against:
            base = Path(tmp) / "against"
            base.mkdir()
            trees[args.against] = extract(args.against, base)
        before = load_average()
        times: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
        for _ in range(args.runs):
            for command, cmd_argv in commands.items():
                for tree, src in trees.items():
                    times.setdefault((command, tree), []).append(run_once(cmd_argv, src))
        after = load_average()

    lines = [f"`python {shlex.join(['benchmarks/cli_startup.py', *(sys.argv[1:] if argv is None else argv)])}`", "",
             f"Load average before: {before}; after: {after}.", "",
             "| command | source | median wall (s) | min | max | speech (s, median) | start-up (s, median) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (command, tree), runs in times.items():
        walls = [w for w, _ in runs]
        spoken = [s for _, s in runs if s is not None]
        speech = statistics.median(spoken) if spoken else None
        rest = statistics.median(w - s for w, s in runs if s is not None) if spoken else statistics.median(walls)
        lines.append(f"| `{command}` | {tree} | {statistics.median(walls):.2f} | {min(walls):.2f} | {max(walls):.2f} "
                     f"| {'' if speech is None else f'{speech:.2f}'} | {rest:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
