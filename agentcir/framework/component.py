"""The base of every registered component: typed config, injected dependencies, identity."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

from ..registry.config import check_choices
from .hashing import stable_hash
from .prompts import Prompt, load_prompt


class Component:
    """Base class of encoders, LLMs, captioners, generators, detectors, verifiers, memories,
    methods and datasets.

    Subclasses define a ``Config`` dataclass, set ``kind``, list the component kinds they
    need in ``requires`` (injected as attributes of the same name by the builder: methods
    never construct models) and the config fields that name prompt files in
    ``prompt_fields``.
    """

    kind: ClassVar[str] = "component"
    requires: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()
    prompt_fields: ClassVar[tuple[str, ...]] = ()
    #: config fields that cannot change outputs (speed, placement, secrets): not in the identity
    volatile_fields: ClassVar[tuple[str, ...]] = (
        "batch_size",
        "device",
        "num_threads",
        "concurrency",
        "timeout",
        "retries",
        "api_key",
        "progress",
    )
    registry_key: str = ""
    #: an explicit version of this class's code: when set on a class, it replaces the digest of
    #: the class's module in the identity (:mod:`agentcir.framework.code_identity`), and the author
    #: bumps it whenever the outputs change; empty (the default): the code itself is digested
    version: ClassVar[str] = ""

    @dataclasses.dataclass
    class Config:
        pass

    def __init__(self, cfg: Any = None, **deps: Any):
        self.cfg = cfg if cfg is not None else type(self).Config()
        check_choices(self.cfg, where=f"{self.kind} '{self.registry_key or type(self).__name__}'")
        missing = [k for k in self.requires if deps.get(k) is None]
        if missing:
            raise TypeError(
                f"{type(self).__name__} needs the component(s) {', '.join(missing)} (passed: {', '.join(sorted(deps)) or 'none'})"
            )
        extra = sorted(set(deps) - set(self.requires) - set(self.optional))
        if extra:
            raise TypeError(f"{type(self).__name__} does not take component(s) {', '.join(extra)}")
        for k in (*self.requires, *self.optional):
            setattr(self, k, deps.get(k))

    # -- identity -----------------------------------------------------------------
    def model_identity(self) -> str:
        """Backend-specific identity of the model (weights hash, model id, version)."""
        return ""

    def prompt(self, field: str) -> Prompt:
        """The prompt named by config field ``field``."""
        return load_prompt(getattr(self.cfg, field))

    def code_digest(self) -> str:
        """Digest of the code that computes this component's outputs: its class's module and the
        modules it imports within its package, or the class's ``version``
        (:func:`agentcir.framework.code_identity.class_code`)."""
        from .code_identity import class_code

        return stable_hash(class_code(type(self)), n=24)

    @functools.cached_property
    def identity(self) -> str:
        """Hash of everything that can change this component's outputs: kind, key, class,
        its code (:meth:`code_digest`), config, model identity, prompt files, and the identities
        of injected components."""
        deps = {k: getattr(getattr(self, k, None), "identity", None) for k in (*self.requires, *self.optional)}
        prompts = {f: self.prompt(f).sha256 for f in self.prompt_fields if getattr(self.cfg, f, None)}
        cfg = dataclasses.asdict(self.cfg) if dataclasses.is_dataclass(self.cfg) else {}
        cfg = {k: v for k, v in cfg.items() if k not in self.volatile_fields}
        return stable_hash(
            self.kind,
            self.registry_key,
            f"{type(self).__module__}.{type(self).__qualname__}",
            cfg,
            self.model_identity(),
            prompts,
            deps,
            self.code_digest(),
            n=24,
        )

    def call_prompts(self, op: str, inputs: dict[str, Any]) -> list[str]:
        """Prompt files that the call ``self.<op>(**inputs)`` reads; their sha256 joins the
        call's cache key (:meth:`agentcir.framework.runner.RunContext.call_key`). By default the
        prompt named by a ``prompt=`` input, if any; components with default prompts add theirs."""
        prompt = inputs.get("prompt")
        return [prompt] if isinstance(prompt, str) and prompt else []

    def describe(self) -> str:
        return f"{self.kind} '{self.registry_key or type(self).__name__}'"

    def close(self) -> None:
        """Release resources (clients, sessions); a no-op by default."""
