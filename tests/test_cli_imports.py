"""The command line imports only what it runs: building the parser (``duet --help``, ``duet COMMAND --help``) loads
none of the heavy libraries the commands use (torch, transformers, scipy, ...), which once made ``duet --help``
take seconds. Those checks run in a fresh interpreter: this one may have imported them all.

The choices a parser offers without importing their registries (corpus presets, model presets, Luna objectives) are
spelled out in light modules; two tests keep them equal to the registries. The training stages' actions import their
recipes when they run; the last test runs each of them to a recipe's own refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from duet.cli import _AREAS

HEAVY = ("torch", "transformers", "tokenizers", "safetensors", "scipy", "numpy", "soundfile", "sympy", "einops",
         "fastapi", "uvicorn", "onnxruntime", "ctranslate2", "faster_whisper", "jiwer", "PIL", "matplotlib")


def heavy_modules_after(code: str) -> list[str]:
    """The heavy top-level packages in ``sys.modules`` after ``code`` runs in a fresh interpreter."""
    report = f"import json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    out = subprocess.run([sys.executable, "-c", f"{code}\n{report}"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_building_the_whole_parser_imports_no_heavy_library():
    """What ``duet --help`` does: every area's ``register``."""
    assert heavy_modules_after("import duet.cli\nduet.cli.build_parser()") == []


@pytest.mark.parametrize("argv", [[command, "--help"] for command in _AREAS]
                         + [["train", "gepard", "--help"], ["train", "luna-grpo", "--help"], ["data", "build", "--help"]])
def test_a_command_s_help_imports_no_heavy_library(argv):
    code = ("import contextlib, io, duet.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            f"    duet.cli.main({argv!r})")
    assert heavy_modules_after(code) == []


def test_corpus_preset_choices_are_the_presets():
    from duet.data.cli import CORPUS_PRESETS
    from duet.data.presets import PRESETS

    assert sorted(CORPUS_PRESETS) == sorted(PRESETS)


def test_training_choices_are_the_registries():
    from duet.gepard.config import PRESETS as GEPARD
    from duet.luna.config import PRESETS as LUNA
    from duet.luna.diffusion import OBJECTIVES
    from duet.luna.realtime import PRESETS as REALTIME
    from duet.train import flags

    assert sorted(flags.GEPARD_PRESETS) == sorted(GEPARD)
    assert sorted(flags.LUNA_PRESETS) == sorted(LUNA)
    assert sorted(flags.REALTIME_PRESETS) == sorted(REALTIME)
    assert flags.REALTIME_DEFAULT_PRESET in REALTIME
    assert tuple(flags.LUNA_OBJECTIVES) == tuple(OBJECTIVES)


@pytest.mark.parametrize("stage, message", [
    ("gepard", "give --preset"), ("luna", "give --preset"), ("luna-realtime", "give --init-from"),
    ("gepard-sft", "needs --init-from"), ("gepard-dpo", "needs --init-from"), ("luna-grpo", "give --init-from"),
    ("gepard-export", "no checkpoint"), ("luna-export", "no checkpoint"), ("luna-realtime-export", "no checkpoint"),
    ("luna-grpo-export", "no checkpoint")])
def test_each_training_stage_s_action_reaches_its_recipe(stage, message, tmp_path, capsys):
    """The actions import their recipe when they run: each stage answers a bad command line from the recipe."""
    from duet.cli import main

    run = [str(tmp_path / "no-run")] if stage.endswith("-export") else []
    assert main(["train", stage, *run, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_speaking_with_a_shipped_gepard_imports_neither_transformers_nor_scipy(tmp_path):
    """A one-sentence ``duet speak`` with gepard-tiny: the model loads without transformers (``duet.nn.qwen3``,
    ``duet.text.bpe.PlainBPE``), which took about 3 s of the command's 6-9 s."""
    from duet.checkpoint_dir import checkpoints_root

    if not (checkpoints_root() / "gepard-tiny" / "config.json").is_file():
        pytest.skip("gepard-tiny is not in this checkout")
    code = ("import contextlib, io, duet.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert duet.cli.main(['speak', 'Hello there.', '-o', {str(tmp_path / 'a.wav')!r}, '--seed', '0']) == 0")
    loaded = heavy_modules_after(code)
    assert "transformers" not in loaded and "scipy" not in loaded and "sympy" not in loaded
    assert (tmp_path / "a.wav").stat().st_size > 1000
