"""The voice's scores on its held-out clips, beside the recordings' own and the base model's, through ``duet eval``.

The held-out clips (the manifest's ``test`` split, never trained on) become a Seed-TTS-style test set
(``duet.eval.testset``): each clip's transcript is the target, the clip itself the ground truth, and the next
held-out clip (in id order) the prompt that speaker similarity is measured against, so every similarity compares two
different recordings' worth of speech. Three systems run over it (``duet.eval.run``, resumable):

- ``recordings``: the ground truth itself: Whisper's WER on the recordings, and their similarity to each other;
- ``voice``: the exported voice, through the serving engine (``gepard:DIR``, what the speech API runs);
- ``base``: the base model it was fine-tuned from (gepard-clone-tiny: cloning from the prompt clip), the control.

WER needs a Whisper that hears the language: the bundled tiny.en for English, a CTranslate2 multilingual model
(``asr_model``) otherwise; without one a non-English voice is scored on similarity alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError

SYSTEMS = ("recordings", "voice", "base")


@dataclass(frozen=True)
class Scores:
    """Mean WER and similarity per system (None where not measured)."""

    clips: int
    wer: dict[str, float | None]
    sim: dict[str, float | None]

    def to_json(self) -> dict:
        return {"clips": self.clips, "wer": self.wer, "sim": self.sim}


def heldout_set(manifest: Path, out: Path) -> Path:
    """The test split of ``manifest`` as a meta.lst in ``out`` (module doc); -> its path."""
    from duet.data.manifest import audio_path, read_manifest
    from duet.eval.testset import TestItem, write_meta

    held = sorted((u for u in read_manifest(manifest) if u.split == "test"), key=lambda u: u.id)
    if len(held) < 2:
        raise DuetError(f"{len(held)} held-out clips: scoring needs at least 2 (one as the other's prompt)")
    items = []
    for i, u in enumerate(held):
        prompt = held[(i + 1) % len(held)]
        items.append(TestItem(u.id, prompt.text, audio_path(manifest, prompt), u.text, audio_path(manifest, u),
                              i + 1))
    return write_meta(out / "meta.lst", items)


def asr_seconds_per_audio_second(manifest: Path, language: str, asr_model: str | None, clips: int = 3) -> float:
    """Seconds Whisper takes per second of held-out recordings, timed on the first ``clips`` of them after one untimed
    warm-up (what the budget keeps for the scoring, ``duet.voice.budget.eval_reserve``); 0 where no WER is measured."""
    import time

    from duet.audio import load_audio
    from duet.data.manifest import audio_path, read_manifest
    from duet.metrics.asr import ASRConfig, Transcriber

    if asr_model is None and language != "en":
        return 0.0
    held = sorted((u for u in read_manifest(manifest) if u.split == "test"), key=lambda u: u.id)[: clips + 1]
    if len(held) < 2:
        return 0.0
    asr = Transcriber(ASRConfig(model_path=asr_model, language=language))
    spent, audio_s = 0.0, 0.0
    for i, u in enumerate(held):
        audio, rate = load_audio(audio_path(manifest, u))
        start = time.perf_counter()
        asr.transcribe(audio, rate)
        if i:  # the first one loads the model
            spent, audio_s = spent + time.perf_counter() - start, audio_s + len(audio) / rate
    return spent / max(audio_s, 1e-3)


def score_voice(manifest: Path, voice: Path, base: Path, out: Path, language: str, asr_model: str | None = None,
                seed: int = 0, progress: bool = True) -> Scores:
    """Held-out WER and similarity of the recordings, ``voice`` and ``base`` (module doc); runs in ``out``."""
    from duet.eval.run import RunConfig, run_eval
    from duet.eval.scoring import ScoreConfig
    from duet.eval.synth import SynthOptions

    meta = heldout_set(manifest, out)
    hears = asr_model is not None or language == "en"
    score = ScoreConfig(metrics=("wer", "sim") if hears else ("sim",), asr_model=asr_model, language=language)
    specs = {"recordings": "ground-truth", "voice": f"gepard:{voice}", "base": f"gepard:{base}"}
    wer, sim, clips = {}, {}, 0
    for name in SYSTEMS:
        result = run_eval(RunConfig(model=specs[name], test_set=meta, out_dir=out / name,
                                    synth=SynthOptions(batch_size=8, seed=seed), score=score, progress=progress,
                                    report=False))
        metrics = result.summary["metrics"]
        wer[name], sim[name] = metrics.get("wer") if hears else None, metrics.get("sim")
        clips = max(clips, metrics["utterances"])
    return Scores(clips, wer, sim)
