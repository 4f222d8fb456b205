"""The exported voice's card: ``VOICE/card.md``, what it was made from, how long it took, how well it does.

The same facts travel in the voice's ``config.json`` (``info.voice``), so a program reads them without parsing the
card. The facts (:class:`CardFacts`, plain JSON) are collected by ``duet.voice.recipe`` as the stages finish.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CARD = "card.md"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def card_markdown(name: str, facts: dict[str, Any]) -> str:
    """The card of voice ``name`` from its facts (keys: data, budget, training, scores)."""
    data, budget, training = facts["data"], facts["budget"], facts["training"]
    splits = data["splits"]
    lines = [f"# {name}", "",
             f"A duet voice: {training['base']} fine-tuned on {splits['train']['minutes']:.1f} minutes of recordings "
             f"(language `{data['language']}`, espeak-ng voice `{data['espeak_voice']}`), made by `duet voice train` "
             "(`duet.voice`).", "",
             "```bash", f"duet speak --model path/to/{name} \"Text to say.\" -o out.wav", f"duet serve --model path/to/{name}",
             "```",
             "", "## Data", "",
             f"{data['found']} clips in DATA ({data['layout']} layout), {data['recorded_minutes']:.1f} minutes of them "
             f"usable as recorded, {data['usable_minutes']:.1f} minutes once trimmed to their speech.", "",
             "| split | clips | minutes |", "| --- | ---: | ---: |"]
    for split, label in (("train", "training"), ("val", "validation (best weights)"), ("test", "held out (scores)")):
        lines.append(f"| {label} | {splits[split]['clips']} | {splits[split]['minutes']:.2f} |")
    left = data["rejected"]
    lines += ["", f"Left out: {sum(left.values())} clips" + (" (" + ", ".join(f"{k} {v}" for k, v in left.items())
                                                          + f"); each with its reason in `{data['report']}`."
                                                          if left else ".")]
    if data.get("new_symbols"):
        symbols = ", ".join(f"{k} ({v['count']}x, {v['tokens']} token{'s' if v['tokens'] > 1 else ''})"
                            for k, v in list(data["new_symbols"].items())[:20])
        lines += ["", f"IPA symbols the base model's voice (`{data['base_voice']}`) does not use, with how often the "
                      f"data has them and how many tokens each takes (a symbol without a token of its own is read as "
                      f"its UTF-8 bytes; fine-tuning trained their embeddings): {symbols}."]
    lines += ["", "## Budget", "",
              f"{budget['minutes']:g} minutes given; {budget['spent_minutes']:.1f} minutes spent from the raw folder to "
              f"this voice.", "", "| stage | minutes |", "| --- | ---: |"]
    lines += [f"| {stage} | {seconds / 60:.2f} |" for stage, seconds in budget["stages"].items()]
    lines += ["", f"Training: {training['steps']} steps of {training['planned_steps']} planned "
                  f"({training['sec_per_step']:.2f} s each; ended: {training['stopped'].replace('_', ' ')}), exported "
                  f"from step {training['exported_step']} ({training['exported_from']}). Curves: `training.png`."]
    decoder = facts.get("decoder")
    if decoder:
        lines += ["", f"Its own decoder: {decoder['codec']}'s decoder fine-tuned on the training clips for "
                      f"{decoder['steps']} steps ({decoder['minutes']:.1f} minutes), in `codec/`; the voice decodes "
                      "through it."]
    scores = facts.get("scores")
    if scores:
        wer, sim = scores["wer"], scores["sim"]
        lines += ["", "## Scores", "",
                  f"{scores['clips']} held-out clips, Whisper `{scores['asr']}`; similarity (Resemblyzer) of each "
                  "output to another held-out recording.", "",
                  "| system | WER | similarity |", "| --- | ---: | ---: |",
                  f"| the recordings | {_pct(wer['recordings'])} | {_num(sim['recordings'])} |",
                  f"| this voice | {_pct(wer['voice'])} | {_num(sim['voice'])} |",
                  f"| {training['base']} (before fine-tuning) | {_pct(wer['base'])} | {_num(sim['base'])} |", "",
                  f"This voice's WER is {_ratio(wer['voice'], wer['recordings'])} the recordings'; its similarity "
                  f"is {_ratio(sim['voice'], sim['recordings'])} theirs ({training['base']}: "
                  f"{_ratio(sim['base'], sim['recordings'])})."]
    return "\n".join(lines) + "\n"


def write_card(out_dir: Path, facts: dict[str, Any]) -> Path:
    path = out_dir / CARD
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(card_markdown(out_dir.name, facts), encoding="utf-8")
    os.replace(tmp, path)
    return path
