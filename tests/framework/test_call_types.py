"""``ctx.call`` returns the types the interfaces declare, fresh and from the call cache."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Optional

from agentcir.framework.cache import CallCache
from agentcir.framework.call_types import declared_type, restore
from agentcir.framework.component import Component
from agentcir.framework.interfaces import LLM, ChatReply, ToolCall
from agentcir.framework.runner import RunContext


class EchoLLM(LLM):
    calls = 0

    def chat(self, messages, *, tools=None, json_mode=False) -> ChatReply:
        EchoLLM.calls += 1
        calls = [ToolCall("c1", "search", {"q": messages[-1]["content"]})] if tools else []
        return ChatReply(f"echo {messages[-1]['content']}", calls)


def _call(cache: CallCache, llm, **inputs):
    ctx = RunContext(cache=cache, run_dir=None, progress=False)
    return asyncio.run(ctx.call(llm, "chat", **inputs))


def test_chat_returns_a_chat_reply_fresh_and_cached(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    llm = EchoLLM()
    EchoLLM.calls = 0
    msgs = [{"role": "user", "content": "red shoes"}]
    fresh = _call(cache, llm, messages=msgs, tools=[{"type": "function"}])
    cached = _call(CallCache(tmp_path / "c.sqlite"), llm, messages=msgs, tools=[{"type": "function"}])
    assert EchoLLM.calls == 1  # the second came from the cache
    for reply in (fresh, cached):
        assert isinstance(reply, ChatReply)
        assert reply.text == "echo red shoes"
        assert reply.tool_calls == [ToolCall("c1", "search", {"q": "red shoes"})]
        assert isinstance(reply.tool_calls[0], ToolCall)
    assert fresh == cached


def test_chat_reply_round_trips_through_json():
    r = ChatReply("t", [ToolCall("a", "f", {"x": [1, 2]})])
    assert ChatReply.from_json(r.to_json()) == r


@dataclass
class Box:
    value: int

    def to_json(self) -> dict:
        return {"value": self.value}

    @classmethod
    def from_json(cls, d: dict) -> "Box":
        return cls(int(d["value"]))


class Boxer(Component):
    kind = "memory"

    def make(self, n: int) -> Box:
        return Box(n)

    def maybe(self, n: int) -> Optional[Box]:
        return Box(n) if n else None

    def raw(self, n: int) -> dict:
        return {"value": n}


def test_plugin_annotations_decide_the_type(tmp_path):
    b = Boxer()
    assert declared_type(Boxer, "make") is Box and declared_type(Boxer, "maybe") is Box
    assert declared_type(Boxer, "raw") is None
    assert restore(b, "raw", {"value": 3}) == {"value": 3}
    cache = CallCache(tmp_path / "c.sqlite")
    for _ in range(2):  # fresh, then cached
        ctx = RunContext(cache=cache, run_dir=None, progress=False)
        assert asyncio.run(ctx.call(b, "make", n=4)) == Box(4)
        assert asyncio.run(ctx.call(b, "maybe", n=0)) is None
        assert asyncio.run(ctx.call(b, "maybe", n=5)) == Box(5)
    assert len(cache) == 3
