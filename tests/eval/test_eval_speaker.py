"""Speaker similarity with the real Resemblyzer weights on synthetic voices."""

import numpy as np
import pytest

from duet.audio import load_audio
from duet.errors import MissingDependency
from duet.metrics.speaker import SpeakerEncoder, cosine_similarity

A = "The quick brown fox jumps over the lazy dog near the river bank."
B = "Yesterday we walked to the old market to buy some fresh bread."


def test_cosine_similarity_hand_values():
    assert cosine_similarity(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(1 / np.sqrt(2))
    assert cosine_similarity(np.array([2.0, 0.0]), np.array([0.0, 3.0])) == pytest.approx(0.0)
    assert cosine_similarity(np.array([1.0, 2.0]), np.array([-2.0, -4.0])) == pytest.approx(-1.0)


@pytest.fixture(scope="module")
def encoder():
    enc = SpeakerEncoder()
    try:
        _ = enc.encoder  # loads the weights once for the module
    except MissingDependency as err:
        pytest.skip(str(err))
    return enc


def test_same_voice_beats_same_sentence(encoder, festival, espeak, speech_dir):
    emb = {}
    for name, make, voice, text in [
        ("kal_a", festival, "kal", A),
        ("kal_b", festival, "kal", B),
        ("slt_a", festival, "slt", A),
        ("en_a", espeak, "en", A),
        ("en_b", espeak, "en", B),
        ("f3_a", espeak, "en+f3", A),
    ]:
        audio, sr = load_audio(make(text, voice, speech_dir / f"spk_{name}.wav"))  # 16, 32 and 22.05 kHz
        emb[name] = encoder.embed(audio, sr)
        assert emb[name].shape == (256,) and np.linalg.norm(emb[name]) == pytest.approx(1.0, abs=1e-5)
    # Two sentences by one voice are closer than one sentence by two voices.
    assert encoder.similarity(emb["kal_a"], emb["kal_b"]) > encoder.similarity(emb["kal_a"], emb["slt_a"]) + 0.1
    assert encoder.similarity(emb["en_a"], emb["en_b"]) > encoder.similarity(emb["en_a"], emb["f3_a"]) + 0.1
    assert encoder.similarity(emb["kal_a"], emb["kal_a"]) == pytest.approx(1.0, abs=1e-5)


def test_scorer_reports_similarity_to_the_prompt_and_to_other_speakers(tmp_path):
    import soundfile as sf

    from duet.eval.scoring import ScoreConfig, Scorer, summarize
    from duet.eval.testset import TestItem

    class Fake:  # embeddings by file name; the output's embedding is fixed
        vectors = {"own": np.array([1.0, 0.0]), "b": np.array([0.6, 0.8]), "c": np.array([0.0, 1.0])}

        def embed(self, audio, sr):
            return np.array([0.8, 0.6])

        def embed_path(self, path):
            return self.vectors[path.stem]

        def similarity(self, a, b):
            return float(np.dot(a, b))

    paths = {}
    for name in ("own", "b", "c", "out"):
        paths[name] = tmp_path / f"{name}.wav"
        sf.write(paths[name], np.full(1600, 0.1, np.float32), 16_000)
    scorer = Scorer(ScoreConfig(metrics=("sim",)), impostors={"u": [paths["b"], paths["c"]]})
    scorer._speaker = Fake()
    item = TestItem("u", "prompt words", paths["own"], "target words", None, 1)
    row = scorer.score(item, paths["out"], {}, False)
    assert row["sim"] == pytest.approx(0.8) and row["sim_other"] == pytest.approx((0.96 + 0.6) / 2)
    lone = scorer.score(TestItem("v", "prompt words", paths["own"], "target words", None, 2), paths["out"], {}, False)
    assert "sim_other" not in lone  # no impostors known for this utt
    summary = summarize([row, lone])
    assert summary["sim_other"] == pytest.approx(0.78) and summary["counts"]["sim_other"] == 1
