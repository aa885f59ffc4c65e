"""Where a run's time goes: model-call clocks per stage, the run's phases, the endpoint caps.

- :class:`CallClock`: per stage, the model calls' summed time (``call_s``), the time with at
  least one call in flight (``call_wall_s``), and the time calls waited for a free slot of
  ``run.concurrency`` (``queue_s``). The runner adds the stage's CPU time (``cpu_s``, every
  thread of the process) and its wall time.
- :class:`Phases`: the run's phases outside the stages, each its own line of the report:
  ``startup`` (process start, or the end of the previous run in this process, to the start of
  this run: imports, recipe composition), ``model_loading`` (building the components, and the
  weights loaded lazily on first use, wherever that falls: :func:`model_loading`), ``gallery``
  (embedding the gallery, or opening a stored one), ``stages``,
  ``evaluation``; ``wall_s`` is measured from the same start, so
  ``wall_s = sum(phases) + unattributed``.
- :func:`follow_concurrency`: components with their own request limit (an endpoint client)
  follow ``run.concurrency`` unless their recipe sets a cap; each decision is logged and kept
  in ``metrics.json`` (``concurrency``).
- :func:`time_rows`: the comparison rows of ``agentcir eval --compare`` (time and cost).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger(__name__)

_IMPORTED = time.time()
_last_run_end: float | None = None
_loading_lock = threading.Lock()
_loading_s = 0.0


@contextmanager
def model_loading() -> Iterator[None]:
    """Time spent in this block is model loading (a component that loads its weights lazily, on
    first use, wraps the load in it): the run's report shows it on the ``model_loading`` line,
    not in the phase or stage where the load happened to fall."""
    global _loading_s
    t = time.perf_counter()
    try:
        yield
    finally:
        with _loading_lock:
            _loading_s += time.perf_counter() - t


def loading_seconds() -> float:
    """Model loading time of this process so far (:func:`model_loading` blocks)."""
    return _loading_s


def process_start_time() -> float:
    """The wall-clock time (``time.time()``) this process started (Linux ``/proc``; elsewhere
    the time this module was imported)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 (starttime), counted after "pid (comm)"
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        t = btime + start_ticks / os.sysconf("SC_CLK_TCK")
        return t if t <= _IMPORTED + 1 else _IMPORTED
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED


class CallClock:
    """Time of the model calls of one stage (one event loop; not thread-safe by design)."""

    def __init__(self) -> None:
        self.call_s = 0.0
        self.call_wall_s = 0.0
        self.queue_s = 0.0
        self.max_in_flight = 0
        self._in_flight = 0
        self._busy_since = 0.0

    def queued(self, seconds: float) -> None:
        self.queue_s += seconds

    def start(self) -> float:
        now = time.perf_counter()
        if self._in_flight == 0:
            self._busy_since = now
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        return now

    def stop(self, started: float) -> None:
        now = time.perf_counter()
        self.call_s += now - started
        self._in_flight -= 1
        if self._in_flight == 0:
            self.call_wall_s += now - self._busy_since


class Phases:
    """The run's phases, timed from the process start (or the previous run's end)."""

    def __init__(self) -> None:
        self.t0 = _last_run_end if _last_run_end is not None else process_start_time()
        self.seconds: dict[str, float] = {"startup": time.time() - self.t0}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase; the lazy model loading inside it moves to ``model_loading``."""
        t, loaded = time.perf_counter(), loading_seconds()
        try:
            yield
        finally:
            lazy = loading_seconds() - loaded if name != "model_loading" else 0.0
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t - lazy
            if lazy:
                self.seconds["model_loading"] = self.seconds.get("model_loading", 0.0) + lazy

    def wall_s(self) -> float:
        return time.time() - self.t0

    def summary(self) -> dict[str, float]:
        """``{phase}_s`` for every phase, and ``unattributed_s`` (the wall time not in any)."""
        wall = self.wall_s()
        out = {f"{k}_s": round(v, 3) for k, v in self.seconds.items()}
        out["unattributed_s"] = round(max(0.0, wall - sum(self.seconds.values())), 3)
        return out

    def finish(self) -> float:
        """The run's ``wall_s``; the next run in this process is timed from here."""
        global _last_run_end
        wall = self.wall_s()
        _last_run_end = time.time()
        return wall


def follow_concurrency(components: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """Let every component with a ``follow_concurrency(n)`` hook follow ``run.concurrency``.

    The hook returns ``{"limit": int, "capped_by": field or None}`` (``None``: no limit of its
    own). Returns ``{"run": concurrency, "<kind>": {...}}`` and logs where a cap applies.
    """
    out: dict[str, Any] = {"run": concurrency}
    for kind, comp in components.items():
        hook = getattr(comp, "follow_concurrency", None)
        if not callable(hook):
            continue
        info = hook(concurrency)
        if not info:
            continue
        out[kind] = info
        who = comp.describe() if hasattr(comp, "describe") else kind
        if info.get("capped_by") and info["limit"] < concurrency:
            log.warning(
                "%s: at most %d requests in flight (capped by %s), below run.concurrency=%d",
                who,
                info["limit"],
                info["capped_by"],
                concurrency,
            )
        else:
            log.info(
                "%s: %d requests in flight at most (%s)",
                who,
                info["limit"],
                f"capped by {info['capped_by']}" if info.get("capped_by") else "follows run.concurrency",
            )
    return out


def stage_time_columns() -> list[tuple[str, str]]:
    """(StageStats field, column title) of the time columns of the report's cost table."""
    return [
        ("wall_s", "wall s"),
        ("call_s", "model-call s (sum)"),
        ("call_wall_s", "model-call s (wall)"),
        ("queue_s", "queueing s"),
        ("cpu_s", "CPU s"),
        ("loading_s", "of which model loading s"),
    ]


def time_rows(runs: list[Any], labels: list[str]) -> dict[str, dict[str, Any]]:
    """Per run (a :class:`~agentcir.framework.report.RunInfo`): wall time, its phases, and the
    stages' summed model-call, queueing and CPU time, calls and cache hits (``metrics.json``)."""
    rows = {}
    for label, r in zip(labels, runs):
        m = r.metrics
        cost = m.get("cost") or {}
        row: dict[str, Any] = {"wall_s": m.get("wall_s"), **(m.get("time") or {})}
        if cost:
            for f in ("call_s", "call_wall_s", "queue_s", "cpu_s"):
                row[f] = round(sum(float(s.get(f, 0.0)) for s in cost.values()), 3)
            for f in ("calls", "cache_hits"):
                row[f] = sum(int(s.get(f, 0)) for s in cost.values())
        rows[label] = {k: v for k, v in row.items() if v is not None}
    return rows
