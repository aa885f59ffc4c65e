"""The declared return types of component operations, restored on values read back from JSON.

:meth:`agentcir.framework.runner.RunContext.call` stores every result in the call cache as
JSON, so a cached ``ChatReply`` comes back as a dict. :func:`restore` turns such a value back
into the type the operation declares, so a stage sees the same type whether the call ran now
or came from the cache (or from a run killed and resumed):

- an operation whose return annotation is a class with a ``from_json(dict)`` classmethod
  (``LLM.chat -> ChatReply``) gets an instance of that class;
- ``Optional[T]`` / ``T | None`` of such a class: the same, ``None`` stays ``None``;
- every other value (``str``, ``bool``, numpy arrays, ``Path``, lists, dicts) is returned
  as the cache decoded it (the cache restores arrays and paths itself).

The declared type is read from the component class's annotation of ``op`` (or, for an async
``a<op>``, of ``op`` when it has one), so a plugin's component gets the same treatment by
annotating its methods; :data:`DECLARED` adds types for operations without a usable annotation.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from typing import Any

#: (component kind, operation) -> the type of its result, where the annotation does not say it
DECLARED: dict[tuple[str, str], type] = {}


def _json_class(tp: Any) -> type | None:
    """``tp`` when it is a class with ``from_json``; the class inside ``Optional[...]``; else None."""
    if isinstance(tp, type):
        return tp if callable(getattr(tp, "from_json", None)) else None
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and typing.get_origin(tp) in (typing.Union, getattr(types, "UnionType", None)):
        return _json_class(args[0])
    return None


@functools.lru_cache(maxsize=512)
def declared_type(cls: type, op: str) -> type | None:
    """The class (with ``from_json``) that ``cls.<op>`` declares it returns, or ``None``."""
    kind = getattr(cls, "kind", "")
    if (kind, op) in DECLARED:
        return DECLARED[(kind, op)]
    names = [op[1:], op] if op.startswith("a") and hasattr(cls, op[1:]) else [op]
    for name in names:
        fn = getattr(cls, name, None)
        if fn is None or not callable(fn):
            continue
        owner = next((c for c in inspect.getmro(cls) if name in vars(c)), cls)
        module = inspect.getmodule(owner)
        try:
            hints = typing.get_type_hints(fn, globalns=vars(module) if module else None)
        except Exception:  # an annotation that does not resolve here: nothing declared
            continue
        found = _json_class(hints.get("return"))
        if found is not None:
            return found
    return None


def restore(component: Any, op: str, value: Any) -> Any:
    """``value`` (as decoded from the call cache) as the type ``component.<op>`` declares."""
    if not isinstance(value, dict):
        return value
    tp = declared_type(type(component), op)
    return tp.from_json(value) if tp is not None else value
