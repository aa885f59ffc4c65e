"""What a component must be able to do for the method (or component) that uses it.

A method declares, per component kind it uses, what that component must support::

    class RefineLoop(Method):
        requires = ("encoder", "llm")
        needs = {"llm": ("task:refine_loop_plan", "task:refine_loop_critique")}

A capability is a string:

- ``chat``: free-form chat (``llm.chat``);
- ``tools``: tool calling (``chat(..., tools=...)`` answering with tool calls);
- ``images``: reading images (image parts in messages, or a task's images);
- ``task:<name>``: answering LLM task ``<name>`` (:mod:`agentcir.framework.tasks`).

A component class says what it supports with ``supports`` (a tuple of capabilities;
``task:*`` = every task that has a prompt file), what it may support but cannot tell before
its model loads with ``maybe_supports`` (whether a local model reads images), and, where the
answer depends on its config or on what is registered, a classmethod
``can_serve(need, config) -> True | False | None`` (``None``: as ``supports`` says). A class
that declares none of these is not checked (third-party components keep working).

Methods may make their needs depend on their config with a classmethod
``needs_for(config) -> {kind: (capability, ...)}`` (default: ``needs``). Components that use
other components (the ``vlm`` captioner needs an llm that reads images) declare ``needs`` too.

:func:`check_capabilities` runs when a recipe is composed (:mod:`agentcir.framework.recipe_checks`),
before any model or gallery loads: a selected component that cannot serve a need refuses the
recipe, naming the component, the need, who needs it, and the registered backends that can.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..registry import REGISTRIES, ConfigError

CAPABILITIES = ("chat", "tools", "images")
TASK_PREFIX = "task:"


def task_need(task: str) -> str:
    """The capability of answering LLM task ``task``."""
    return f"{TASK_PREFIX}{task}"


def check_need(need: str, where: str) -> str:
    """``need`` checked to be a capability (a bad one is a :class:`ConfigError` naming ``where``)."""
    if not isinstance(need, str) or not (
        need in CAPABILITIES or (need.startswith(TASK_PREFIX) and len(need) > len(TASK_PREFIX))
    ):
        raise ConfigError(f"{where}: unknown capability {need!r}; use {', '.join(CAPABILITIES)} or task:<name>")
    return need


def needs_of(cls: type, config: Mapping[str, Any] | None = None) -> dict[str, tuple[str, ...]]:
    """What ``cls`` needs of its components, per kind (``needs_for(config)`` or ``needs``)."""
    fn = getattr(cls, "needs_for", None)
    raw = fn(dict(config or {})) if callable(fn) else getattr(cls, "needs", None)
    out: dict[str, tuple[str, ...]] = {}
    for kind, needs in dict(raw or {}).items():
        where = f"{getattr(cls, 'kind', 'component')} {cls.__qualname__}: needs['{kind}']"
        if kind not in REGISTRIES:
            raise ConfigError(f"{where}: unknown component kind; kinds: {', '.join(REGISTRIES)}")
        items = (needs,) if isinstance(needs, str) else tuple(needs)
        out[kind] = tuple(check_need(n, where) for n in items)
    return out


def serves(cls: type, need: str, config: Mapping[str, Any] | None = None) -> bool | None:
    """Whether component class ``cls`` (configured by ``config``) can serve ``need``:
    ``True``, ``False``, or ``None`` when it does not say (or cannot tell before loading)."""
    fn = getattr(cls, "can_serve", None)
    if callable(fn):
        verdict = fn(need, dict(config or {}))
        if verdict is not None:
            return bool(verdict)
    supported = getattr(cls, "supports", None)
    if supported is None:
        return None
    if need in supported:
        return True
    if need.startswith(TASK_PREFIX) and "task:*" in supported:
        return True
    if need in getattr(cls, "maybe_supports", ()):
        return None
    return False


def backends_serving(kind: str, need: str) -> list[str]:
    """Registered keys of ``kind`` whose class says it serves ``need`` (with its default config)."""
    reg = REGISTRIES[kind]
    out = []
    for key in reg.keys():
        try:
            cls = reg.get(key).obj
        except Exception:  # a backend whose optional dependencies are missing cannot be offered
            continue
        try:
            if serves(cls, need, {}) is True:
                out.append(key)
        except Exception:
            continue
    return out


def _describe(need: str) -> str:
    if need.startswith(TASK_PREFIX):
        return f"LLM task '{need[len(TASK_PREFIX) :]}'"
    return {"chat": "free-form chat", "tools": "tool calling", "images": "images"}[need]


def check_capabilities(recipe: Mapping[str, Any], groups: tuple[str, ...]) -> None:
    """Refuse ``recipe`` when a selected component cannot serve what the method, or another
    selected component, needs of it (see the module docstring). Imports the selected classes
    only (no model loads)."""
    selected: dict[str, tuple[str, type, dict]] = {}
    for group in groups:
        node = recipe.get(group)
        if not node or node.get("name") in (None, "none") or group not in REGISTRIES:
            continue
        cfg = {k: v for k, v in node.items() if k != "name"}
        selected[group] = (str(node["name"]), REGISTRIES[group].get(str(node["name"])).obj, cfg)
    for group, (name, cls, cfg) in selected.items():
        for kind, needs in needs_of(cls, cfg).items():
            if kind not in selected:
                continue  # absent: the method's own check (requires / optional) decides
            key, dep_cls, dep_cfg = selected[kind]
            for need in needs:
                if serves(dep_cls, need, dep_cfg) is False:
                    others = [k for k in backends_serving(kind, need) if k != key]
                    hint = (
                        f"select one that can: {', '.join(f'{kind}={k}' for k in others)}"
                        if others
                        else f"no registered {kind} says it can"
                    )
                    why = ""
                    if need.startswith(TASK_PREFIX) and kind == "llm":
                        why = (
                            " (an offline llm answers a plugin task when the task registers a replier: "
                            "register_task(..., replier=fn))"
                        )
                    raise ConfigError(
                        f"{group} '{name}' needs {kind} '{key}' to serve {_describe(need)}, which it "
                        f"cannot{why}; {hint}"
                    )
