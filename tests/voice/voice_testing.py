"""Fixtures of the voice tests: recordings spoken by espeak-ng (real speech, made in milliseconds), folders of them in
each DATA layout, bad clips of every kind, and a tiny aligned phoneme Gepard with a random tiny codec to fine-tune."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf

from checkpoint_testing import TEXTS, write_tiny_gepard
from duet.text.bpe import BPEConfig, save_bpe, train_bpe
from duet.text.phonemes import mark, phonemize_many

SENTENCES = [
    "Please leave a message after the tone.",
    "Your call is important to us.",
    "The number you have dialed is not in service.",
    "Press one for sales.",
    "Thank you for calling.",
    "Goodbye.",
    "Please hold while we connect you.",
    "All of our agents are busy.",
    "You have two new messages.",
    "The conference will begin shortly.",
    "Enter your password followed by the pound key.",
    "I am sorry, that is not a valid extension.",
]


def speak(text: str, path: Path, voice: str = "en-us") -> Path:
    """``text`` spoken by espeak-ng into ``path`` (a 22,050 Hz mono WAV)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True, capture_output=True)
    return path


def spoken(text: str, tmp: Path) -> tuple[np.ndarray, int]:
    audio, rate = sf.read(str(speak(text, tmp / "spoken.wav")), dtype="float32")
    return audio, rate


def write_pairs(root: Path, sentences: list[str] = SENTENCES) -> Path:
    """NAME.wav + NAME.txt pairs, half of them one folder down."""
    for i, text in enumerate(sentences):
        folder = root / ("more" if i % 2 else "")
        speak(text, folder / f"clip{i:02d}.wav")
        (folder / f"clip{i:02d}.txt").write_text(text + "\n", encoding="utf-8")
    return root


def write_ljspeech(root: Path, sentences: list[str] = SENTENCES) -> Path:
    """metadata.csv (``id|text|normalized`` lines and ``id|text`` ones) + wavs/: WAV, stereo 44.1 kHz FLAC, OGG."""
    lines = []
    for i, text in enumerate(sentences):
        name = f"LJ{i:03d}"
        wav = speak(text, root / "wavs" / f"{name}.wav")
        if i % 3 == 1:  # stereo FLAC at another rate
            audio, rate = sf.read(str(wav), dtype="float32")
            wav.unlink()
            up = np.interp(np.arange(0, len(audio), rate / 44_100), np.arange(len(audio)), audio)
            sf.write(str(root / "wavs" / f"{name}.flac"), np.stack([up, 0.5 * up], axis=1), 44_100)
        elif i % 3 == 2:
            audio, rate = sf.read(str(wav), dtype="float32")
            wav.unlink()
            sf.write(str(root / "wavs" / f"{name}.ogg"), audio, rate)
        lines.append(f"{name}|{text.upper()}|{text}" if i % 2 else f"{name}|{text}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def write_manifest_folder(root: Path, sentences: list[str] = SENTENCES) -> Path:
    """A duet manifest.jsonl over espeak-ng clips (its own splits, which the voice recipe replaces)."""
    from duet.data.manifest import Utterance, write_manifest

    utts = []
    for i, text in enumerate(sentences):
        rel = f"audio/u{i}.wav"
        speak(text, root / rel)
        utts.append(Utterance(f"u{i}", text, "en", "me", rel, 1.0, "recording", "train"))
    return write_manifest(root / "manifest.jsonl", utts)


# clip name -> the reason the checks must give it (duet.voice.checks.REASONS)
BAD = {
    "unreadable": "unreadable",
    "no-transcript": "missing transcript",
    "blank": "empty transcript",
    "only-text": "missing audio",
    "blip": "too short",
    "rambling": "too long",
    "loud": "clipped",
    "gap": "mostly silence",
    "emoji": "unspeakable text",
    "wrong-text": "poor alignment",
}
LONG = ("This sentence goes on and on, far longer than the few seconds that a clip of this fixture may last, "
        "so the checks call it too long.")


def write_bad_clips(root: Path, tmp: Path) -> dict[str, str]:
    """One clip of each kind that cannot be used, as NAME.wav + NAME.txt pairs in ``root`` (the tests cap clips at
    6 s, so ``rambling`` is too long). -> clip id -> expected reason (``BAD``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "unreadable.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt not really a wav file")
    (root / "unreadable.txt").write_text("Hello there.")
    speak("Hello there.", root / "no-transcript.wav")
    speak("Hello there.", root / "blank.wav")
    (root / "blank.txt").write_text("   \n")
    (root / "only-text.txt").write_text("There is no audio for me.")
    rate = 22_050
    t = np.arange(int(0.1 * rate)) / rate
    sf.write(str(root / "blip.wav"), (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)
    (root / "blip.txt").write_text("Hi.")
    speak(LONG, root / "rambling.wav")
    (root / "rambling.txt").write_text(LONG)
    audio, rate = spoken("Thank you for calling.", tmp)
    sf.write(str(root / "loud.wav"), np.clip(audio * 30, -1, 1), rate)
    (root / "loud.txt").write_text("Thank you for calling.")
    word, rate = spoken("Hello.", tmp)
    sf.write(str(root / "gap.wav"), np.concatenate([word, np.zeros(8 * rate, np.float32), word]), rate)
    (root / "gap.txt").write_text("Hello. Hello.")
    speak("Hello there.", root / "emoji.wav")
    (root / "emoji.txt").write_text("Hello \U0001F600 there.")
    speak("Yes.", root / "wrong-text.wav")
    (root / "wrong-text.txt").write_text(LONG)
    return dict(BAD)


def write_tiny_base(root: Path) -> tuple[Path, Path]:
    """A 2-layer aligned Gepard reading espeak-ng IPA (a phoneme BPE trained on a few sentences) and the random
    fsq-tiny codec its config names. -> (model directory, codec directory)."""
    model = write_tiny_gepard(root, aligned=True)
    ipa = phonemize_many(TEXTS * 3 + SENTENCES, "en-us")
    save_bpe(mark(train_bpe(ipa, BPEConfig(vocab_size=300)), "en-us"), model / "tokenizer.json")
    return model, root / "codec"


def copy_tree(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target
