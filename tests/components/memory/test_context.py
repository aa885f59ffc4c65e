"""Compressed context: compression triggers at the budget, keeps the goal and key findings,
never splits a tool result from its call; offline and LLM summarisers."""

import json

import pytest

from agentcir.components.llms.scripted_server import ScriptedServer, Step, chat_completion
from agentcir.components.memory.context import (
    MEMORY_HEADER,
    CompressedContext,
    TokenCounter,
    history_lines,
    offline_summary,
)
from agentcir.framework.errors import InputError
from agentcir.framework.interfaces import ChatReply, ToolCall, assistant_message, tool_message, user_message
from agentcir.registry import LLMS, MEMORIES, ConfigError

GOAL = "Find the photos of the stray cat we saw in Rome and again in Florence"
FINDING = "The cat is orange with a white paw (photo p17)"


def agent_turns(ctx, n, start=0):
    """n rounds of assistant tool call + tool result, with bulky results."""
    for i in range(start, start + n):
        call = ToolCall(f"c{i}", "image_search", {"query": f"cat step {i}", "top_k": 50, "save_as": f"cats_{i}"})
        ctx.add(assistant_message(ChatReply(f"Step {i}: search again, narrower.", [call])))
        ctx.add(tool_message(f"c{i}", {"ids": [f"p{j}" for j in range(i, i + 40)], "saved": f"cats_{i}"}))


def test_no_compression_under_budget():
    ctx = CompressedContext(GOAL, budget=10_000)
    ctx.add(user_message(GOAL))
    agent_turns(ctx, 2)
    assert ctx.compressions == [] and ctx.memory_message() is None
    assert ctx.messages()[0] == user_message(GOAL) and len(ctx.messages()) == 5


def test_compression_triggers_and_keeps_goal_and_findings():
    system = {"role": "system", "content": "You are ImageSeeker. Use the tools."}
    ctx = CompressedContext(GOAL, budget=700, keep_last=4, system=[system])
    ctx.add(user_message(GOAL))
    ctx.note(FINDING)
    agent_turns(ctx, 8)
    assert ctx.compressions, "a small budget must trigger compression"
    assert ctx.tokens() <= 700
    assert all(c.tokens_after < c.tokens_before for c in ctx.compressions)
    msgs = ctx.messages()
    assert msgs[0] == system  # pinned
    mem = msgs[1]["content"]
    assert mem.startswith(MEMORY_HEADER) and f"Goal: {GOAL}" in mem and f"- {FINDING}" in mem
    assert "Session memory:" in mem and "Working memory:" in mem
    # the working memory names every subset saved in the compressed steps, even those the session memory dropped
    assert "Subsets saved or used so far: cats_0, cats_1, cats_2, cats_3, cats_4, cats_5" in ctx.working_memory
    # the most recent exchange is kept verbatim, and starts with the call, not an orphan tool result
    assert msgs[2]["role"] == "assistant" and msgs[-1] == tool_message(
        "c7", {"ids": [f"p{j}" for j in range(7, 47)], "saved": "cats_7"}
    )
    for i, m in enumerate(msgs):
        if m["role"] == "tool":
            assert msgs[i - 1]["role"] in ("assistant", "tool")


def test_findings_survive_many_compressions_and_old_steps_are_counted():
    ctx = CompressedContext(
        GOAL, budget=600, keep_last=2, summarizer=lambda g, f, s, h: offline_summary(g, f, s, h, max_chars=300)
    )
    ctx.note(FINDING)
    ctx.note(FINDING)  # no duplicates
    agent_turns(ctx, 30)
    assert len(ctx.compressions) > 3
    mem = ctx.memory_message()["content"]
    assert mem.count(FINDING) == 1 and GOAL in mem
    assert "earlier step(s) omitted)" in ctx.session_memory
    assert len(ctx.session_memory) <= 340


def test_history_lines_name_tools():
    call = ToolCall("x1", "filter_metadata", {"expression": "place = 'Rome'", "save_as": "rome"})
    lines = history_lines(
        [user_message("hi"), assistant_message(ChatReply("", [call])), tool_message("x1", "12 photos")]
    )
    assert lines == [
        "user: hi",
        'assistant: -> calls filter_metadata({"expression": "place = \'Rome\'", "save_as": "rome"})',
        "tool filter_metadata -> 12 photos",
    ]
    out = offline_summary(GOAL, [], "", lines)
    assert out["working_memory"].startswith("Subsets saved or used so far: rome")


def test_token_counters():
    assert TokenCounter("approx")("a" * 9) == 3 and TokenCounter("words")("one two three") == 4
    with pytest.raises(InputError, match="token_counter must be"):
        TokenCounter("")


def test_llm_summariser_through_the_rules_llm():
    mem = MEMORIES.build("context", {"budget": 500, "keep_last": 2, "summarizer": "llm"}, llm=LLMS.build("rules"))
    ctx = mem.new(GOAL)
    ctx.note(FINDING)
    agent_turns(ctx, 6)
    assert ctx.compressions and "image_search" in ctx.session_memory and FINDING in ctx.memory_message()["content"]


def test_llm_summariser_through_an_openai_compatible_server():
    with ScriptedServer() as srv:
        srv.script(
            "/chat/completions",
            Step(
                json=chat_completion(
                    json.dumps(
                        {
                            "session_memory": "Searched cats 4 times; saved cats_0..cats_3.",
                            "working_memory": "Next: filter cats_3 by Florence.",
                        }
                    )
                )
            ),
        )
        llm = LLMS.build("openai", {"base_url": srv.base_url, "model": "m"})
        try:
            mem = MEMORIES.build("context", {"budget": 500, "keep_last": 2, "summarizer": "llm"}, llm=llm)
            ctx = mem.new(GOAL)
            ctx.note(FINDING)
            agent_turns(ctx, 6)
        finally:
            llm.close()
        prompt = srv.requests[0].json["messages"][0]["content"]
    assert GOAL in prompt and f"- {FINDING}" in prompt and "image_search" in prompt
    assert ctx.session_memory == "Searched cats 4 times; saved cats_0..cats_3."
    assert ctx.working_memory == "Next: filter cats_3 by Florence."


def test_async_add_compresses_off_the_event_loop():
    import asyncio
    import threading

    threads = set()

    def summarizer(goal, findings, session, history):
        threads.add(threading.current_thread().name)
        return offline_summary(goal, findings, session, history)

    ctx = CompressedContext(GOAL, budget=300, keep_last=2, summarizer=summarizer)

    async def main():
        for i in range(6):
            await ctx.aadd(user_message(f"step {i} " + "words " * 60))
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert ctx.compressions and threads and loop_thread not in threads


def test_persisted_state_round_trips():
    ctx = CompressedContext(GOAL, budget=500, keep_last=2)
    ctx.note(FINDING)
    agent_turns(ctx, 6)
    again = CompressedContext("?", budget=500).load_json(json.loads(json.dumps(ctx.to_json())))
    assert again.messages() == ctx.messages() and again.compressions == ctx.compressions


def test_bad_settings_are_named():
    with pytest.raises(InputError, match="summarizer=llm needs an llm in the recipe"):
        MEMORIES.build("context", {"summarizer": "llm"})
    with pytest.raises(ConfigError, match="field 'summarizer': must be one of offline, llm, got 'magic'"):
        MEMORIES.build("context", {"summarizer": "magic"})
    with pytest.raises(InputError, match="context budget must be a positive number of tokens"):
        CompressedContext(GOAL, budget=0)
    with pytest.raises(InputError, match="a context message must be a dict with a 'role'"):
        CompressedContext(GOAL).add("hello")


def test_identity_follows_config_and_summariser_llm():
    a = MEMORIES.build("context", {})
    b = MEMORIES.build("context", {"budget": 8000})
    c = MEMORIES.build("context", {"summarizer": "llm"}, llm=LLMS.build("rules"))
    assert len({a.identity, b.identity, c.identity}) == 3
