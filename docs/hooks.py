"""MkDocs hook: the repository's own Markdown beside the docs, with links written as they work on a checkout.

The docs link to files outside ``docs/`` the way a reader of the repository follows them
(``../benchmarks/results/serve_bench.md``, ``../checkpoints/gepard-tiny/README.md``). This hook

- adds every ``benchmarks/results/*.md`` and ``checkpoints/*/README.md`` (the model cards) to the site at the same
  path they have in the repository, so those links have a page to land on and ``mkdocs build --strict`` checks them;
- rewrites each relative link of a page from its repository path to its path in the site, where ``docs/X`` is
  served as ``X`` and everything else keeps its repository path.

A link that leads nowhere in the repository still leads nowhere in the site, so strict mode still fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]
EXTRA = ("benchmarks/results/*.md", "checkpoints/*/README.md")  # repository Markdown served beside the docs
LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")  # [text](target "title") and ![alt](target)

_extra_uris: set[str] = set()


def on_files(files, config):
    for pattern in EXTRA:
        for path in sorted(REPO.glob(pattern)):
            uri = path.relative_to(REPO).as_posix()
            _extra_uris.add(uri)
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def _repo_path(src_uri: str) -> str:
    """Where a page of the site lives in the repository."""
    return src_uri if src_uri in _extra_uris else f"docs/{src_uri}"


def _site_path(repo_path: str) -> str:
    return repo_path.removeprefix("docs/")


def site_link(page_uri: str, target: str) -> str:
    """``target``, a link written relative to the page's repository path, relative to its site path instead."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target  # a URL, an anchor on the same page, or a site-absolute path
    path, sep, anchor = target.partition("#")
    if not path:
        return target
    page_dir = posixpath.dirname(_repo_path(page_uri))
    repo = posixpath.normpath(posixpath.join(page_dir, path))
    site = posixpath.relpath(_site_path(repo), posixpath.dirname(page_uri) or ".")
    return site + sep + anchor


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    return LINK.sub(lambda m: m.group(1) + site_link(uri, m.group(2)) + m.group(3), markdown)
