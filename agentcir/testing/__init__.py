"""The testing kit for method authors (``docs/writing-a-method.md``, "Testing").

- :mod:`agentcir.testing.server`: :class:`ScriptedServer`, a real OpenAI-compatible HTTP endpoint
  on 127.0.0.1 with scripted replies and faults; ``python -m agentcir.testing.server --port N
  --replier module:function`` serves every LLM task from the command line.
- :mod:`agentcir.testing.wire`: the wire format both speak (:class:`Step`, :class:`Request`, the reply
  bodies).
- :mod:`agentcir.testing.replies`: valid replies to every task, built in or registered by a
  plugin (:func:`task_replier`), with pluggable repliers for a plugin's own tasks.
- :mod:`agentcir.testing.data`: tiny datasets on disk (:func:`tiny_composed_dataset`).
- :mod:`agentcir.testing.pytest_plugin`: pytest fixtures (``pytest_plugins =
  ["agentcir.testing.pytest_plugin"]``).

Nothing here is imported by ``import agentcir``; the names below load their module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "ScriptedServer": "server",
    "Step": "wire",
    "Request": "wire",
    "chat_completion": "wire",
    "error_body": "wire",
    "image_edit_reply": "wire",
    "multipart_fields": "wire",
    "task_replier": "replies",
    "task_reply": "replies",
    "task_of": "replies",
    "read_variables": "replies",
    "InFlight": "replies",
    "tiny_composed_dataset": "data",
    "make_image": "data",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'agentcir.testing' has no attribute '{name}'")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
