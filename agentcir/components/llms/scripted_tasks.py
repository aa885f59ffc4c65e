"""Valid replies to every LLM task of the contract, for :class:`ScriptedServer` runs of whole
pipelines (pipeline benchmarks and tests: ``llm=openai`` with the VLM captioner, detector
and verifier, no real model).

The task of a request is recognised by the opening words of its first message (the task's
prompt file, ``tasks/<task>`` or ``verifier/verify_caption``); the reply is deterministic
in the request's text, so a pipeline run against it is reproducible:

    with ScriptedServer() as srv:
        srv.script("/chat/completions", task_replier(delay=0.5))

Every reply parses as :data:`agentcir.framework.tasks.TASKS` promises; ``verify`` and
``answer`` say yes for about ``accept`` of the requests.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from typing import Any, Callable

from ...framework.prompts import load_prompt
from ...framework.tasks import TASKS
from .scripted_server import Request, Script, Step, chat_completion, error_body

_WORDS = ("red", "blue", "striped", "cotton", "casual", "formal", "leather", "green", "black", "white")


@functools.lru_cache(maxsize=1)
def _openings() -> tuple[tuple[str, str], ...]:
    """(opening words of the prompt, task) for every task prompt, longest first."""
    out = []
    for task, name in [*((t, f"tasks/{t}") for t in TASKS), ("verify", "verifier/verify_caption")]:
        try:
            text = load_prompt(name).text
        except Exception:  # a task without a bundled prompt file is never recognised
            continue
        head = " ".join(text.split("{{", 1)[0].split())[:60]
        if head:
            out.append((head, task))
    return tuple(sorted(out, key=lambda x: -len(x[0])))


def _first_text(payload: Any) -> str:
    messages = (payload or {}).get("messages") or [{}]
    content = messages[0].get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return " ".join(str(content or "").split())


def task_of(payload: Any) -> str | None:
    """The task a chat-completions request body runs, or ``None`` when no prompt matches."""
    return _task_of_text(_first_text(payload))


def _task_of_text(text: str) -> str | None:
    return next((task for head, task in _openings() if text.startswith(head)), None)


def task_reply(task: str, seed: str, accept: float = 0.5) -> str:
    """A reply to ``task`` that parses as the task table promises, chosen by ``seed``."""
    h = int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16)
    w = _WORDS[h % len(_WORDS)]
    spec = TASKS[task]
    if spec.reply == "text":
        return f"a {w} product photo"
    if spec.reply in ("yes_no", "true_false"):
        yes = (h % 1000) < accept * 1000
        return ("yes" if yes else "no") if spec.reply == "yes_no" else ("true" if yes else "false")
    values: dict[str, Any] = {}
    for name, kind in spec.fields:
        if kind == "str":
            values[name] = f"a {w} item"
        elif kind == "questions":
            values[name] = [{"question": f"is it {w}?", "answer": "yes"}]
        else:
            values[name] = [f"{w} item {i}" for i in range(3)] if name != "remove" else []
    return json.dumps(values)


def task_replier(delay: float = 0.0, accept: float = 0.5) -> Callable[[Request], Step]:
    """A :class:`ScriptedServer` step answering each chat request's task after ``delay`` seconds."""

    def step(req: Request) -> Step:
        text = _first_text(req.json)
        task = _task_of_text(text)
        if task is None:
            return Step(status=400, json=error_body(f"no task prompt recognised in: {text[:80]!r}"), delay=delay)
        return Step(json=chat_completion(task_reply(task, text, accept)), delay=delay)

    return step


class InFlight:
    """A step that counts the requests being answered at once: each waits ``delay`` seconds
    inside the count, then gets ``step``'s answer. ``now`` and ``max`` are the counts."""

    def __init__(self, step: Script, delay: float = 0.0):
        self.step, self.delay = step, delay
        self.now = self.max = 0
        self._lock = threading.Lock()

    def __call__(self, req: Request) -> Step:
        with self._lock:
            self.now += 1
            self.max = max(self.max, self.now)
        try:
            time.sleep(self.delay)
            return self.step(req) if callable(self.step) else self.step
        finally:
            with self._lock:
                self.now -= 1
