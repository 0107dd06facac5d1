"""Measuring helpers shared by our benchmarks and the peer scripts (no jobi_tf or TensorFlow import,
so that the peers' own virtualenvs can use them too).

* `Usage`: CPU user/system seconds, minor page faults and wall time of a measured part.
* `window_rates`: steady-state throughput from per-batch timestamps over full epochs, the same
  way for every system compared: drop a warm-up, cut the rest into windows of a fixed number
  of positives, one rate per window. Windows span epoch boundaries, so whatever a system does
  between epochs is paid for inside the windows.
"""

from __future__ import annotations

import resource
import statistics
import time

#: Defaults of `window_rates`: 10,000 positives of warm-up (20 batches of 500), windows of
#: 75,000 positives (150 batches of 500, 75 of 1,000): three windows in one FB15k-237 epoch.
WARMUP_POSITIVES = 10_000
WINDOW_POSITIVES = 75_000


class Usage:
    """CPU user/system seconds, minor page faults and wall time of a ``with`` block.

    Args:
        who: ``resource.RUSAGE_SELF`` (this process, all threads; the default) or
            ``resource.RUSAGE_CHILDREN`` (the child processes waited for inside the block).
    """

    def __init__(self, who: int = resource.RUSAGE_SELF) -> None:
        self.who = who

    def __enter__(self) -> Usage:
        self._start = resource.getrusage(self.who), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        end = resource.getrusage(self.who)
        start, wall = self._start
        self.user = end.ru_utime - start.ru_utime
        self.system = end.ru_stime - start.ru_stime
        self.minor_faults = end.ru_minflt - start.ru_minflt
        self.wall = time.perf_counter() - wall

    @property
    def system_share(self) -> float:
        """System CPU time as a share of user CPU time."""
        return self.system / max(self.user, 1e-9)

    def record(self) -> dict:
        return {
            "user_s": round(self.user, 2),
            "system_s": round(self.system, 2),
            "minor_faults": self.minor_faults,
            "system_share": round(self.system_share, 3),
            "wall_s": round(self.wall, 2),
        }


def window_rates(
    batch_ends: list[float],
    start: float,
    batch_size: int,
    warmup_positives: int = WARMUP_POSITIVES,
    window_positives: int = WINDOW_POSITIVES,
) -> list[float]:
    """Positives per second of each full window after the warm-up.

    Args:
        batch_ends: ``time.perf_counter()`` after each batch, in order, over whole epochs.
        start: the clock before the first batch.
        batch_size: positives per batch.
    """
    ends = [start, *batch_ends]
    first = -(-warmup_positives // batch_size)  # batches of warm-up, rounded up
    per_window = max(1, window_positives // batch_size)
    rates = []
    for lo in range(first, len(ends) - per_window, per_window):
        rates.append(per_window * batch_size / (ends[lo + per_window] - ends[lo]))
    return rates


def summary(rates: list[float]) -> dict:
    """Median and the per-window rates, rounded."""
    return {"median_pos_per_s": round(statistics.median(rates)), "windows": [round(r) for r in rates]}
