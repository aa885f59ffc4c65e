"""Compressed context: an agent's conversation kept under a token budget.

When the messages of an agent (ImageSeeker) exceed ``budget`` tokens, the older ones are
compressed into a **session memory** (what was done and learned so far) and a **working
memory** (the state the next step needs), by a pluggable summariser: the offline extractive
one (:func:`offline_summary`) or an LLM running the task ``compress_context``. The goal and
the key findings noted with :meth:`CompressedContext.note` are pinned: they survive every
compression verbatim. The most recent messages are kept as they are, never separating a
tool result from the assistant turn that called the tool.

Tokens are counted approximately (4 characters a token), by words, or exactly with a
local Hugging Face tokenizer (``hf`` extra).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

from ...framework.errors import InputError, require
from ...framework.interfaces import Memory
from ...registry import MEMORIES, Choice
from ...registry.config import bounded

log = logging.getLogger(__name__)

#: tokens added per message for the role and separators (OpenAI counts 3-4)
MESSAGE_OVERHEAD = 4
MEMORY_HEADER = "[Context memory: earlier steps of this session were compressed]"
_LINE_CHARS = 240
_SUBSET_ARG = re.compile(
    r"""["']?(?:save_as|subset_name|search_within|filter_within)["']?\s*[:=]\s*["']([^"',\]]+)["']"""
)

#: history lines starting with this carry the previous working memory to the summariser
PREVIOUS = "previous working memory: "
_SUBSETS_LINE = "Subsets saved or used so far: "

Summarizer = Callable[[str, list[str], str, list[str]], dict[str, str]]


# -- counting -------------------------------------------------------------------------------
class TokenCounter:
    """Counts tokens of text: ``approx`` (ceil(chars / 4)), ``words`` (whitespace words × 4/3),
    or the name/folder of a local Hugging Face tokenizer (exact; needs the ``hf`` extra)."""

    def __init__(self, method: str = "approx"):
        if not method:
            raise InputError("token_counter must be 'approx', 'words' or a tokenizer folder, got ''")
        self.method = method
        self._tok = None

    def __call__(self, text: str) -> int:
        if not text:
            return 0
        if self.method == "approx":
            return math.ceil(len(text) / 4)
        if self.method == "words":
            return math.ceil(len(text.split()) * 4 / 3)
        if self._tok is None:
            transformers = require("transformers", "hf", feature=f"counting tokens with tokenizer '{self.method}'")
            try:
                self._tok = transformers.AutoTokenizer.from_pretrained(self.method, local_files_only=True)
            except OSError as e:
                raise InputError(
                    f"token_counter '{self.method}': no local tokenizer there ({e}); "
                    "use 'approx', 'words' or a folder holding a tokenizer"
                ) from None
        return len(self._tok.encode(text, add_special_tokens=False))


def message_text(message: dict) -> str:
    """The text a message costs: its content (images count as a placeholder) and tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
            else:
                parts.append("[image]")
        text = " ".join(parts)
    else:
        text = "" if content is None else str(content)
    for tc in message.get("tool_calls") or ():
        fn = tc.get("function", tc)
        args = fn.get("arguments", "")
        text += f" {fn.get('name', '')}({args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})"
    return text


# -- the offline summariser -------------------------------------------------------------------
def _short(text: str, n: int = _LINE_CHARS) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 3] + "..."


def history_lines(messages: Sequence[dict]) -> list[str]:
    """One line per message: ``user: ...``, ``assistant: ... -> calls f(args)``, ``tool f -> result``."""
    names: dict[str, str] = {}
    lines = []
    for m in messages:
        role = m.get("role", "?")
        if role == "tool":
            name = names.get(str(m.get("tool_call_id")), "tool")
            lines.append(f"tool {name} -> {_short(message_text(m))}")
            continue
        text = message_text({"content": m.get("content")})
        calls = []
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function", tc)
            args = fn.get("arguments", "")
            names[str(tc.get("id"))] = fn.get("name", "tool")
            calls.append(
                f"{fn.get('name', '')}({args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})"
            )
        line = f"{role}: {_short(text)}" if text.strip() else f"{role}:"
        if calls:
            line += " -> calls " + "; ".join(_short(c, 160) for c in calls)
        lines.append(line)
    return lines


def offline_summary(
    goal: str, findings: Sequence[str], session_memory: str, history: Sequence[str], *, max_chars: int = 4000
) -> dict[str, str]:
    """Extractive compression: the session memory gains one short line per compressed
    message (oldest lines dropped past ``max_chars``, with a count); the working memory
    names the subsets saved or used, and the last step and its result."""
    old = [ln for ln in session_memory.splitlines() if ln.strip()]
    omitted = 0
    if old and old[0].startswith("(") and "earlier step" in old[0]:
        m = re.match(r"\((\d+)", old[0])
        omitted = int(m.group(1)) if m else 0
        old = old[1:]
    prev = [str(h)[len(PREVIOUS) :].strip() for h in history if str(h).startswith(PREVIOUS)]
    history = [h for h in history if not str(h).startswith(PREVIOUS)]
    lines = old + [_short(h) for h in history if str(h).strip()]
    while lines and sum(len(x) + 1 for x in lines) > max_chars:
        lines.pop(0)
        omitted += 1
    session = ([f"({omitted} earlier step(s) omitted)"] if omitted else []) + lines
    earlier = [
        n.strip() for p in prev if p.startswith(_SUBSETS_LINE) for n in p[len(_SUBSETS_LINE) :].split(",") if n.strip()
    ]
    subsets = list(dict.fromkeys([*earlier, *(m for h in [*old, *history] for m in _SUBSET_ARG.findall(str(h)))]))
    working = []
    if subsets:
        working.append(_SUBSETS_LINE + ", ".join(subsets))
    last_assistant = next((h for h in reversed(history) if str(h).startswith("assistant")), None)
    last_tool = next((h for h in reversed(history) if str(h).startswith("tool ")), None)
    if last_assistant:
        working.append("Last step: " + _short(last_assistant))
    if last_tool:
        working.append("Its result: " + _short(last_tool))
    return {"session_memory": "\n".join(session), "working_memory": "\n".join(working)}


# -- the context ----------------------------------------------------------------------------
@dataclass
class Compression:
    """What one compression did."""

    compressed_messages: int
    tokens_before: int
    tokens_after: int


class CompressedContext:
    """The messages of one agent session, compressed when they exceed ``budget`` tokens.

    Args:
        goal: the task (pinned in every compressed memory).
        budget: token budget of :meth:`messages` (system + memory + recent messages).
        keep_last: recent messages kept verbatim at a compression (fewer if needed to fit).
        summarizer: ``f(goal, findings, session_memory, history_lines) -> {"session_memory",
            "working_memory"}``; default :func:`offline_summary`.
        counter: a :class:`TokenCounter` (default approximate).
        system: pinned leading messages (the agent's instructions), never compressed.
    """

    def __init__(
        self,
        goal: str,
        *,
        budget: int = 16000,
        keep_last: int = 6,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        system: Sequence[dict] = (),
    ):
        if budget < 1:
            raise InputError(f"context budget must be a positive number of tokens, got {budget}")
        if keep_last < 0:
            raise InputError(f"keep_last must be 0 or more, got {keep_last}")
        self.goal = str(goal)
        self.budget = budget
        self.keep_last = keep_last
        self.summarizer = summarizer or offline_summary
        self.counter = counter or TokenCounter()
        self.system = [dict(m) for m in system]
        self.findings: list[str] = []
        self.session_memory = ""
        self.working_memory = ""
        #: ``f(text, what) -> text`` applied to the memories as they are sent (they summarise tool
        #: results, which may carry untrusted text: e.g. :func:`agentcir.framework.untrusted.mark`)
        self.mark_memory: Callable[[str, str], str] | None = None
        self.recent: list[dict] = []
        self.compressions: list[Compression] = []

    # -- contents ---------------------------------------------------------------------------
    def note(self, finding: str) -> None:
        """Pin a key finding: it stays, verbatim, in every compressed memory."""
        finding = " ".join(str(finding).split())
        if finding and finding not in self.findings:
            self.findings.append(finding)

    def memory_message(self) -> dict | None:
        """The user message that carries goal, findings and memories (``None`` before any compression
        or finding)."""
        if not (self.session_memory or self.working_memory or (self.findings and self.compressions)):
            return None
        parts = [MEMORY_HEADER, f"Goal: {self.goal}"]
        if self.findings:
            parts.append("Key findings:\n" + "\n".join(f"- {f}" for f in self.findings))
        mark = self.mark_memory or (lambda text, what: text)
        if self.session_memory:
            parts.append("Session memory:\n" + mark(self.session_memory, "session memory"))
        if self.working_memory:
            parts.append("Working memory:\n" + mark(self.working_memory, "working memory"))
        return {"role": "user", "content": "\n\n".join(parts)}

    def messages(self) -> list[dict]:
        """What to send to the model now: pinned system messages, the memory, recent messages."""
        mem = self.memory_message()
        return [*self.system, *([mem] if mem else []), *self.recent]

    def _tokens(self, messages: Sequence[dict]) -> int:
        return sum(self.counter(message_text(m)) + MESSAGE_OVERHEAD for m in messages)

    def tokens(self) -> int:
        return self._tokens(self.messages())

    # -- growing and compressing ------------------------------------------------------------------
    def add(self, *messages: dict) -> Compression | None:
        """Append messages; compress when over budget. Returns the compression, if one ran."""
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise InputError(f"a context message must be a dict with a 'role', got {m!r}")
            self.recent.append(m)
        if self.tokens() > self.budget:
            return self.compress()
        return None

    async def aadd(self, *messages: dict) -> Compression | None:
        """:meth:`add` for async agents: a compression (an LLM summariser call) runs in a worker
        thread, so the event loop keeps serving the other queries meanwhile."""
        return await asyncio.to_thread(self.add, *messages)

    def _split(self, keep: int) -> int:
        """Index where the kept tail starts: ``keep`` messages back, moved earlier so that the
        tail does not start with tool results cut from their assistant call."""
        cut = max(0, len(self.recent) - keep)
        while 0 < cut < len(self.recent) and self.recent[cut].get("role") == "tool":
            cut -= 1
        return cut

    def _fit(self, text: str, max_tokens: int, newest: bool = True) -> str:
        """``text`` cut to ``max_tokens`` by whole lines (dropping the oldest, or the last ones
        when ``newest`` is false), whatever the summariser returned."""
        if self.counter(text) <= max_tokens:
            return text
        lines = text.splitlines()
        dropped = 0
        while len(lines) > 1 and self.counter("\n".join(lines)) > max_tokens:
            lines.pop(0 if newest else -1)
            dropped += 1
        out = "\n".join(lines)
        while out and self.counter(out) > max_tokens:  # one long line: cut it
            out = out[: int(len(out) * 0.8)]
        if dropped and newest:
            m = re.match(r"\((\d+) earlier step", lines[0]) if lines else None
            out = f"({dropped + (int(m.group(1)) if m else 0)} earlier step(s) omitted)\n" + (
                out if not m else out.split("\n", 1)[-1]
            )
        return out

    def compress(self) -> Compression | None:
        """Compress the older messages now; if the result is still over budget, keep fewer
        recent messages (down to the last one and the call it answers). Returns ``None``
        when there was nothing older to compress."""
        before = self.tokens()
        done = 0
        keep = min(self.keep_last, max(0, len(self.recent) - 1))
        while True:
            cut = self._split(max(keep, 1))
            if cut > 0:
                old, self.recent = self.recent[:cut], self.recent[cut:]
                prev = [PREVIOUS + ln for ln in self.working_memory.splitlines() if ln.strip()]
                out = self.summarizer(self.goal, list(self.findings), self.session_memory, prev + history_lines(old))
                if not isinstance(out, dict) or "session_memory" not in out:
                    raise InputError(
                        f"the context summariser must return {{'session_memory', 'working_memory'}}, got {out!r}"
                    )
                self.session_memory = self._fit(str(out.get("session_memory") or "").strip(), max(40, self.budget // 3))
                self.working_memory = self._fit(
                    str(out.get("working_memory") or "").strip(), max(30, self.budget // 6), newest=False
                )
                done += len(old)
            if self.tokens() <= self.budget or keep <= 1:
                break
            keep -= 1
        if not done:
            return None
        c = Compression(done, before, self.tokens())
        self.compressions.append(c)
        if c.tokens_after > self.budget:
            log.warning(
                "context still takes %d tokens after compression (budget %d): the latest messages alone exceed it",
                c.tokens_after,
                self.budget,
            )
        return c

    # -- persistence ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "findings": self.findings,
            "session_memory": self.session_memory,
            "working_memory": self.working_memory,
            "recent": self.recent,
            "system": self.system,
            "compressions": [vars(c) for c in self.compressions],
        }

    def load_json(self, data: dict[str, Any]) -> "CompressedContext":
        self.goal = data.get("goal", self.goal)
        self.findings = list(data.get("findings", []))
        self.session_memory = data.get("session_memory", "")
        self.working_memory = data.get("working_memory", "")
        self.recent = list(data.get("recent", []))
        self.system = list(data.get("system", self.system))
        self.compressions = [Compression(**c) for c in data.get("compressions", [])]
        return self


class SummarizerKind(Choice):
    """What condenses old findings (config field ``summarizer``)."""

    offline = "offline"
    llm = "llm"


@MEMORIES.register("context")
class ContextMemory(Memory):
    """Compressed context memory for agents (see :class:`CompressedContext`).

    Config:
        budget: tokens the agent's messages may take before older ones are compressed.
        keep_last: recent messages kept verbatim at each compression.
        token_counter: ``approx`` (4 characters a token), ``words``, or a local tokenizer folder.
        summarizer: ``offline`` (extractive, no model) or ``llm`` (the recipe's llm runs the
            task ``compress_context``).
        prompt: the prompt file of the ``llm`` summariser.
        summary_chars: length cap of the offline session memory, in characters.
    """

    optional: ClassVar[tuple[str, ...]] = ("llm",)
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    @dataclass
    class Config:
        budget: int = bounded(16000, 1)
        keep_last: int = 6
        token_counter: str = "approx"
        summarizer: SummarizerKind = SummarizerKind.offline
        prompt: str = "tasks/compress_context"
        summary_chars: int = 4000

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        c = self.cfg
        if c.summarizer == "llm" and self.llm is None:
            raise InputError(
                "memory 'context': summarizer=llm needs an llm in the recipe (llm=openai, transformers or rules)"
            )
        if c.budget < 1 or c.keep_last < 0 or c.summary_chars < 100:
            raise InputError(
                f"memory 'context': budget must be >= 1, keep_last >= 0 and summary_chars >= 100 "
                f"(got {c.budget}, {c.keep_last}, {c.summary_chars})"
            )
        self.counter = TokenCounter(c.token_counter)

    def summarize(self, goal: str, findings: list[str], session_memory: str, history: list[str]) -> dict[str, str]:
        """Run the configured summariser."""
        if self.cfg.summarizer == "offline":
            return offline_summary(goal, findings, session_memory, history, max_chars=self.cfg.summary_chars)
        from ...framework.parsing import parse_task_reply

        variables = {
            "goal": goal,
            "findings": findings or ["(none yet)"],
            "session_memory": session_memory or "(empty)",
            "history": "\n".join(history),
        }
        reply = self.llm.run_task("compress_context", variables, prompt=self.cfg.prompt)
        return parse_task_reply("compress_context", reply)

    def new(self, goal: str, *, system: Sequence[dict] = ()) -> CompressedContext:
        """A fresh context for one agent session."""
        return CompressedContext(
            goal,
            budget=self.cfg.budget,
            keep_last=self.cfg.keep_last,
            summarizer=self.summarize,
            counter=self.counter,
            system=system,
        )
