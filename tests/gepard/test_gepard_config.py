"""Every preset builds; the parameter arithmetic in config.py equals the instantiated models."""

from __future__ import annotations

import pytest
import torch

from duet.errors import DuetError
from duet.gepard.config import (
    PRESETS,
    REPORT_BACKBONE_PARAMS,
    REPORT_TOTAL_WITH_VC_PARAMS,
    GepardConfig,
    format_breakdown,
    parameter_breakdown,
    preset,
    report_reconstruction,
)
from duet.gepard.model import GepardModel


def _numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_and_counts_match(name):
    config = preset(name)
    assert config.name == name
    # gepard-500m on the meta device: shapes only, no memory or init time.
    device = "meta" if name == "gepard-500m" else "cpu"
    with torch.device(device):
        model = GepardModel(config)
    counts = parameter_breakdown(config)
    assert counts["total"] == _numel(model)
    assert counts["backbone"] == _numel(model.model)
    assert counts["text_embedding"] == model.embed_tokens.weight.numel()
    assert counts["audio_interface"] == _numel(model.audio_interface)
    assert counts["heads"] == _numel(model.heads)
    assert config.width == 32 * config.audio_embed_dim  # 32 m = D in both presets


def test_golden_counts_written_in_the_docstring():
    big, tiny = parameter_breakdown(preset("gepard-500m")), parameter_breakdown(preset("gepard-tiny"))
    assert big["backbone"] == 498_765_824 and big["total"] == 501_094_361
    assert big["audio_interface"] == 2_106_112 and big["heads"] == 222_425
    assert tiny["backbone"] == 5_312_512 and tiny["total"] == 5_501_593
    # Report (§2.1): ~500M backbone; 555.7M with voice cloning, which adds a Q-Former this preset lacks.
    assert abs(big["backbone"] / REPORT_BACKBONE_PARAMS - 1) < 0.01
    assert big["total"] < REPORT_TOTAL_WITH_VC_PARAMS
    assert "report backbone" in format_breakdown(preset("gepard-500m"))


def test_report_reconstruction_in_the_docstring():
    recon = report_reconstruction()
    assert recon["backbone"] == 511_217_664 and recon["qformer"] == 42_000_385
    assert abs(recon["total"] - REPORT_TOTAL_WITH_VC_PARAMS) < 0.25e6  # 555.5M against the printed 555.7M


def test_report_shape_of_500m():
    b = preset("gepard-500m").backbone
    assert (b.num_layers, b.width, b.num_heads, b.vocab_size) == (14, 1024, 8, 151_936)
    c = preset("gepard-500m")
    assert c.audio_embed_dim == 32 and c.num_logits == 216 and c.stop_pos_weight == 25 and c.stop_loss_weight == 2


def test_state_dict_names():
    with torch.device("meta"):
        names = set(GepardModel(preset("gepard-500m")).state_dict())
    assert "model.layers.13.mlp.down_proj.weight" in names and "model.layers.14.mlp.down_proj.weight" not in names
    assert {"model.embed_tokens.weight", "model.norm.weight", "audio_interface.tables.weight",
            "audio_interface.fc1.weight", "audio_interface.s_audio", "heads.codes.weight",
            "heads.stop.weight"} <= names
    assert not any(n.startswith("lm_head") for n in names)


def test_dict_round_trip_and_unknown_preset():
    config = preset("gepard-tiny")
    assert GepardConfig.from_dict(config.to_dict()) == config
    with pytest.raises(DuetError, match="unknown Gepard preset"):
        preset("gepard-7b")
