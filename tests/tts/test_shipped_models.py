"""Every model the checkout ships loads with today's code and speaks (what `duet speak` does right after install).

Quality is measured by `duet eval`, not here; this pins that the committed weights, configs, tokenizers and codecs
still fit the code: a short sentence gives finite audio of a plausible length, the same seed gives the same audio.
"""

from __future__ import annotations

import numpy as np
import pytest

import duet
from duet.checkpoint_dir import checkpoints_root
from duet.tts import MODELS

SHIPPED = [name for name in MODELS if (checkpoints_root() / name / "config.json").is_file()]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_speaks(name):
    speaker = duet.load(name)
    options = {} if name.startswith("gepard") else {"steps": 4}
    a = speaker.speak("Hello there.", seed=0, **options)
    b = speaker.speak("Hello there.", seed=0, **options)
    seconds = len(a.audio) / a.sample_rate
    assert a.audio.dtype == np.float32 and np.isfinite(a.audio).all() and np.abs(a.audio).max() > 1e-4
    assert 0.1 < seconds < 30.0 and a.sample_rate == speaker.codec.sample_rate
    np.testing.assert_array_equal(a.audio, b.audio)


def test_the_readme_models_are_shipped():
    assert {"gepard-tiny", "luna-tiny", "luna-realtime-tiny"} <= set(SHIPPED)


@pytest.mark.skipif("gepard-clone-tiny" not in SHIPPED, reason="gepard-clone-tiny is not in this checkout")
def test_the_cloning_model_follows_its_reference():
    """gepard-clone-tiny reads a reference clip (here another model's voice): its audio differs from the null
    prefix's, and the same reference and seed give the same audio."""
    reference = duet.load("gepard-tiny").speak("Good morning, how are you today?", seed=0)
    speaker = duet.load("gepard-clone-tiny")
    assert speaker.clone_from_audio
    a = speaker.speak("Hello there.", seed=0, voice_ref=reference.audio, voice_ref_rate=reference.sample_rate)
    b = speaker.speak("Hello there.", seed=0, voice_ref=reference.audio, voice_ref_rate=reference.sample_rate)
    plain = speaker.speak("Hello there.", seed=0)
    np.testing.assert_array_equal(a.audio, b.audio)
    assert a.audio.shape != plain.audio.shape or not np.allclose(a.audio, plain.audio, atol=1e-4)


@pytest.mark.parametrize("name", [m for m in ("luna-tiny", "luna-realtime-tiny") if m in SHIPPED])
def test_shipped_luna_served_in_a_batch_gives_each_request_its_solo_speech(name):
    """The engine batches Luna's and Luna Realtime's denoising passes across requests (one padded forward per
    step); on the shipped weights, requests of different texts joining at different steps get exactly the codes
    each gets alone, which are the Speaker's (``duet speak``) at the same seed."""
    from dataclasses import replace

    import torch

    from duet.tts.request import SynthesisRequest

    speaker = duet.load(name)
    runtime = speaker.runtime
    texts = ["Hello there.", "The museum opens at nine.", "Good morning, how are you today?"]
    reqs = []
    for i, text in enumerate(texts):
        params = replace(runtime.default_params, seed=i, steps=4)
        reqs.append(SynthesisRequest(text, params=replace(params, max_frames=runtime.frame_bound(
            SynthesisRequest(text, params=params)))))  # the bound the Speaker sets

    def run(jobs: list[tuple[int, SynthesisRequest]]) -> list[torch.Tensor]:
        states, got, step = {}, {i: [] for i in range(len(jobs))}, 0
        done: set[int] = set()
        while len(done) < len(jobs):
            for i, (at, r) in enumerate(jobs):
                if at == step:
                    states[i] = runtime.prefill([r], [r.params.seed])[0]
            live = [i for i in states if i not in done]
            for i, out in zip(live, runtime.step([states[i] for i in live])):
                got[i].append(out.codes)
                if out.final or sum(c.shape[1] for c in got[i]) >= jobs[i][1].params.max_frames:
                    done.add(i)
                    runtime.release(states[i])
            step += 1
        return [torch.cat(got[i], dim=1) for i in range(len(jobs))]

    batched = run([(0, reqs[0]), (1, reqs[1]), (3, reqs[2])])
    for req, codes in zip(reqs, batched):
        assert torch.equal(codes, run([(0, req)])[0]), req.text
    spoken = list(speaker.chunks(texts[1], seed=1, steps=4))
    assert torch.equal(torch.cat([c.codes for c in spoken], dim=1), batched[1])
