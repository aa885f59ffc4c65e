"""The package's own fast tests: its tasks are registered, answered offline by the rules LLM and by
the scripted endpoint (which renders the package's prompts), and the recipe composes."""

import json

from agentcir.registry import LLMS
from agentcir.testing import ScriptedServer, task_replier

import agentcir_refine_loop.tasks  # noqa: F401  (registers the tasks)
from agentcir_refine_loop.replies import critique, plan


def test_the_offline_replies():
    assert plan({"reference_caption": "a red shirt", "modification": "make it blue"})["description"] == "a blue shirt"
    assert (
        critique({"modification": "m", "description": "a blue shirt", "candidates": ["a blue shirt", "a red shirt"]})[
            "verdict"
        ]
        == "accept"
    )
    out = critique({"modification": "m", "description": "a blue shoe", "candidates": "- a blue dress - a blue shoe"})
    assert out == {"verdict": "revise", "description": "a blue shoe, shoe"}


def test_the_rules_llm_and_the_scripted_endpoint_give_the_same_answer():
    variables = {"modification": "make it blue", "description": "a blue shoe", "candidates": ["a blue dress"]}
    offline = json.loads(LLMS.build("rules", {}).run_task("refine_loop_critique", variables))
    with ScriptedServer() as srv:
        srv.script("/chat/completions", task_replier())
        llm = LLMS.build("openai", {"base_url": srv.base_url, "model": "scripted", "retries": 0})
        served = json.loads(llm.run_task("refine_loop_critique", variables))
        prompt = srv.requests[-1].json["messages"][0]["content"]
    assert offline == served == {"verdict": "revise", "description": "a blue shoe, shoe"}
    assert "The best results found are described as:" in prompt  # the package's prompt file was rendered


def test_the_recipe_composes_with_the_offline_llm():
    from agentcir.framework.recipe import compose

    recipe = compose(["method=refine_loop"])
    assert recipe["method"] == {"name": "refine_loop", "top_k": 50, "rounds": 3, "inspect": 3, "num_keyframes": 8}
    assert recipe["llm"]["name"] == "rules"
