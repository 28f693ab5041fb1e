"""Where a run spends its time, reported as materialization metadata (plotted in the UI) and by the benchmarks."""

from __future__ import annotations

import time


class Stopwatch:
    """Named laps: `lap("parse")` charges the time since the previous lap to "parse"."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self._last = now
