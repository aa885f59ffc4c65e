"""The task-table additions the retrieval methods use: ``summarize_captions`` (a video's keyframe
captions -> one caption, OCTOPUS' Perceiver) and the optional ``objects`` of ``textual_proxies``
(the objects OCTOPUS' Creator kept), for the prompt-reading backends and the ``rules`` backend."""

import json

import pytest

from agentcir.framework.parsing import parse_task_reply
from agentcir.framework.tasks import check_variables, task_spec
from agentcir.framework.errors import InputError
from agentcir.framework.prompts import load_prompt
from agentcir.registry import LLMS

V = {
    "reference_caption": "a photo of a black men's t-shirt",
    "modification": "make it navy",
    "target_caption": "a photo of a navy blue men's t-shirt",
    "k": 4,
}


@pytest.fixture(scope="module")
def llm():
    return LLMS.build("rules")


def test_objects_is_optional_and_defaults_to_an_empty_list():
    assert check_variables("textual_proxies", V)["objects"] == []
    assert check_variables("textual_proxies", {**V, "objects": ["dog"]})["objects"] == ["dog"]
    assert "objects" not in task_spec("textual_proxies").variables
    # the prompt renders with and without objects (a list becomes "- item" lines)
    text = load_prompt("tasks/textual_proxies").render(
        check_variables("textual_proxies", {**V, "objects": ["dog", "logo"]})
    )
    assert "- dog\n- logo" in text
    assert "{{" not in load_prompt("tasks/textual_proxies").render(check_variables("textual_proxies", V))


def test_rules_weave_scene_objects_into_every_other_proxy(llm):
    plain = parse_task_reply("textual_proxies", llm.run_task("textual_proxies", V))["proxies"]
    assert (
        plain == parse_task_reply("textual_proxies", llm.run_task("textual_proxies", {**V, "objects": []}))["proxies"]
    )
    out = parse_task_reply(
        "textual_proxies", llm.run_task("textual_proxies", {**V, "objects": ["dog", "t-shirt", "jeans"]})
    )
    proxies = out["proxies"]
    # "t-shirt" is already the item and "jeans" another item type (it would contradict the target): only the dog
    assert proxies[0] == plain[0] and proxies[2] == plain[2]
    assert proxies[1] == f"{plain[1]} with a dog" and proxies[3] == f"{plain[3]} with a dog"
    assert not any("jeans" in p for p in proxies)


def test_summarize_captions(llm):
    def summary(caps):
        return parse_task_reply("summarize_captions", llm.run_task("summarize_captions", {"captions": caps}))["caption"]

    assert summary(["a red car", "a blue car", "a red car"]) == "a red car"  # the majority
    assert summary(["a", "b", "c", "d", "e"]) == "c"  # no majority: the middle frame
    assert summary(["a", "b", "b", "a"]) == "b"  # a tie: nearer the middle
    assert (
        summary("a dog on grass, running\na dog on grass, running\na cat") == "a dog on grass, running"
    )  # one per line
    with pytest.raises(InputError, match="needs variable\\(s\\) captions"):
        llm.run_task("summarize_captions", {})
    with pytest.raises(InputError, match="got no captions"):
        llm.run_task("summarize_captions", {"captions": []})


def test_summarize_captions_prompt_and_reply_for_real_backends():
    text = load_prompt("tasks/summarize_captions").render({"captions": ["a man walks", "a man runs"]})
    assert "- a man walks\n- a man runs" in text and '{"caption": "<caption of the video>"}' in text
    assert parse_task_reply("summarize_captions", '```json\n{"caption": "a man walks, then runs"}\n```') == {
        "caption": "a man walks, then runs"
    }
    assert json.loads(json.dumps(task_spec("summarize_captions").field_types)) == {"caption": "str"}
