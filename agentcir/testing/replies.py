"""Valid replies to every LLM task, built in or registered by a plugin, for :class:`ScriptedServer`
runs of whole pipelines (tests, benchmarks, a method's offline runs: ``llm=openai`` against the
scripted endpoint, with the VLM captioner, detector and verifier, no real model).

The task of a request is recognised by the opening words of its first message (the task's
default prompt: ``tasks/<task>``, a plugin task's registered prompt, or ``verifier/verify_caption``),
and the task's variables are read back from the message by matching it against the prompt
template. The reply is then, in this order:

1. the first of the ``repliers`` given to :func:`task_replier` that answers:
   ``replier(task, variables) -> value | None`` (``None``: not answered);
2. the task's own offline replier (:func:`agentcir.framework.tasks.register_task` ``replier=``),
   called as the ``rules`` LLM calls it: ``replier(variables)``;
3. :func:`task_reply`: a value of the task's declared shape, chosen by a hash of the request.

A value is sent as the task's reply text (:func:`agentcir.framework.tasks.reply_text`).
Everything is deterministic in the request's text, so a pipeline run against it is
reproducible::

    with ScriptedServer() as srv:
        srv.script("/chat/completions", task_replier(delay=0.5))

Variables read back from a message are the rendered text: a list arrives as its ``- item``
lines joined (write repliers that accept a list or a string). A request that no prompt matches
is offered to the ``repliers`` as ``replier(None, {"text": ..., "messages": [...]})``; if none
answers, it gets HTTP 400 naming its opening words.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any, Callable, Sequence

from ..framework.prompts import find_prompt, load_prompt
from ..framework.tasks import all_tasks, check_variables, find_task, reply_text
from .wire import Request, Script, Step, chat_completion, error_body

_WORDS = ("red", "blue", "striped", "cotton", "casual", "formal", "leather", "green", "black", "white")
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")

#: a replier given to :func:`task_replier` (``task`` is ``None`` for a request no prompt matches)
Replier = Callable[[Any, dict], Any]

_LOCK = threading.Lock()
_TEMPLATES: dict[tuple, tuple[tuple[str, str, "re.Pattern[str]"], ...]] = {}


def _task_prompts() -> list[tuple[str, str]]:
    """(task, prompt name) of every task with a prompt file, and the verifier's caption prompt."""
    pairs = [(name, spec.prompt_name) for name, spec in all_tasks().items()]
    return [*pairs, ("verify", "verifier/verify_caption")]


def _template(text: str) -> tuple[str, "re.Pattern[str]"]:
    """The opening words (before the first placeholder) and a pattern reading the variables back."""
    flat = " ".join(text.split())
    head = " ".join(flat.split("{{", 1)[0].split())[:60]
    parts, seen, pos = [], set(), 0
    for m in _VAR.finditer(flat):
        parts.append(r"\s*".join(re.escape(w) for w in flat[pos : m.start()].split(" ")))
        name = m.group(1)
        parts.append(f"(?P<{name}>.*?)" if name not in seen else ".*?")
        seen.add(name)
        pos = m.end()
    parts.append(r"\s*".join(re.escape(w) for w in flat[pos:].split(" ")))
    return head, re.compile(r"\s*".join(p for p in parts if p) + r"\s*$", re.S)


def _templates() -> tuple[tuple[str, str, "re.Pattern[str]"], ...]:
    """(opening words, task, pattern) for every task prompt, longest opening first; re-read when the
    task table or a prompt file changes."""
    found = []
    for task, name in _task_prompts():
        path = find_prompt(name)
        if path is not None:
            st = path.stat()
            found.append((task, name, str(path), st.st_size, st.st_mtime))
    key = tuple(found)
    with _LOCK:
        hit = _TEMPLATES.get(key)
    if hit is None:
        out = []
        for task, name, *_ in found:
            head, pattern = _template(load_prompt(name).text)
            if head:
                out.append((head, task, pattern))
        hit = tuple(sorted(out, key=lambda x: -len(x[0])))
        with _LOCK:
            _TEMPLATES.clear()
            _TEMPLATES[key] = hit
    return hit


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
    return next((task for head, task, _ in _templates() if text.startswith(head)), None)


def read_variables(task: str, text: str) -> dict[str, str]:
    """The variables of ``task`` read back from its rendered prompt ``text`` (whitespace-collapsed);
    empty when the text does not follow the task's prompt."""
    for head, t, pattern in _templates():
        if t == task and text.startswith(head):
            m = pattern.match(" ".join(text.split()))
            if m:
                return {k: v.strip() for k, v in m.groupdict().items()}
    return {}


def task_reply(task: str, seed: str, accept: float = 0.5) -> str:
    """A reply to ``task`` that parses as the task declares, chosen by ``seed``."""
    h = int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16)
    w = _WORDS[h % len(_WORDS)]
    spec = find_task(task)
    if spec is None:
        raise KeyError(f"unknown LLM task '{task}'")
    if spec.reply == "text":
        return f"a {w} product photo"
    if spec.reply in ("yes_no", "true_false"):
        yes = (h % 1000) < accept * 1000
        return ("yes" if yes else "no") if spec.reply == "yes_no" else ("true" if yes else "false")
    if not spec.fields:
        raise KeyError(
            f"LLM task '{task}' reads its replies with its own parser and has no offline replier: "
            f"give task_replier(repliers=[...]) or register_task(..., replier=fn)"
        )
    values: dict[str, Any] = {}
    for name, kind in spec.fields:
        if kind == "str":
            values[name] = f"a {w} item"
        elif kind == "questions":
            values[name] = [{"question": f"is it {w}?", "answer": "yes"}]
        else:
            values[name] = [f"{w} item {i}" for i in range(3)] if name != "remove" else []
    return json.dumps(values)


def answer(
    task: str | None, text: str, payload: Any = None, *, repliers: Sequence[Replier] = (), accept: float = 0.5
) -> str | None:
    """The reply text to a request running ``task`` (first message ``text``), or ``None`` when
    nothing answers (see the module docstring for the order)."""
    if task is None:
        ctx = {"text": text, "messages": (payload or {}).get("messages") or []}
        for fn in repliers:
            value = fn(None, ctx)
            if value is not None:
                return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return None
    variables: dict[str, Any] = read_variables(task, text)
    try:
        variables = check_variables(task, variables)
    except Exception:  # a prompt given by the caller may have other variables: pass them as read
        pass
    for fn in repliers:
        value = fn(task, variables)
        if value is not None:
            return reply_text(task, value)
    spec = find_task(task)
    if spec is not None and spec.replier is not None:
        return reply_text(task, spec.replier(variables))
    return task_reply(task, text, accept)


def task_replier(
    delay: float = 0.0, accept: float = 0.5, repliers: Sequence[Replier] = (), model: str = "scripted"
) -> Callable[[Request], Step]:
    """A :class:`ScriptedServer` step answering each chat request's task after ``delay`` seconds."""
    repliers = list(repliers)

    def step(req: Request) -> Step:
        text = _first_text(req.json)
        task = _task_of_text(text)
        try:
            reply = answer(task, text, req.json, repliers=repliers, accept=accept)
        except Exception as e:  # a replier's error goes back to the client, named
            return Step(
                status=500, json=error_body(f"replier failed on task {task!r}: {type(e).__name__}: {e}"), delay=delay
            )
        if reply is None:
            return Step(status=400, json=error_body(f"no task prompt recognised in: {text[:80]!r}"), delay=delay)
        return Step(json=chat_completion(reply, model=model), delay=delay)

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
