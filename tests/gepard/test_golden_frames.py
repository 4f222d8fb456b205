"""Golden frames of the shipped Gepards: one sentence at seed 0, greedy or sampled as each model speaks by default and
at temperature 0.6 / top-k 20, recorded (``golden/shipped_frames.json``) before the decode step was rewritten
(``duet.gepard.decode``: plain torch over a preallocated pool, in place of transformers' forward and DynamicCache).

The runtime behind ``duet speak`` (loaded without transformers) and the offline sampler on the stock model (the
oracle, ``duet.gepard.generate``) must both still give exactly those frames: speeding the step up may not change
what a seed says.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import duet
from duet.checkpoint_dir import checkpoints_root
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.gepard.checkpoint import load_gepard
from duet.gepard.generate import generate
from duet.gepard.model import GepardPrompt

GOLDEN = json.loads((Path(__file__).parent / "golden" / "shipped_frames.json").read_text())
SAMPLING = {"default": {}, "temperature=0.6,top_k=20": {"temperature": 0.6, "top_k": 20}}
MODELS = [name for name in GOLDEN["models"] if (checkpoints_root() / name / "config.json").is_file()]
pytestmark = pytest.mark.skipif(not MODELS, reason="no shipped Gepard in this checkout")


@pytest.fixture(scope="module")
def speakers():
    return {name: duet.load(name) for name in MODELS}


@pytest.mark.parametrize("sampling", list(SAMPLING))
@pytest.mark.parametrize("name", MODELS)
def test_the_runtime_speaks_the_recorded_frames(speakers, name, sampling):
    speaker = speakers[name]
    runtime = speaker.runtime
    ((request, seed),) = speaker.requests(GOLDEN["text"], seed=0, **SAMPLING[sampling])
    state = runtime.prefill([request], [seed])[0]
    frames = []
    try:
        while len(frames) < request.params.max_frames:
            out = runtime.step([state])[0]
            if out.stop_prob > request.params.stop_threshold:
                break
            frames.append(out.codes[:, 0].tolist())  # (G,) packed codes of one frame
    finally:
        runtime.release(state)
    assert frames == GOLDEN["models"][name][sampling]


@pytest.mark.parametrize("sampling", list(SAMPLING))
@pytest.mark.parametrize("name", MODELS)
def test_the_offline_sampler_on_the_stock_model_samples_the_recorded_frames(speakers, name, sampling):
    speaker = speakers[name]
    loaded = load_gepard(checkpoints_root() / name)  # the stock transformers backbone
    ids = torch.tensor([speaker.runtime.encode(GOLDEN["text"])])
    params = replace(speaker.runtime.default_params, seed=0, **SAMPLING[sampling])
    result = generate(loaded.model, GepardPrompt(ids), params=params)
    packed = result.packed(GroupFSQ(FSQConfig()))[0, :, : int(result.lengths[0])]  # (G, T)
    assert packed.T.tolist() == GOLDEN["models"][name][sampling]
