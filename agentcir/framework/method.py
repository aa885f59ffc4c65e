"""Methods: a sequence of stages over a batch of queries (the stage and state types live in
:mod:`agentcir.framework.state`, below the runner)."""

from __future__ import annotations

from typing import Any, ClassVar

from .component import Component
from .state import RunState, Stage, StageFn

__all__ = ["Method", "RunState", "Stage", "StageFn"]


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
    #: what the method needs its components to support, per kind: ``chat``, ``tools``, ``images``,
    #: ``task:<name>`` (:mod:`agentcir.framework.capabilities`); a recipe whose component cannot
    #: serve a need is refused when it is composed. Config-dependent needs: override :meth:`needs_for`
    needs: ClassVar[dict[str, tuple[str, ...]]] = {}

    @classmethod
    def needs_for(cls, config: dict[str, Any]) -> dict[str, tuple[str, ...]]:
        """What the method configured by recipe node ``config`` needs (default: :attr:`needs`)."""
        return dict(cls.needs)

    @classmethod
    def memory_config(cls, dependency: str, node: dict[str, Any]) -> dict[str, Any]:
        """The config of memory ``dependency`` from this method's recipe ``node`` (default: none)."""
        return {}

    def stages(self) -> list[Stage]:  # pragma: no cover - abstract
        """The method's stages, in the order they run."""
        raise NotImplementedError

    @property
    def top_k(self) -> int:
        """The ranking depth (the config's ``top_k``, else 50)."""
        return int(getattr(self.cfg, "top_k", 50))
