"""Serving metrics in the Prometheus text exposition format (version 0.0.4), written by hand.

Counters and histograms are updated from the event loop and read by ``GET /metrics``; a lock keeps a scrape
consistent. Engine-side numbers (queue depth, running requests, cache bytes, finish reasons) are read from each
model's ``Engine.stats()`` at scrape time rather than mirrored here.

What one model does carries its id as a ``model`` label (time to first audio, real-time factor, audio seconds and
every engine number), one series per served model from the start; what the HTTP layer counts for the whole server
(requests by route and status, streams open now) has no model label.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from duet.serve.engine import EngineStats

TTFA_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RTF_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last one is +Inf
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """Its samples; ``labels`` (``key="value",...``) go on each, before ``le``."""
        out, cumulative = [], 0
        for bound, count in zip(self.buckets, self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{{labels},le="{bound:g}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total:.6f}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


@dataclass
class _ModelMetrics:
    """What the HTTP layer measures of one model's requests."""

    ttfa: Histogram = field(default_factory=lambda: Histogram(TTFA_BUCKETS))
    rtf: Histogram = field(default_factory=lambda: Histogram(RTF_BUCKETS))
    audio_seconds: float = 0.0


def _model_label(model: str) -> str:
    """``model="..."`` with the id escaped as the exposition format asks (a directory's name may hold anything)."""
    value = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'model="{value}"'


def _header(name: str, kind: str, text: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


class Metrics:
    """The server's counters and histograms; ``models``: the ids of the served models, in serving order."""

    def __init__(self, models: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()  # (method, route, status)
        self.active_streams = 0
        self.models = {model: _ModelMetrics() for model in models}

    def count_request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1

    def stream_opened(self) -> None:
        with self._lock:
            self.active_streams += 1

    def stream_closed(self) -> None:
        with self._lock:
            self.active_streams -= 1

    def observe_ttfa(self, model: str, seconds: float) -> None:
        with self._lock:
            self.models[model].ttfa.observe(seconds)

    def observe_finished(self, model: str, wall_s: float, audio_s: float) -> None:
        """A request that produced audio: real-time factor = generation wall time / audio duration."""
        with self._lock:
            m = self.models[model]
            m.audio_seconds += audio_s
            if audio_s > 0:
                m.rtf.observe(wall_s / audio_s)

    def render(self, stats: Mapping[str, EngineStats]) -> str:
        """The exposition text; ``stats``: each served model's engine numbers, by model id."""
        with self._lock:
            lines = self._http_lines() + self._model_lines()
        return "\n".join(lines + _engine_lines(stats)) + "\n"

    def _http_lines(self) -> list[str]:
        lines = _header("duet_requests_total", "counter", "HTTP requests by method, route and status code.")
        for (method, route, status), n in sorted(self.requests.items()):
            lines.append(f'duet_requests_total{{method="{method}",route="{route}",status="{status}"}} {n}')
        lines += _header("duet_active_streams", "gauge", "Speech responses being produced now, all models.")
        lines.append(f"duet_active_streams {self.active_streams}")
        return lines

    def _model_lines(self) -> list[str]:
        lines = _header("duet_ttfa_seconds", "histogram", "Time from request arrival to the first audio chunk.")
        for model, m in self.models.items():
            lines += m.ttfa.lines("duet_ttfa_seconds", _model_label(model))
        lines += _header("duet_rtf", "histogram", "Real-time factor per request (generation time / audio time).")
        for model, m in self.models.items():
            lines += m.rtf.lines("duet_rtf", _model_label(model))
        lines += _header("duet_audio_seconds_total", "counter", "Seconds of audio produced.")
        lines += [f"duet_audio_seconds_total{{{_model_label(model)}}} {m.audio_seconds:.6f}"
                  for model, m in self.models.items()]
        return lines


# (metric name, kind, help, the EngineStats field it reads)
_ENGINE_SERIES = (
    ("duet_queue_depth", "gauge", "Requests waiting for a slot.", "waiting"),
    ("duet_engine_running", "gauge", "Requests in the running batch.", "running"),
    ("duet_kv_cache_reserved_bytes", "gauge", "KV-cache bytes reserved by running requests.", "cache_bytes_used"),
    ("duet_kv_cache_budget_bytes", "gauge", "KV-cache budget.", "cache_bytes_total"),
    ("duet_engine_steps_total", "counter", "Engine decode steps.", "steps"),
    ("duet_engine_frames_total", "counter", "Frames emitted.", "frames"),
)


def _engine_lines(stats: Mapping[str, EngineStats]) -> list[str]:
    """Each model's engine numbers, one series per model."""
    lines: list[str] = []
    for name, kind, text, attr in _ENGINE_SERIES:
        lines += _header(name, kind, text)
        lines += [f"{name}{{{_model_label(model)}}} {getattr(s, attr)}" for model, s in stats.items()]
    lines += _header("duet_engine_finished_total", "counter", "Requests ended, by reason.")
    for model, s in stats.items():
        lines += [f'duet_engine_finished_total{{{_model_label(model)},reason="{r}"}} {n}' for r, n in s.finished.items()]
    return lines
