"""Methods: a sequence of stages over a batch of queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, ClassVar

import numpy as np

from .component import Component
from .types import Candidates, Query

if TYPE_CHECKING:  # pragma: no cover
    from .gallery import Gallery
    from .runner import RunContext


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


StageFn = Callable[["RunContext", RunState], Awaitable[None]]


@dataclass
class Stage:
    """A named step. ``fn(ctx, state)`` may call models per query through ``ctx.map`` /
    ``ctx.call``, add ``state.arrays`` and replace ``state.candidates``."""

    name: str
    fn: StageFn


class Method(Component):
    """Base of every retrieval method. Subclasses list the component kinds they use in
    ``requires`` / ``optional`` (injected), and return their stages."""

    kind: ClassVar[str] = "method"
    #: whether the gallery must have captions (dataset-provided or made by the captioner)
    needs_captions: ClassVar[bool] = False
    #: memory components the recipe pool injects: dependency name -> ``memory`` registry key (list
    #: the dependency in ``optional`` too); each is configured by :meth:`memory_config`
    memories: ClassVar[dict[str, str]] = {}
    #: whether a query must have a reference image (composed retrieval); a text-only search
    #: (``agentcir search`` / ``serve``) then runs text retrieval instead
    needs_reference: ClassVar[bool] = True
    #: whether the method answers a set of items (its ranking's order and scores are not scores)
    answers_set: ClassVar[bool] = False

    @classmethod
    def memory_config(cls, dependency: str, node: dict[str, Any]) -> dict[str, Any]:
        """The config of memory ``dependency`` from this method's recipe ``node`` (default: none)."""
        return {}

    def stages(self) -> list[Stage]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def top_k(self) -> int:
        return int(getattr(self.cfg, "top_k", 50))
