"""What a DATA folder holds, in each of its three layouts; nothing in it is dropped without a reason."""

from __future__ import annotations

import pytest
from voice_testing import SENTENCES, write_ljspeech, write_manifest_folder, write_pairs

from duet.errors import DuetError
from duet.voice.sources import read_data, safe_id


def test_ljspeech_layout_reads_the_normalised_column_and_finds_every_audio_format(tmp_path):
    root = write_ljspeech(tmp_path / "lj", SENTENCES[:6])
    (root / "wavs" / "stray.wav").write_bytes((root / "wavs" / "LJ000.wav").read_bytes())  # audio no line names
    folder = read_data(root)
    assert folder.layout == "ljspeech"
    by_id = {c.id: c for c in folder.clips}
    assert [by_id[f"LJ{i:03d}"].text for i in range(6)] == SENTENCES[:6]  # id|text|normalized: the normalized one
    assert {by_id[f"LJ{i:03d}"].audio.suffix for i in range(6)} == {".wav", ".flac", ".ogg"}
    assert by_id["stray"].text is None and by_id["LJ000"].where == "metadata.csv:1"
    assert read_data(root / "metadata.csv").clips == folder.clips  # the file itself names the layout too


def test_pairs_layout_walks_the_folders_and_keeps_unpaired_files(tmp_path):
    root = write_pairs(tmp_path / "pairs", SENTENCES[:4])
    (root / "lonely.txt").write_text("No audio for this one.")
    folder = read_data(root)
    by_id = {c.id: c for c in folder.clips}
    assert folder.layout == "pairs" and len(folder.clips) == 5
    assert by_id["more_clip01"].text.strip() == SENTENCES[1] and by_id["more_clip01"].audio.is_file()
    assert by_id["lonely"].audio is None and by_id["lonely"].where == "lonely.txt"


def test_manifest_layout_reads_the_manifest_or_its_folder(tmp_path):
    manifest = write_manifest_folder(tmp_path / "m", SENTENCES[:3])
    for data in (manifest, manifest.parent):
        folder = read_data(data)
        assert folder.layout == "manifest"
        assert [c.text for c in folder.clips] == SENTENCES[:3] and all(c.audio.is_file() for c in folder.clips)
        assert {c.language for c in folder.clips} == {"en"}


def test_ids_are_file_names_and_a_repeated_one_is_marked(tmp_path):
    assert safe_id("a/b c?.wav") == "a_b_c_.wav"
    root = write_pairs(tmp_path / "p", SENTENCES[:1])
    for name in ("x y", "x_y"):
        (root / f"{name}.wav").write_bytes((root / "clip00.wav").read_bytes())
        (root / f"{name}.txt").write_text("Hello.")
    clips = read_data(root).clips
    assert [c.problem for c in clips if c.id.startswith("x_y")] == ["", "duplicate id"]


def test_a_folder_without_recordings_is_one_clear_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DuetError, match="holds no recordings"):
        read_data(tmp_path / "empty")
    with pytest.raises(DuetError, match="does not exist"):
        read_data(tmp_path / "nowhere")
