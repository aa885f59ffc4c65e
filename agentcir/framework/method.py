"""Methods: a sequence of stages over a batch of queries (the stage and state types live in
:mod:`agentcir.framework.state`, below the runner)."""

from __future__ import annotations

from typing import ClassVar

from .component import Component
from .state import RunState, Stage, StageFn

__all__ = ["Method", "RunState", "Stage", "StageFn"]


class Method(Component):
    """Base of every retrieval method. Subclasses list the component kinds they use in
    ``requires`` / ``optional`` (injected), and return their stages."""

    kind: ClassVar[str] = "method"
    #: whether the gallery must have captions (dataset-provided or made by the captioner)
    needs_captions: ClassVar[bool] = False

    def stages(self) -> list[Stage]:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def top_k(self) -> int:
        return int(getattr(self.cfg, "top_k", 50))
