"""Serving metrics in the Prometheus text exposition format (version 0.0.4), written by hand.

Counters and histograms are updated from the event loop and read by ``GET /metrics``; a lock keeps a scrape
consistent. Engine-side numbers (queue depth, running requests, cache bytes, finish reasons) are read from
``Engine.stats()`` at scrape time rather than mirrored here.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from dataclasses import dataclass, field

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

    def lines(self, name: str) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip(self.buckets, self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{le="{bound:g}"}} {cumulative}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.n}')
        out.append(f"{name}_sum {self.total:.6f}")
        out.append(f"{name}_count {self.n}")
        return out


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()  # (method, route, status)
        self.active_streams = 0
        self.ttfa = Histogram(TTFA_BUCKETS)
        self.rtf = Histogram(RTF_BUCKETS)
        self.audio_seconds = 0.0

    def count_request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1

    def stream_opened(self) -> None:
        with self._lock:
            self.active_streams += 1

    def stream_closed(self) -> None:
        with self._lock:
            self.active_streams -= 1

    def observe_ttfa(self, seconds: float) -> None:
        with self._lock:
            self.ttfa.observe(seconds)

    def observe_finished(self, wall_s: float, audio_s: float) -> None:
        """A request that produced audio: real-time factor = generation wall time / audio duration."""
        with self._lock:
            self.audio_seconds += audio_s
            if audio_s > 0:
                self.rtf.observe(wall_s / audio_s)

    def render(self, stats: EngineStats) -> str:
        with self._lock:
            lines = ["# HELP duet_requests_total HTTP requests by method, route and status code.",
                     "# TYPE duet_requests_total counter"]
            for (method, route, status), n in sorted(self.requests.items()):
                lines.append(f'duet_requests_total{{method="{method}",route="{route}",status="{status}"}} {n}')
            lines += ["# HELP duet_active_streams Speech responses being produced now.",
                      "# TYPE duet_active_streams gauge", f"duet_active_streams {self.active_streams}",
                      "# HELP duet_ttfa_seconds Time from request arrival to the first audio chunk.",
                      "# TYPE duet_ttfa_seconds histogram", *self.ttfa.lines("duet_ttfa_seconds"),
                      "# HELP duet_rtf Real-time factor per request (generation time / audio time).",
                      "# TYPE duet_rtf histogram", *self.rtf.lines("duet_rtf"),
                      "# HELP duet_audio_seconds_total Seconds of audio produced.",
                      "# TYPE duet_audio_seconds_total counter", f"duet_audio_seconds_total {self.audio_seconds:.6f}"]
        lines += ["# HELP duet_queue_depth Requests waiting for a slot.", "# TYPE duet_queue_depth gauge",
                  f"duet_queue_depth {stats.waiting}",
                  "# HELP duet_engine_running Requests in the running batch.", "# TYPE duet_engine_running gauge",
                  f"duet_engine_running {stats.running}",
                  "# HELP duet_kv_cache_reserved_bytes KV-cache bytes reserved by running requests.",
                  "# TYPE duet_kv_cache_reserved_bytes gauge", f"duet_kv_cache_reserved_bytes {stats.cache_bytes_used}",
                  "# HELP duet_kv_cache_budget_bytes KV-cache budget.", "# TYPE duet_kv_cache_budget_bytes gauge",
                  f"duet_kv_cache_budget_bytes {stats.cache_bytes_total}",
                  "# HELP duet_engine_steps_total Engine decode steps.", "# TYPE duet_engine_steps_total counter",
                  f"duet_engine_steps_total {stats.steps}",
                  "# HELP duet_engine_frames_total Frames emitted.", "# TYPE duet_engine_frames_total counter",
                  f"duet_engine_frames_total {stats.frames}",
                  "# HELP duet_engine_finished_total Requests ended, by reason.",
                  "# TYPE duet_engine_finished_total counter"]
        lines += [f'duet_engine_finished_total{{reason="{r}"}} {n}' for r, n in stats.finished.items()]
        return "\n".join(lines) + "\n"
