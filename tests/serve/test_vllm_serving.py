"""``duet serve --engine vllm`` as a user meets it, on duet's side of vLLM (runs everywhere, CI included): model
names resolve as the built-in engine resolves them, the model id is the built-in engine's, the KV cache is sized
to duet's limits, and the temporary export is removed on close and on a failed start. vLLM's engine itself is
replaced by a stand-in here; ``test_vllm_plugin.py`` runs the real one."""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path

import pytest

from duet.checkpoint_dir import checkpoints_root
from duet.codecs.fsq import FSQConfig
from duet.errors import DuetError
from duet.serve.vllm.engine import GepardVLLM, VLLMConfig, VLLMGepardRuntime, load_vllm_runtime
from duet.serve.vllm.export import VLLMModelDir, is_vllm_export
from duet.serve.vllm.kv_cache import FLOOR_BYTES, KV_SPACE_ENV, admitted_kv_bytes, kv_cache_memory_bytes

MiB, GiB = 1024**2, 1024**3
TINY_PER_POSITION = 6 * 2 * 2 * 64 * 4  # gepard-tiny: 6 layers x (K, V) x 2 kv heads x head dim 64 x float32


def packed_codec():
    """What the runtime asks of a codec: eight packed code streams."""
    return types.SimpleNamespace(codebook_sizes=(FSQConfig().codebook_size,) * 8)


@pytest.fixture
def temp_root(monkeypatch, tmp_path) -> Path:
    """Temporary directories land in ``tmp_path``, so a leftover export is seen whatever else runs."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.fixture
def stand_in_vllm(monkeypatch, temp_root) -> list[Path]:
    """GepardVLLM with vLLM's engine replaced by an empty object; returns the frame-bank files it created."""
    import duet.serve.vllm.engine as engine_module

    banks: list[Path] = []
    create = engine_module.create_bank_file
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setattr(engine_module, "create_bank_file", lambda *a, **k: banks.append(create(*a, **k)) or banks[-1])
    monkeypatch.setattr(GepardVLLM, "_build_engine", lambda self: types.SimpleNamespace())
    return banks


def leftovers(root: Path) -> list[Path]:
    return sorted(root.glob("duet-vllm-*"))


def test_a_shipped_name_resolves_to_its_checkpoint_and_a_temporary_export(temp_root):
    files = VLLMModelDir.open("gepard-tiny")
    assert files.source == checkpoints_root() / "gepard-tiny"
    assert files.path.parent == temp_root and files.path.name.startswith("duet-vllm-") and is_vllm_export(files.path)
    files.cleanup()
    files.cleanup()  # twice is harmless: close after a failed request, then at shutdown
    assert not leftovers(temp_root)


def test_an_export_is_loaded_where_it_is_and_never_removed(temp_root, tmp_path_factory):
    export = VLLMModelDir.open("gepard-tiny")
    kept = tmp_path_factory.mktemp("export")
    for f in export.path.iterdir():
        (kept / f.name).write_bytes(f.read_bytes())
    export.cleanup()
    files = VLLMModelDir.open(str(kept))
    assert files.source == files.path == kept and files.temporary is None
    files.cleanup()
    assert (kept / "config.json").is_file()


def test_a_name_that_leads_nowhere_gets_the_builtin_engines_one_line_error(temp_root):
    from duet.serve.cli import served_model

    with pytest.raises(DuetError) as builtin:
        served_model("no-such-model", None)
    with pytest.raises(DuetError) as vllm:
        VLLMModelDir.open("no-such-model")
    assert str(vllm.value) == str(builtin.value) and "\n" not in str(vllm.value)
    assert not leftovers(temp_root)


def test_the_served_model_id_is_the_builtin_engines(stand_in_vllm, temp_root):
    from duet.tts import load_runtime

    builtin = load_runtime("gepard-tiny").name
    with GepardVLLM("gepard-tiny") as engine:
        assert VLLMGepardRuntime(engine, packed_codec()).name == builtin == "gepard-tiny"
        assert VLLMGepardRuntime(engine, packed_codec(), name="tts-1").name == "tts-1"
    assert not leftovers(temp_root)


def test_close_removes_the_export_and_the_frame_bank(stand_in_vllm, temp_root):
    engine = GepardVLLM("gepard-tiny")
    assert len(leftovers(temp_root)) == 1 and stand_in_vllm[0].exists()
    engine.close()
    assert not leftovers(temp_root) and not stand_in_vllm[0].exists()


def test_a_failed_start_removes_the_export_and_the_frame_bank(stand_in_vllm, temp_root, monkeypatch):
    def fail(self):
        raise RuntimeError("vLLM could not start")

    monkeypatch.setattr(GepardVLLM, "_build_engine", fail)
    with pytest.raises(RuntimeError, match="could not start"):
        GepardVLLM("gepard-tiny")
    assert not leftovers(temp_root) and not stand_in_vllm[0].exists()


def test_a_codec_that_fails_to_load_closes_the_engine(stand_in_vllm, temp_root):
    with pytest.raises(DuetError, match="no codec named"):
        load_vllm_runtime("gepard-tiny", codec="no-such-codec")
    assert not leftovers(temp_root) and not stand_in_vllm[0].exists()


def test_kv_cache_is_sized_to_the_admitted_requests():
    assert admitted_kv_bytes(TINY_PER_POSITION, 16, 2048, 2 * GiB) == 16 * 2048 * TINY_PER_POSITION == 192 * MiB
    assert admitted_kv_bytes(TINY_PER_POSITION, 16, 2048, 64 * MiB) == 64 * MiB  # the cache budget caps it
    assert admitted_kv_bytes(TINY_PER_POSITION, 16, 2048, 1 * MiB) == FLOOR_BYTES
    big = 48 * 1024  # one full-length request of a larger model exceeds the budget: vLLM needs at least that
    assert admitted_kv_bytes(big, 16, 4096, 64 * MiB) == 4096 * big


def test_an_explicit_kv_cache_setting_wins():
    limits = (TINY_PER_POSITION, 16, 2048, 2 * GiB)
    assert kv_cache_memory_bytes(*limits, None, {}) == 192 * MiB
    assert kv_cache_memory_bytes(*limits, 0.25, {}) == 256 * MiB
    assert kv_cache_memory_bytes(*limits, 0.25, {KV_SPACE_ENV: "3"}) is None  # vLLM reads it itself
    assert kv_cache_memory_bytes(*limits, None, {KV_SPACE_ENV: ""}) == 192 * MiB  # empty: unset, as vLLM reads it


def test_the_engine_sizes_its_kv_cache_from_the_model(stand_in_vllm, monkeypatch):
    monkeypatch.delenv(KV_SPACE_ENV, raising=False)
    with GepardVLLM("gepard-tiny", VLLMConfig(max_num_seqs=16)) as engine:
        assert engine.max_model_len == 2048
        assert engine.kv_cache_memory_bytes() == 192 * MiB  # vLLM alone took 5.5 GiB
    with GepardVLLM("gepard-tiny", VLLMConfig(max_num_seqs=4, dtype="bfloat16")) as engine:
        assert engine.kv_cache_memory_bytes() == FLOOR_BYTES  # 4 x 2048 x 3072 bytes = 24 MiB
