"""The package layers, read from the code's own imports: nothing imports a package above it.

Bottom to top: a package may import the ones below it (and itself), never one above. Imports inside functions
count as much as top-level ones: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "duet"

LAYERS = [
    {"errors", "config_io", "audio", "command", "finish", "limits", "sampling", "bundled", "checkpoint_dir",
     "families"},  # leaves: errors, config plumbing, checkpoint files, the table of model families,
    # audio files, weights that ship inside wheels, a command, how a generation ended, the bounds on a request's
    # numbers, a request's sampling parameters and frame bound
    {"nn", "text"},  # transformer building blocks and masks; text normalisation, tokenizers, phonemes
    {"codecs"},
    {"shipped"},  # a shipped model directory and where a model name leads
    {"data"},  # corpora, sources, timing, shards
    {"gepard", "luna"},  # the two model families
    {"metrics"},  # ASR, WER, speaker similarity, DNSMOS, signal metrics, one clip's score
    {"train"},  # the shared loop, objectives and the recipes of every stage, post-training included
    {"tts"},  # speakers
    {"serve"},  # engine, codec thread, admission by cost, API, vLLM
    {"eval"},  # test sets, runs, reports and the duet eval command, over duet.metrics
    {"voice"},  # your own voice: data checks, alignment, fine-tuning, scores and export, over all of the above
    {"cli", "__init__"},  # the `duet` command and the package face
]

# Known exceptions, (importer, imported) -> why: none now. The test fails when one is no longer needed.
ALLOWED: dict[tuple[str, str], str] = {}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_by_package() -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> the places, for every duet import in src/duet."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent)
        src = rel.parts[1].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "duet":
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "duet"]
            else:
                continue
            for name in names:
                dst = package_of(name)
                if dst != src:
                    found[(src, dst)].append(f"{rel}:{node.lineno}")
    return found


def test_every_package_has_a_layer():
    rank = {p for layer in LAYERS for p in layer}
    packages = {p.name.removesuffix(".py") for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert packages == rank, f"packages without a layer: {packages - rank}; layers without a package: {rank - packages}"


def test_no_package_imports_one_above_it():
    rank = {p: i for i, layer in enumerate(LAYERS) for p in layer}
    upward = {pair: places for pair, places in imports_by_package().items() if rank[pair[1]] > rank[pair[0]]}
    unexpected = {pair: places[:3] for pair, places in upward.items() if pair not in ALLOWED}
    assert not unexpected, f"imports from a lower layer into a higher one: {unexpected}"
    stale = set(ALLOWED) - set(upward)
    assert not stale, f"these exceptions are no longer needed: remove them from ALLOWED: {stale}"


def test_no_import_circle_between_packages_beyond_the_known_exceptions():
    edges = defaultdict(set)
    for src, dst in imports_by_package():
        if (src, dst) not in ALLOWED:
            edges[src].add(dst)
    for start in edges:  # a path back to ``start``?
        seen, stack = set(), list(edges[start])
        while stack:
            node = stack.pop()
            if node == start:
                raise AssertionError(f"an import circle runs through {start}")
            if node not in seen:
                seen.add(node)
                stack.extend(edges.get(node, ()))


def module_imports() -> dict[str, set[str]]:
    """module -> the duet modules it imports (top-level, lazy and type-checking imports alike), for every module."""
    modules = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "duet":
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def test_no_import_circle_between_modules():
    edges = module_imports()
    for start in edges:  # a path from ``start`` back to itself?
        seen, stack = set(), [(nxt, (start, nxt)) for nxt in edges[start]]
        while stack:
            node, path = stack.pop()
            assert node != start, f"an import circle: {' -> '.join(path)}"
            if node not in seen:
                seen.add(node)
                stack.extend((nxt, (*path, nxt)) for nxt in edges[node])
