"""Cache identity of the LLM backends: a call's key changes with the model, the config and the
prompt file it reads — including a task's default prompt ``tasks/<task>``."""

import asyncio
import shutil

import pytest

from agentcir.framework import prompts
from agentcir.framework.cache import CallCache
from agentcir.framework.runner import RunContext
from agentcir.registry import LLMS

V = {"reference_caption": "a photo of a red dress", "modification": "make it blue"}


@pytest.fixture
def prompt_dir(tmp_path, monkeypatch):
    """A private copy of the prompts folder, so a test can edit a task's default prompt."""
    d = tmp_path / "prompts"
    shutil.copytree(prompts.PROMPTS_DIR, d)
    monkeypatch.setattr(prompts, "PROMPTS_DIR", d)
    return d


def edit(path, extra):
    path.write_text(path.read_text() + extra)


def test_default_task_prompt_is_part_of_the_key(prompt_dir):
    llm = LLMS.build("openai", {"base_url": "http://127.0.0.1:1/v1", "model": "m"})
    inputs = {"task": "target_caption", "variables": V}
    k1 = RunContext.call_key(llm, "run_task", inputs)
    assert llm.call_prompts("run_task", inputs) == ["tasks/target_caption"]
    edit(prompt_dir / "tasks" / "target_caption.txt", "\nBe concise.\n")
    k2 = RunContext.call_key(llm, "run_task", inputs)
    assert k1 != k2
    # another task's prompt does not matter to this call
    edit(prompt_dir / "tasks" / "questions.txt", "\nBe concise.\n")
    assert RunContext.call_key(llm, "run_task", inputs) == k2
    llm.close()


def test_explicit_prompt_file_is_part_of_the_key(tmp_path):
    llm = LLMS.build("openai", {"base_url": "http://127.0.0.1:1/v1", "model": "m"})
    p = tmp_path / "mine.txt"
    p.write_text("Edit {{reference_caption}} with {{modification}}")
    inputs = {"task": "rewrite_caption", "variables": V, "prompt": str(p)}
    k1 = RunContext.call_key(llm, "run_task", inputs)
    p.write_text("Rewrite {{reference_caption}} with {{modification}}, JSON")
    assert RunContext.call_key(llm, "run_task", inputs) != k1
    llm.close()


def test_rules_keys_ignore_prompt_files(prompt_dir):
    rules = LLMS.build("rules")
    inputs = {"task": "target_caption", "variables": V}
    k1 = RunContext.call_key(rules, "run_task", inputs)
    edit(prompt_dir / "tasks" / "target_caption.txt", "\nBe concise.\n")
    assert RunContext.call_key(rules, "run_task", inputs) == k1  # the rules read no prompt


def test_key_changes_with_model_and_config_not_with_volatile_settings():
    def key(**cfg):
        llm = LLMS.build("openai", {"base_url": "http://127.0.0.1:1/v1", "model": "m", **cfg})
        try:
            return RunContext.call_key(llm, "run_task", {"task": "target_caption", "variables": V})
        finally:
            llm.close()

    base = key()
    assert key(model="other") != base
    assert key(temperature=0.5) != base
    assert key(image_max_side=256) != base
    assert key(api_key="sk-x", timeout=3.0, retries=0, concurrency=1, backoff=2.0, parse_retries=0) == base


def test_cached_run_task_through_the_run_context(tmp_path):
    rules = LLMS.build("rules")
    ctx = RunContext(cache=CallCache(tmp_path / "c.sqlite"), run_dir=None)
    out = [asyncio.run(ctx.call(rules, "run_task", task="target_caption", variables=V)) for _ in range(2)]
    assert out[0] == out[1] == '{"target_caption": "a photo of a blue dress", "modifications": ["make it blue"]}'
    assert (ctx.stats[""].calls, ctx.stats[""].cache_hits) == (1, 1)
