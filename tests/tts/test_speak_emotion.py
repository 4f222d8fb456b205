"""Expressive control through ``duet.load`` / the Speaker and ``duet speak --emotion`` on randomly initialised micro
models: the emotion token reaches the model right after SOT and event tags as single service ids; seeds still fix
the audio; Gepard and a Luna whose tokenizer has no emotion tokens refuse an emotion clearly, before any decoding."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

import duet
from checkpoint_testing import write_tiny_gepard, write_tiny_luna_realtime
from duet.cli import main
from duet.errors import DuetError, InvalidRequest
from duet.text.prompts import luna_prompt
from duet.text.tokens import EMOTIONS, emotion_token, service_ids
from duet.tts.luna import LunaRuntime
from duet.tts.luna_parts import emotion_support
from duet.tts.request import SynthesisRequest
from duet.tts.speaker import Speaker

TEXT = "Well [laugh] hello there."


@pytest.fixture(scope="module")
def gepard_dir(tmp_path_factory):
    return write_tiny_gepard(tmp_path_factory.mktemp("gepard"))


@pytest.fixture(scope="module")
def realtime_dir(tmp_path_factory):
    return write_tiny_luna_realtime(tmp_path_factory.mktemp("realtime"), end_bias=-20.0)


def _spy_text_ids(speaker, monkeypatch) -> list[list[int]]:
    """The text ids of every forward pass of a Luna model (the conditional row)."""
    seen: list[list[int]] = []
    forward = speaker.runtime.model.forward

    def spy(inputs):
        seen.append(inputs.text_ids[0, : int(inputs.text_lengths[0])].tolist())
        return forward(inputs)

    monkeypatch.setattr(speaker.runtime.model, "forward", spy)
    return seen


def test_the_emotion_token_and_the_tags_reach_the_model(luna_speaker, monkeypatch):
    tok = luna_speaker.runtime.tokenizer
    ids = service_ids(tok)
    seen = _spy_text_ids(luna_speaker, monkeypatch)
    luna_speaker.speak(TEXT, seed=1, steps=2, emotion="happy")
    assert seen and seen[0] == luna_prompt(TEXT, tok, emotion="happy")
    assert seen[0][:2] == [ids.sot, ids.emotion("happy")] and seen[0].count(ids.nonverbal("laughter")) == 1
    seen.clear()
    luna_speaker.speak(TEXT, seed=1, steps=2)
    assert seen[0] == luna_prompt(TEXT, tok) and ids.emotion("happy") not in seen[0]


def test_an_emotion_is_part_of_the_plan_and_speech_stays_seeded(luna_speaker):
    runtime = luna_speaker.runtime
    plain, happy = SynthesisRequest(TEXT), SynthesisRequest(TEXT, emotion="happy")
    assert runtime.prompt_positions(happy) == runtime.prompt_positions(plain) + 1  # not the cached plain plan
    a = luna_speaker.speak(TEXT, seed=4, steps=4, emotion="sad")
    b = luna_speaker.speak(TEXT, seed=4, steps=4, emotion="sad")
    c = luna_speaker.speak(TEXT, seed=4, steps=4)
    np.testing.assert_array_equal(a.audio, b.audio)
    assert a.audio.shape != c.audio.shape or not np.array_equal(a.audio, c.audio)
    chunks = list(luna_speaker.stream(TEXT, seed=4, steps=4, emotion="sad"))
    np.testing.assert_array_equal(np.concatenate(chunks), a.audio)


def test_realtime_takes_an_emotion_too(realtime_dir, monkeypatch):
    speaker = duet.load(realtime_dir)
    seen = []
    step = speaker.runtime.prefill

    def spy(requests, seeds):
        seen.extend(r.emotion for r in requests)
        return step(requests, seeds)

    monkeypatch.setattr(speaker.runtime, "prefill", spy)
    a = speaker.speak(TEXT, seed=2, steps=2, emotion="angry")
    np.testing.assert_array_equal(a.audio, speaker.speak(TEXT, seed=2, steps=2, emotion="angry").audio)
    assert seen == ["angry", "angry"] and speaker.runtime.traits.emotions == EMOTIONS
    ids = luna_prompt(TEXT, speaker.runtime.tokenizer, emotion="angry")
    assert speaker.runtime.prompt_positions(SynthesisRequest(TEXT, emotion="angry")) == len(ids)


def test_an_unknown_emotion_names_the_choices(luna_speaker):
    with pytest.raises(InvalidRequest, match="unknown emotion 'bored'; choose one of: " + ", ".join(EMOTIONS)):
        luna_speaker.speak("Hi.", emotion="bored")


def test_gepard_refuses_an_emotion_through_the_shared_check(gepard_dir):
    speaker = duet.load(gepard_dir)
    with pytest.raises(InvalidRequest, match="has no emotion control") as err:
        speaker.speak("Hi.", emotion="happy")
    assert (err.value.param, err.value.code) == ("instructions", "emotion_unsupported")
    assert speaker.runtime.traits.emotions == ()


class _NoEmotionTokens:
    """A tokenizer without the emotion tokens (one not built by duet's text module), the rest delegated."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def get_vocab(self):
        hidden = {emotion_token(n) for n in EMOTIONS}
        return {t: i for t, i in self._tokenizer.get_vocab().items() if t not in hidden}

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def test_a_luna_whose_tokenizer_lacks_the_emotion_tokens_refuses_clearly(luna_speaker):
    rt = luna_speaker.runtime
    bare = LunaRuntime(rt.model, rt.duration, _NoEmotionTokens(rt.tokenizer), rt.codec, name="bare")
    assert bare.traits.emotions == ()
    with pytest.raises(InvalidRequest, match="bare has no emotion control: its tokenizer has no emotion tokens"):
        Speaker(bare).speak("Hi.", emotion="happy")
    assert "fewer than" in emotion_support(rt.tokenizer, vocab_size=service_ids(rt.tokenizer).emotions[0])
    assert emotion_support(rt.tokenizer, rt.grid.backbone.vocab_size) is None


def test_cli_speaks_with_an_emotion_and_tags(luna_dir, luna_speaker, tmp_path):
    out = tmp_path / "happy.wav"
    assert main(["speak", "--emotion", "happy", TEXT, "-o", str(out), "--model", str(luna_dir), "--seed", "3",
                 "--steps", "4"]) == 0
    expected = luna_speaker.speak(TEXT, seed=3, steps=4, emotion="happy").audio
    np.testing.assert_allclose(sf.read(out, dtype="float32")[0], expected, atol=1e-4)  # 16-bit file


@pytest.mark.parametrize("which, emotion, message", [
    ("luna", "bored", "--emotion: unknown emotion 'bored'; choose one of: neutral"),
    ("gepard", "happy", "has no emotion control"),
])
def test_cli_emotion_errors_are_one_line_and_write_nothing(luna_dir, gepard_dir, tmp_path, capsys, which, emotion,
                                                            message):
    out = tmp_path / "x.wav"
    model = luna_dir if which == "luna" else gepard_dir
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(model), "--emotion", emotion]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()
    with pytest.raises(DuetError):
        duet.load(model).speak("Hi.", emotion=emotion)
