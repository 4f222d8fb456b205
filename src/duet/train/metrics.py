"""Training metrics as JSON lines: one object per logged step, ``{"step": ..., "time": ..., "<name>": value}``.

On resume the log is cut back to the checkpoint's step, so the curve never shows steps that the resumed run
will redo.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any


class MetricsLog:
    def __init__(self, path: str | Path, resume_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            self.path.write_text("")
        elif self.path.exists():
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def log(self, step: int, **values: Any) -> dict[str, Any]:
        record = {"step": step, "time": round(time.time(), 3)}
        for key, value in values.items():
            value = float(value) if hasattr(value, "__float__") else value
            record[key] = None if isinstance(value, float) and not math.isfinite(value) else value
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        return record


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics file; a torn last line (a crash mid-write) is skipped."""
    records = []
    path = Path(path)
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
