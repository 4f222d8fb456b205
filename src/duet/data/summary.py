"""The corpus summary: hours and utterance counts per source, speaker, language and split, plus what was skipped.

Written next to the manifest as `summary.json` (for scripts) and `summary.md` (for people), and printed.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from duet.data.manifest import Utterance

_GROUPS = ("source", "speaker", "language", "split", "text_source")


def summarize(
    utterances: Iterable[Utterance],
    skipped: dict[str, Counter[str]] | None = None,
    dropped: dict[str, Counter[str]] | None = None,
    extra: dict | None = None,
) -> dict:
    """`skipped`: items that failed to render (broken source file, synthesiser error), source -> reason -> count.
    `dropped`: items left out while planning (unspeakable prompt, no audio file), same shape."""
    utterances = list(utterances)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for group in _GROUPS:
        acc: dict[str, dict[str, float]] = defaultdict(lambda: {"utterances": 0, "hours": 0.0})
        for utt in utterances:
            row = acc[getattr(utt, group)]
            row["utterances"] += 1
            row["hours"] += utt.duration / 3600
        table[group] = {
            key: {"utterances": row["utterances"], "hours": round(row["hours"], 4)} for key, row in sorted(acc.items())
        }
    return {
        "utterances": len(utterances),
        "hours": round(sum(u.duration for u in utterances) / 3600, 4),
        "speakers": len(table["speaker"]),
        "by": table,
        "skipped": {src: dict(c) for src, c in sorted((skipped or {}).items()) if c},
        "dropped": {src: dict(c) for src, c in sorted((dropped or {}).items()) if c},
        **(extra or {}),
    }


def format_summary(summary: dict) -> str:
    """Markdown tables, one per grouping."""
    head = f"{summary['utterances']} utterances, {summary['hours']:.2f} h, {summary['speakers']} speakers"
    lines = [f"# Corpus summary: {head}", ""]
    total_h = summary["hours"] or 1.0
    for group in _GROUPS:
        lines += [f"| {group} | utterances | hours | share |", "| --- | ---: | ---: | ---: |"]
        for key, row in summary["by"][group].items():
            lines.append(f"| {key} | {row['utterances']} | {row['hours']:.3f} | {100 * row['hours'] / total_h:.1f}% |")
        lines.append("")
    for title, key in (("Skipped (failed to render)", "skipped"), ("Left out while planning", "dropped")):
        lines.append(f"{title}: " + ("none" if not summary[key] else ""))
        for src, reasons in summary[key].items():
            for reason, n in sorted(reasons.items()):
                lines.append(f"- {src}: {n} x {reason}")
        lines.append("")
    return "\n".join(lines)


def write_summary(out_dir: str | Path, summary: dict) -> str:
    out_dir = Path(out_dir)
    text = format_summary(summary)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "summary.md").write_text(text + "\n", encoding="utf-8")
    return text
