"""Every relative link of the README, the docs pages and the model cards leads to a file of the repository.

``mkdocs build --strict`` (CI) checks the site's links too, anchors included; this checks them as a reader of the
checkout follows them, the README included, which the site does not contain.
"""

from __future__ import annotations

import importlib.util

import pytest
from docs_testing import REPO, markdown_files, relative_links, resolves, undefined_references

FILES = markdown_files()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(path):
    broken = [t for t in relative_links(path) if not resolves(path, t)]
    assert not broken, f"{path.relative_to(REPO)} links to missing files: {broken}"
    assert not undefined_references(path), f"{path.relative_to(REPO)} uses undefined link references"


def test_the_markdown_files_are_found():
    names = {p.relative_to(REPO).as_posix() for p in FILES}
    assert {"README.md", "docs/index.md", "docs/serving.md", "checkpoints/gepard-tiny/README.md"} <= names


def test_the_architecture_page_names_every_layer():
    """docs/architecture.md draws the layers of tests/test_layers.py: every package of them is on the page."""
    spec = importlib.util.spec_from_file_location("layers_under_test", REPO / "tests" / "test_layers.py")
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    page = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    diagram = page.split("```mermaid", 1)[1].split("```", 1)[0]
    missing = sorted(p for layer in layers.LAYERS for p in layer if p not in diagram and p != "__init__")
    assert not missing, f"packages of tests/test_layers.py missing from the architecture diagram: {missing}"
