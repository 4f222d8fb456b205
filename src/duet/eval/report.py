"""Reports of ``duet eval run`` (Markdown, PNG plots, a static HTML page) and ``duet eval compare`` tables.

Everything here reads a run directory's ``summary.json`` and ``scores.jsonl`` (see :mod:`duet.eval.run`); nothing
is recomputed from audio. ``compare`` aggregates all runs over the utterances every one of them scored, so a system
that failed on a few items is not flattered (or punished) by a different set of sentences.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from duet.errors import DuetError
from duet.eval.scoring import summarize

MISSING = "-"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _f2(x: float) -> str:
    return f"{x:.2f}"


def _f3(x: float) -> str:
    return f"{x:.3f}"


def _ms(x: float) -> str:
    return f"{1000 * x:.0f}"


def _int(x: float) -> str:
    return f"{int(x)}"


@dataclass(frozen=True)
class Column:
    key: str  # dotted path into a summary's "metrics"
    header: str
    fmt: Callable[[float], str]
    note: str  # one line for the legend


COLUMNS = (
    Column("utterances", "n", _int, "utterances scored"),
    Column("wer", "WER %", _pct, "mean of per-utterance WER (Seed-TTS-eval normalisation), Whisper tiny.en by default"),
    Column("cer", "CER %", _pct, "mean of per-utterance CER"),
    Column("sim", "SIM", _f3, "speaker similarity to the prompt (cosine; Resemblyzer by default)"),
    Column("sim_other", "SIM other", _f3, "mean similarity to prompts of other speakers (sets with speakers.json)"),
    Column("dnsmos_ovrl", "OVRL", _f2, "DNSMOS P.835 overall (1-5)"),
    Column("dnsmos_sig", "SIG", _f2, "DNSMOS P.835 speech signal (1-5)"),
    Column("dnsmos_bak", "BAK", _f2, "DNSMOS P.835 background (1-5, higher is quieter)"),
    Column("dnsmos_p808", "P.808", _f2, "DNSMOS P.808 overall (1-5)"),
    Column("duration_mae_s", "dur err s", _f2, "mean |output duration - recording duration| (sets with gt_wav)"),
    Column("rtf", "RTF", _f3, "synthesis time / audio duration (lower is faster)"),
    Column("ttfa_p50_s", "TTFA ms", _ms, "median time to first audio"),
    Column("pesq", "PESQ-WB", _f2, "wide-band PESQ of the reconstruction against ground truth"),
    Column("stoi", "STOI", _f3, "STOI of the reconstruction against ground truth"),
    Column("mcd", "MCD dB", _f2, "mel-cepstral distance to ground truth (lower is better)"),
    Column("runaway.rate", "runaway %", _pct, "generations that hit their frame bound"),
    Column("late_stop.rate", "late %", _pct, "audio longer than k x the expected duration"),
    Column("skipped_words.deletion_rate", "del %", _pct, "deleted words / reference words (ASR alignment)"),
)


def metric(metrics: dict[str, Any], key: str) -> float | None:
    value: Any = metrics
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def cell(metrics: dict[str, Any], column: Column) -> str:
    """The formatted value, with "(k/n)" when only k of the n utterances had it (a metric failed on some)."""
    value = metric(metrics, column.key)
    if value is None:
        return MISSING
    k, n = metrics.get("counts", {}).get(column.key), metrics.get("utterances")
    return column.fmt(value) + (f" ({k}/{n})" if k is not None and n and 0 < k < n else "")


def _used_columns(summaries: Sequence[dict[str, Any]]) -> list[Column]:
    """Columns that at least one run has a value for (a ground-truth-only table has no RTF column)."""
    return [c for c in COLUMNS if c.key == "utterances" or any(metric(s, c.key) is not None for s in summaries)]


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Plots


def _plots(out_dir: Path, rows: list[dict], late_factor: float) -> list[tuple[str, str]]:
    """Write PNGs under plots/; returns (relative path, caption) of each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, str]] = []

    def hist(key: str, title: str, xlabel: str, scale: float = 1.0) -> None:
        values = [scale * r[key] for r in rows if r.get(key) is not None]
        if not values:
            return
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.hist(values, bins=min(30, max(5, len(values) // 3)), color="C0")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("utterances")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(plot_dir / f"{key}.png", dpi=100)
        plt.close(fig)
        made.append((f"plots/{key}.png", title))

    hist("wer", "WER per utterance", "WER %", 100.0)
    hist("sim", "speaker similarity to the prompt", "cosine")
    hist("dnsmos_ovrl", "DNSMOS OVRL", "MOS")
    hist("ttfa_s", "time to first audio", "ms", 1000.0)

    timed = [r for r in rows if r.get("expected_s") is not None]
    if timed:
        fig, ax = plt.subplots(figsize=(5, 4))
        for flag, color, label in ((None, "C0", "utterance"), (False, "C0", "stopped by the model"),
                                   (True, "C3", "runaway (hit the bound)")):
            pts = [r for r in timed if r.get("runaway") is flag]
            if pts:
                ax.scatter([r["expected_s"] for r in pts], [r["duration_s"] for r in pts], s=12, color=color,
                           label=label)
        top = max(max(r["expected_s"] for r in timed), 0.1)
        ax.plot([0, top], [0, top], color="0.6", linewidth=0.8, label="= expected")
        ax.plot([0, top], [0, late_factor * top], color="C1", linewidth=0.8, linestyle="--",
                label=f"late stop: > {late_factor:g} x expected")
        ax.set_xlabel("expected duration (s)")
        ax.set_ylabel("output duration (s)")
        ax.set_title("duration against expected")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plot_dir / "duration.png", dpi=100)
        plt.close(fig)
        made.append(("plots/duration.png", "duration against expected"))
    return made


def _probe_plots(out_dir: Path, rows: list[dict], limit: int = 8) -> list[str]:
    """Probe plots to show: runaways and late stops first, then the set's order."""
    have = [r for r in rows if (out_dir / "probes" / f"{r['utt']}.png").is_file()]
    have.sort(key=lambda r: (not r.get("runaway"), not r.get("late_stop")))
    return [f"probes/{r['utt']}.png" for r in have[:limit]]


# --------------------------------------------------------------------------------------------------------------
# One run


def _summary_rows(metrics: dict[str, Any]) -> list[list[str]]:
    return [[c.header, cell(metrics, c), c.note] for c in _used_columns([metrics])]


def _per_speaker_table(per_speaker: dict[str, dict[str, Any]]) -> str:
    """One row per speaker: utterances, WER, and where similarity was scored, SIM, SIM other and their gap (how
    much closer a clone is to its own prompt than to other speakers')."""
    def f(x: float | None, fmt: Callable[[float], str]) -> str:
        return "-" if x is None else fmt(x)

    rows = []
    for name, m in per_speaker.items():
        gap = None if m.get("sim") is None or m.get("sim_other") is None else m["sim"] - m["sim_other"]
        rows.append([name, str(m["utterances"]), f(m.get("wer"), _pct), f(m.get("sim"), _f3),
                     f(m.get("sim_other"), _f3), f(gap, _f3)])
    return markdown_table(["speaker", "utts", "WER %", "SIM", "SIM other", "gap"], rows)


def _problem_lines(summary: dict[str, Any], limit: int = 50) -> list[str]:
    probs = summary.get("problems", [])
    out = [f"line {p['line']}: {p['stage']}: {p['message']}" if p.get("line") is not None
           else f"{p['stage']}: {p['message']}" for p in probs[:limit]]
    if len(probs) > limit:
        out.append(f"... and {len(probs) - limit} more (summary.json lists all)")
    return out


def write_report(out_dir: str | Path, summary: dict[str, Any], rows: list[dict]) -> dict[str, Path]:
    """report.md, report.html and plots/ of one run directory; returns the paths written."""
    out_dir = Path(out_dir)
    m = summary["metrics"]
    late_factor = summary.get("score_config", {}).get("late_factor", 2.0)
    plots = _plots(out_dir, rows, late_factor)
    probes = _probe_plots(out_dir, rows)
    skipped = summary.get("skipped", {})
    title = f"{summary['system']} on {summary['set_name']}"
    counts = (f"{summary['set_items']} items in the set ({summary['set_lines']} lines); {m['utterances']} scored; "
              f"skipped: {skipped.get('parse', 0)} at parsing, {skipped.get('synthesis', 0)} at synthesis, "
              f"{skipped.get('scoring', 0)} at scoring")
    if m.get("metric_errors"):
        counts += "; not computable on the output (utterance kept, metric left out): " + ", ".join(
            f"{k} {v}" for k, v in sorted(m["metric_errors"].items()))
    worst = sorted((r for r in rows if r.get("wer") is not None), key=lambda r: -r["wer"])[:10]

    md = [f"# {title}", "", f"- model: `{summary['model']}`", f"- test set: `{summary['test_set']}`", f"- {counts}",
          "", markdown_table(["metric", "value", "what"], _summary_rows(m)), ""]
    if summary.get("per_speaker"):
        md += ["## Per speaker", "", _per_speaker_table(summary["per_speaker"]), ""]
    sr = m.get("skipped_words", {})
    md += ["## Short register", "",
           f"- runaway: {m['runaway']['hits']} of {m['runaway']['count']} with a known end",
           f"- late stop (> {late_factor:g} x expected): {m['late_stop']['hits']} of {m['late_stop']['count']}",
           f"- skipped words: {sr.get('deleted', 0)} of {sr.get('reference_words', 0)} reference words deleted, "
           f"in {sr.get('utterances_with_deletion', 0)} utterances", ""]
    if worst:
        md += ["## Highest WER", "", markdown_table(
            ["utt", "target", "transcript", "WER %"],
            [[r["utt"], r["target_text"].replace("|", "/"), (r.get("transcript") or "").replace("|", "/"),
              _pct(r["wer"])] for r in worst]), ""]
    if plots:
        md += ["## Plots", ""] + [f"![{cap}]({path})" for path, cap in plots] + [""]
    if probes:
        md += ["## Per-frame probes (entropy, stop probability)", ""] + [f"![{p}]({p})" for p in probes] + [""]
    problems = _problem_lines(summary)
    if problems:
        md += ["## Problems", ""] + [f"- {p}" for p in problems] + [""]
    md_path = out_dir / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")

    html_path = out_dir / "report.html"
    html_path.write_text(_html_page(title, summary, rows, plots, probes, counts, problems), encoding="utf-8")
    return {"markdown": md_path, "html": html_path}


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], raw_cols: frozenset[int] = frozenset()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if i in raw_cols else html.escape(c)}</td>" for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value: Any, fmt: Callable[[float], str]) -> str:
    return MISSING if value is None else fmt(value)


def _html_page(title: str, summary: dict, rows: list[dict], plots: list[tuple[str, str]], probes: list[str],
               counts: str, problems: list[str]) -> str:
    esc = html.escape
    utt_rows = []
    for r in rows:
        audio = f'<audio controls preload="none" src="wavs/{quote(r["utt"])}.wav"></audio>'
        flags = ", ".join(name for name in ("runaway", "late_stop") if r.get(name))
        utt_rows.append([esc(r["utt"]), esc(r["target_text"]), esc(r.get("transcript") or ""),
                         _fmt(r.get("wer"), _pct), _fmt(r.get("sim"), _f3), _fmt(r.get("dnsmos_ovrl"), _f2),
                         f"{r['duration_s']:.2f}", esc(flags), audio])
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;vertical-align:top}"
        "th{background:#f3f3f3}img{max-width:520px;margin:4px}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f"<p>model <code>{esc(summary['model'])}</code>, set <code>{esc(summary['test_set'])}</code><br>"
        f"{esc(counts)}</p>",
        _html_table(["metric", "value", "what"], _summary_rows(summary["metrics"])),
    ]
    if plots:
        parts.append("<h2>Plots</h2>" + "".join(f'<img src="{quote(p)}" alt="{esc(c)}">' for p, c in plots))
    if probes:
        parts.append("<h2>Per-frame probes</h2>" + "".join(f'<img src="{quote(p)}" alt="{esc(p)}">' for p in probes))
    if problems:
        parts.append("<h2>Problems</h2><ul>" + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul>")
    parts.append("<h2>Utterances</h2>")
    parts.append(_html_table(["utt", "target", "transcript", "WER %", "SIM", "OVRL", "s", "flags", "audio"],
                             utt_rows, raw_cols=frozenset(range(9))))
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------------------
# Several runs side by side


@dataclass(frozen=True)
class Comparison:
    systems: list[str]
    summaries: list[dict[str, Any]]  # metrics over the common utterances, one per run
    common: int  # utterances every run scored (0 when the runs are on different sets)
    same_set: bool
    markdown: str


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], list[dict]]:
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise DuetError(f"{run_dir} is not a finished run (no summary.json): run `duet eval run` first")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    rows = []
    scores = run_dir / "scores.jsonl"
    if scores.is_file():
        rows = [json.loads(line) for line in scores.read_text(encoding="utf-8").splitlines() if line.strip()]
    return summary, rows


def compare_runs(run_dirs: Sequence[str | Path]) -> Comparison:
    """One table, one row per run, ground truth first; metrics over the utterances all runs scored."""
    if not run_dirs:
        raise DuetError("compare needs at least one run directory")
    loaded = [load_run(d) for d in run_dirs]
    order = sorted(range(len(loaded)), key=lambda i: loaded[i][0].get("model") != "ground-truth")
    loaded = [loaded[i] for i in order]
    names = [s["system"] for s, _ in loaded]
    if len(set(names)) != len(names):  # the same system twice (e.g. two settings): tell them apart by directory
        names = [f"{s['system']} ({os.path.basename(os.path.normpath(str(run_dirs[i])))})"
                 for i, (s, _) in zip(order, loaded)]
    same_set = len({s["test_set"] for s, _ in loaded}) == 1
    if same_set:
        common = set.intersection(*({r["utt"] for r in rows} for _, rows in loaded))
        summaries = [summarize([r for r in rows if r["utt"] in common]) for _, rows in loaded]
    else:
        common = set()
        summaries = [summarize(rows) for _, rows in loaded]
    columns = _used_columns(summaries)
    table = markdown_table(["system"] + [c.header for c in columns],
                           [[n] + [cell(s, c) for c in columns] for n, s in zip(names, summaries)])
    sets = sorted({s["set_name"] for s, _ in loaded})
    if same_set:
        scope = (f"set `{sets[0]}`: {len(common)} utterances scored by every system "
                 f"(of {', '.join(str(len(rows)) for _, rows in loaded)} scored per run)")
    else:
        scope = f"different sets ({', '.join(sets)}): each row is over its own utterances, not comparable row to row"
    legend = "; ".join(f"{c.header}: {c.note}" for c in columns[1:])
    md = f"{scope}\n\n{table}\n\n{legend}\n"
    return Comparison(names, summaries, len(common), same_set, md)
