"""The README is a front page a newcomer reads in two minutes: about 120 lines at most, no line over 200 characters,
the two set-up commands exactly as CI and users run them, and every measured figure a link to the file behind it
(a results file in benchmarks/results/, or a model card for a checkpoint's size)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
COMMANDS = ('./install.sh && .venv/bin/duet speak "Hello there" -o hello.wav', ".venv/bin/python -m pytest -q")
# a measured figure: a number with a unit (percent, ratio, ms, s, h, MB, millions of parameters)
FIGURE = re.compile(r"\d[\d,.]*\s?(?:%|x\b|ms\b|s\b|h\b|MB\b|M\b)")


def _prose(text: str) -> str:
    """The README without its code blocks, inline code and link targets (figures count in what a reader sees)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "``", text)
    text = re.sub(r"^\[[^\]]+\]:.*$", "", text, flags=re.M)  # reference definitions
    return re.sub(r"\]\([^)]*\)", "]", text)


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 125, f"README has {len(lines)} lines; move detail into docs/"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 200]
    assert not long, f"README lines over 200 characters: {long}"


def test_the_set_up_commands_are_verbatim():
    blocks = re.findall(r"^```bash\n(.*?)\n```", README.read_text(encoding="utf-8"), re.S | re.M)
    for command in COMMANDS:
        assert command in blocks, f"README lost its command block {command!r}"


def test_every_figure_is_inside_a_link():
    prose = _prose(README.read_text(encoding="utf-8"))
    linked = [(m.start(), m.end()) for m in re.finditer(r"\[[^\[\]]*\]", prose)]
    loose = [m.group(0) for m in FIGURE.finditer(prose)
             if not any(a < m.start() and m.end() < b for a, b in linked)]
    assert not loose, f"figures in README without a link to their results file: {loose}"
