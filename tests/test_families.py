"""The one family table (``duet.families``) against the runtimes it loads and the checkpoints it names."""

from __future__ import annotations

import pytest

from checkpoint_testing import write_tiny_gepard, write_tiny_luna, write_tiny_luna_realtime
from duet.checkpoint_dir import checkpoints_root, read_config
from duet.errors import DuetError
from duet.families import FAMILIES, NAMES, family, shipped_models
from duet.shipped import DEFAULT_MODEL, MODELS
from duet.tts import load_runtime

WRITERS = {"gepard": lambda root: write_tiny_gepard(root, voice=True), "luna": write_tiny_luna,
           "luna-realtime": write_tiny_luna_realtime}


def test_every_family_has_a_distinct_name_and_models():
    assert len(set(NAMES)) == len(NAMES) == len(FAMILIES)
    models = shipped_models()
    assert len(set(models)) == len(models) and MODELS == models and DEFAULT_MODEL == FAMILIES[0].default_model


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_the_table_matches_the_runtime_it_loads(tmp_path, fam):
    runtime = load_runtime(WRITERS[fam.name](tmp_path))
    assert type(runtime).__module__ == fam.runtime_loader.partition(":")[0]
    traits = runtime.traits
    assert ("steps" in fam.options) == traits.steps
    assert ("prompt" in fam.options) == traits.clone_from_prompt == fam.clone_from_prompt
    assert traits.clone_from_audio <= fam.clone_from_audio  # a model may lack what its family can do, not the reverse


@pytest.mark.parametrize("name", [m for f in FAMILIES for m in f.models])
def test_shipped_models_belong_to_their_family(name):
    path = checkpoints_root() / name
    if not (path / "config.json").is_file():
        pytest.skip(f"{name} is not in this checkout")
    assert family(read_config(path)["type"]) is next(f for f in FAMILIES if name in f.models)


def test_unknown_family_is_one_line():
    with pytest.raises(DuetError, match="holds a 'codec' model; duet speaks with: gepard, luna, luna-realtime"):
        family("codec", "x")
