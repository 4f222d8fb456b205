"""Every shipped checkpoint has its model card (``checkpoints/NAME/README.md``), the convention of model hubs, and the
card does not get in the way of loading: a directory with a README still loads as a model or a codec."""

from __future__ import annotations

import pytest
from docs_testing import REPO

from duet.checkpoint_dir import read_config

SHIPPED = sorted(p.parent for p in REPO.glob("checkpoints/*/config.json"))
SECTIONS = ("## Training data", "## Training: how long, on what", "## Measured", "## Intended use and limits",
            "## Licences of the data")


def test_the_shipped_checkpoints_are_found():
    assert {p.name for p in SHIPPED} >= {"gepard-tiny", "gepard-clone-tiny", "luna-tiny", "luna-realtime-tiny",
                                         "duet-fsq", "duet-fsq-joe", "duet-fsq-causal", "duet-rvq", "duet-rvq-semantic"}


@pytest.mark.parametrize("checkpoint", SHIPPED, ids=lambda p: p.name)
def test_each_checkpoint_has_a_card_with_its_sections(checkpoint):
    card = checkpoint / "README.md"
    assert card.is_file(), f"{checkpoint.name} has no model card"
    text = card.read_text(encoding="utf-8")
    assert text.startswith(f"# {checkpoint.name}\n")
    missing = [s for s in SECTIONS if s not in text]
    assert not missing, f"{checkpoint.name}'s card lacks {missing}"
    assert "../../benchmarks/results/" in text, "a card's numbers link to the results files that produced them"
    assert read_config(checkpoint)["type"] in {"gepard", "luna", "luna-realtime", "duet-fsq", "duet-rvq"}


def test_a_checkpoint_with_its_card_loads():
    """What the loaders read is named, never globbed: the card beside the weights changes nothing."""
    import duet
    import duet.codecs

    assert (REPO / "checkpoints" / "duet-fsq-causal" / "README.md").is_file()
    codec = duet.codecs.load("duet-fsq-causal")
    assert codec.sample_rate == 22050
    speech = duet.load("gepard-tiny").speak("Hi.", seed=0)
    assert speech.sample_rate == 22050 and len(speech.audio) > 0
