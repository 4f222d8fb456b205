"""Helpers of the documentation tests: the repository's Markdown files, their relative links and their marked examples.

An example a test runs is a fenced block right after an HTML comment (invisible on the rendered page):

    <!-- test: creates=hello.wav,hello.json prints=speech.audio.done -->
    ```bash
    curl ...
    ```

``creates``: files the block must leave (non-empty; a ``.wav`` must parse as audio); ``prints``: a string its
standard output must hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_EXAMPLE = re.compile(r"<!--\s*test:?(?P<opts>[^>]*?)-->[ \t]*\n(?:[ \t]*\n)*"
                      r"```(?P<lang>[\w-]+)[^\n]*\n(?P<code>.*?)\n```", re.S)
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target "title")
_DEFINITION = re.compile(r"^\[([^\]]+)\]:\s*(\S+)", re.M)  # [id]: target
_REFERENCE = re.compile(r"\]\[([^\]]+)\]")  # [text][id]


@dataclass(frozen=True)
class Example:
    source: str  # the file, relative to the repository
    line: int  # where its block starts
    lang: str  # bash or python
    code: str
    creates: tuple[str, ...] = ()
    prints: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}"


def markdown_files() -> list[Path]:
    """README.md, every page under docs/ and every model card."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted(REPO.glob("checkpoints/*/README.md"))]


def examples(path: Path) -> list[Example]:
    """The marked examples of one Markdown file, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for m in _EXAMPLE.finditer(text):
        opts = dict(part.split("=", 1) for part in m.group("opts").split() if "=" in part)
        found.append(Example(
            source=path.relative_to(REPO).as_posix(), line=text.count("\n", 0, m.start("code")) + 1,
            lang=m.group("lang"), code=m.group("code"),
            creates=tuple(filter(None, opts.get("creates", "").split(","))),
            prints=tuple(filter(None, opts.get("prints", "").split(",")))))
    return found


def without_code(text: str) -> str:
    """Markdown with its fenced blocks and inline code spans blanked out."""
    return re.sub(r"`[^`\n]*`", "``", _FENCE.sub("", text))


def reference_definitions(text: str) -> dict[str, str]:
    """``[id]: target`` definitions of a Markdown text (ids are case-insensitive)."""
    return {ref.lower(): target for ref, target in _DEFINITION.findall(without_code(text))}


def undefined_references(path: Path) -> list[str]:
    """The ids of ``[text][id]`` links that no ``[id]: target`` defines."""
    text = path.read_text(encoding="utf-8")
    defined = reference_definitions(text)
    return [ref for ref in _REFERENCE.findall(without_code(text)) if ref.lower() not in defined]


def relative_links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file, inline and reference-style, outside its code (URLs and
    same-page anchors left out)."""
    text = path.read_text(encoding="utf-8")
    targets = []
    for target in _LINK.findall(without_code(text)) + list(reference_definitions(text).values()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target)
    return targets


def resolves(path: Path, target: str) -> bool:
    """Whether ``target`` (a relative link of ``path``, an anchor allowed) names a file or directory that exists."""
    return (path.parent / target.partition("#")[0]).exists()
