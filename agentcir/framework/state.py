"""What a run is made of, below the runner, the methods and the report: the state stages read
and write, a stage, the context a stage is given (:class:`StageContext`, implemented by
:class:`agentcir.framework.runner.RunContext`), per-stage costs and a run's result.

Layers (each imports only those before it): ``state`` <- ``method`` <- ``runner`` -> ``report``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence

import numpy as np

from .types import Candidates, Query

if TYPE_CHECKING:  # pragma: no cover
    from .gallery import Gallery


@dataclass
class RunState:
    """What stages read and write. Everything here is persisted per stage, so a resumed
    run reloads finished stages instead of recomputing them.

    Attributes:
        queries: the batch.
        gallery: the opened gallery.
        traces: query id -> stage name -> that stage's JSON record for the query.
        arrays: named arrays shared between stages (e.g. query embeddings).
        candidates: the current ranking; each stage that changes it leaves a snapshot in
            ``stage_candidates`` (for per-stage recall in the report).
        captions_key: which gallery captions the run uses (``None`` when the method needs none).
    """

    queries: list[Query]
    gallery: "Gallery"
    traces: dict[str, dict[str, Any]] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    candidates: Candidates | None = None
    stage_candidates: dict[str, Candidates] = field(default_factory=dict)
    captions_key: str | None = None

    def record(self, query: Query | str, stage: str) -> dict[str, Any]:
        qid = query if isinstance(query, str) else query.id
        return self.traces.get(qid, {}).get(stage, {})


StageFn = Callable[["StageContext", RunState], Awaitable[None]]


@dataclass
class Stage:
    """A named step. ``fn(ctx, state)`` may call models per query through ``ctx.map`` /
    ``ctx.call``, add ``state.arrays`` and replace ``state.candidates``."""

    name: str
    fn: StageFn


class StageContext(Protocol):
    """What a stage function is given besides the state (:class:`agentcir.framework.runner.RunContext`)."""

    stage: str
    concurrency: int
    kernels: str
    run_dir: Path | None

    async def call(self, component: Any, op: str, /, **inputs: Any) -> Any: ...

    async def call_batch(
        self,
        component: Any,
        op: str,
        many: Callable[[list[dict[str, Any]]], list[Any]],
        inputs: Sequence[dict[str, Any]],
        *,
        batch: int,
        on_done: Callable[[int], None] | None = None,
    ) -> list[Any]: ...

    async def map(
        self, state: RunState, fn: Callable[[Query], Awaitable[dict[str, Any]]], queries: Sequence[Query] | None = None
    ) -> dict[str, dict[str, Any]]: ...

    def log(self, query_id: str, record: dict[str, Any]) -> None: ...


@dataclass
class StageStats:
    calls: int = 0
    cache_hits: int = 0
    failures: int = 0
    wall_s: float = 0.0
    resumed_queries: int = 0
    by_component: dict[str, int] = field(default_factory=dict)
    call_s: float = 0.0  #: model calls' time, summed over the calls
    call_wall_s: float = 0.0  #: time with at least one model call in flight
    queue_s: float = 0.0  #: time calls waited for a free slot of run.concurrency
    cpu_s: float = 0.0  #: CPU time of the process (all threads) during the stage
    loading_s: float = 0.0  #: of the wall time, weights loaded lazily (also on the model_loading line)
    max_in_flight: int = 0  #: most model calls in flight at once


@dataclass
class RunResult:
    dir: Path | None
    recipe: dict[str, Any]
    queries: list[Query]
    gallery: Gallery
    candidates: Candidates
    metrics: dict[str, Any]
    stats: dict[str, StageStats]
    state: RunState
