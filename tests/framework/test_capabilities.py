"""A method declares what its components must support; a recipe whose component cannot is refused
when it is composed, before anything is built, naming the component and a backend that can."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from agentcir.framework import recipe as recipe_mod
from agentcir.framework.capabilities import backends_serving, check_capabilities, needs_of, serves
from agentcir.framework.method import Method
from agentcir.framework.recipe import compose
from agentcir.framework.tasks import PLUGIN_TASKS, register_replier, register_task
from agentcir.registry import LLMS, METHODS, ConfigError


@pytest.fixture
def clean_tasks():
    before = dict(PLUGIN_TASKS)
    yield
    PLUGIN_TASKS.clear()
    PLUGIN_TASKS.update(before)


def test_what_the_built_in_llms_serve(clean_tasks):
    rules, openai = LLMS.get("rules").obj, LLMS.get("openai").obj
    assert serves(rules, "task:refine") is True and serves(rules, "task:caption") is False
    assert serves(rules, "chat") is False and serves(rules, "images") is False
    assert all(serves(openai, n) for n in ("chat", "tools", "images", "task:refine", "task:anything"))
    assert serves(LLMS.get("transformers").obj, "images") is None  # known once the model's config is read
    register_task("cap_plan", ("x",), fields={"a": "str"})
    assert serves(rules, "task:cap_plan") is False
    register_replier("cap_plan", lambda v: {"a": v["x"]})
    assert serves(rules, "task:cap_plan") is True
    assert "rules" in backends_serving("llm", "task:cap_plan") and "openai" in backends_serving("llm", "chat")


def test_the_built_in_methods_declare_their_needs():
    octopus = needs_of(METHODS.get("octopus").obj, {})["llm"]
    assert {"task:target_caption", "task:refine", "task:textual_proxies", "task:filter_objects"} <= set(octopus)
    assert "task:refine" not in needs_of(METHODS.get("octopus").obj, {"refinement": False})["llm"]
    assert "task:entail" in needs_of(METHODS.get("xr").obj, {})["llm"]
    assert needs_of(METHODS.get("cirevl").obj)["llm"][0] == "task:target_caption"
    assert needs_of(METHODS.get("ldre").obj)["llm"][0] == "task:divergent_captions"
    assert needs_of(METHODS.get("imageseeker").obj, {"planner": "auto"}) == {}
    assert set(needs_of(METHODS.get("imageseeker").obj, {"planner": "llm"})["llm"]) == {"chat", "tools", "images"}
    assert needs_of(METHODS.get("image_only").obj) == {}


@pytest.fixture
def needy_method():
    @METHODS.register("cap_needy")
    class Needy(Method):
        requires: ClassVar[tuple[str, ...]] = ("encoder", "llm")
        needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("task:cap_critique",)}

        @dataclass
        class Config:
            top_k: int = 5

        def stages(self):
            return []

    yield Needy
    METHODS._entries.pop("cap_needy", None)


def test_a_recipe_is_refused_at_compose_time_naming_who_can(clean_tasks, needy_method, monkeypatch, tmp_path):
    register_task("cap_critique", ("x",), fields={"ok": "str"})
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "cap_needy.yaml").write_text("name: cap_needy\n")
    built = []
    monkeypatch.setattr(recipe_mod.ComponentPool, "get", lambda self, kind: built.append(kind))

    def compose(overrides):
        return recipe_mod.compose(overrides, extra_dirs=[str(tmp_path)])

    with pytest.raises(ConfigError) as e:
        compose(["method=cap_needy", "llm=rules"])
    msg = str(e.value)
    assert "method 'cap_needy' needs llm 'rules' to serve LLM task 'cap_critique', which it cannot" in msg
    assert "register_task(..., replier=fn)" in msg and "llm=openai" in msg and "llm=transformers" in msg
    assert built == []  # nothing was built: no model, no gallery
    compose(["method=cap_needy", "llm=openai"])  # a prompt-reading llm serves it
    register_replier("cap_critique", lambda v: {"ok": "yes"})
    compose(["method=cap_needy", "llm=rules"])  # and, with an offline replier, so does rules


def test_a_vision_component_needs_an_llm_that_sees():
    with pytest.raises(
        ConfigError,
        match="verifier 'vlm' needs llm 'rules' to serve images, which it cannot; select one that can: llm=openai",
    ):
        compose(["verifier=vlm"])
    with pytest.raises(ConfigError, match="method 'imageseeker' needs llm 'rules' to serve free-form chat"):
        compose(["method=imageseeker", "method.planner=llm"])


def test_undeclared_components_are_not_checked_and_bad_needs_are_named():
    class Plain:
        kind = "llm"

    assert serves(Plain, "chat") is None

    class Bad:
        kind = "method"
        needs = {"llm": ("telepathy",)}

    with pytest.raises(ConfigError, match="unknown capability 'telepathy'; use chat, tools, images or task:<name>"):
        needs_of(Bad)

    class BadKind:
        kind = "method"
        needs = {"oracle": ("chat",)}

    with pytest.raises(ConfigError, match=r"needs\['oracle'\]: unknown component kind"):
        needs_of(BadKind)
    check_capabilities({"method": {"name": "image_only"}}, ("method",))  # nothing needed: passes
