"""The open task table and the prompt search path: plugins register tasks (schema, prompt, offline
replier) and ship prompts found by name; the rules LLM answers plugin tasks through their repliers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agentcir.framework import prompts, tasks
from agentcir.framework.errors import InputError
from agentcir.framework.parsing import ReplyParseError, parse_task_reply
from agentcir.framework.prompts import add_prompt_dir, load_prompt, remove_prompt_dir
from agentcir.framework.tasks import PLUGIN_TASKS, find_task, register_replier, register_task, task_spec
from agentcir.registry import LLMS


@pytest.fixture
def clean_tasks():
    before = dict(PLUGIN_TASKS)
    yield
    PLUGIN_TASKS.clear()
    PLUGIN_TASKS.update(before)


@pytest.fixture
def prompt_folder(tmp_path):
    d = tmp_path / "my_prompts"
    (d / "mine").mkdir(parents=True)
    (d / "mine" / "judge.txt").write_text('Judge {{caption}} against {{wish}}. Reply JSON {"score": "..."}\n')
    add_prompt_dir(d)
    yield d
    remove_prompt_dir(d)


def test_register_task_and_parse_its_replies(clean_tasks, prompt_folder):
    spec = register_task(
        "mine_judge", ("caption", "wish"), fields={"score": "str", "notes": "list[str]"}, prompt="mine/judge"
    )
    assert task_spec("mine_judge") is spec and spec.prompt_name == "mine/judge" and spec.origin == __name__
    assert parse_task_reply("mine_judge", '{"score": "4", "notes": ["a"]}') == {"score": "4", "notes": ["a"]}
    with pytest.raises(ReplyParseError, match="LLM task 'mine_judge' lacks the field 'score'"):
        parse_task_reply("mine_judge", '{"other": 1, "more": 2}')
    # its default prompt is found on the search path, and is in the call's cache key
    llm = LLMS.build("openai", {"base_url": "http://127.0.0.1:1/v1", "model": "m"})
    assert llm.call_prompts("run_task", {"task": "mine_judge", "variables": {}}) == ["mine/judge"]


def test_a_custom_parser_replaces_the_schema(clean_tasks):
    register_task("mine_count", ("text",), reply="json", parser=lambda text, v: len(str(text).split()))
    assert parse_task_reply("mine_count", "one two three") == 3


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"name": "refine"}, "LLM task 'refine' is built in"),
        ({"name": "bad name"}, "LLM task name must be a non-empty word"),
        ({"name": "t1", "reply": "xml"}, "reply must be one of text, json, yes_no, true_false, got 'xml'"),
        ({"name": "t2", "fields": {"a": "int"}}, "field types must be str, list[str], questions; got a: int"),
        ({"name": "t3"}, "a json reply needs its fields"),
        ({"name": "t4", "reply": "text", "fields": {"a": "str"}}, "fields are for json replies"),
        ({"name": "t5", "fields": {"a": "list[str]"}, "count": "n"}, "count variable 'n' is not one of its variables"),
        ({"name": "t6", "fields": {"a": "str"}, "replier": "no"}, "replier must be callable"),
    ],
)
def test_bad_registrations_are_refused(clean_tasks, kwargs, message):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        register_task(**kwargs)


def test_another_module_cannot_take_a_registered_name(clean_tasks):
    register_task("mine_once", (), fields={"a": "str"})
    register_task("mine_once", (), fields={"a": "str", "b": "str"})  # the same module again: replaced
    assert task_spec("mine_once").field_types == {"a": "str", "b": "str"}
    ns = {"__name__": "other_plugin.tasks", "register_task": register_task}
    with pytest.raises(InputError, match="registered twice: by '.*test_open_tasks' and by 'other_plugin.tasks'"):
        exec("register_task('mine_once', (), fields={'a': 'str'})", ns)


def test_the_rules_llm_answers_a_plugin_task_with_its_replier(clean_tasks):
    rules = LLMS.build("rules", {})
    register_task("mine_shout", ("text",), fields={"loud": "str"})
    with pytest.raises(InputError, match="LLM task 'mine_shout' has no offline replier"):
        rules.run_task("mine_shout", {"text": "hi"})
    register_replier("mine_shout", lambda v: {"loud": v["text"].upper()})
    assert json.loads(rules.run_task("mine_shout", {"text": "hi"})) == {"loud": "HI"}
    with pytest.raises(InputError, match="LLM task 'mine_shout' needs variable"):
        rules.run_task("mine_shout", {})
    register_task("mine_ok", ("x",), reply="yes_no", replier=lambda v: v["x"] == "1")
    assert rules.run_task("mine_ok", {"x": "1"}) == "yes" and rules.run_task("mine_ok", {"x": "0"}) == "no"


def test_editing_a_replier_changes_the_rules_llm_identity(clean_tasks):
    register_task("mine_echo", ("text",), fields={"out": "str"}, replier=lambda v: {"out": v["text"]})
    a = LLMS.build("rules", {}).identity
    register_task("mine_echo", ("text", "extra"), fields={"out": "str"}, replier=lambda v: {"out": v["text"]})
    assert LLMS.build("rules", {}).identity != a


def test_prompt_search_path_and_not_found_error(prompt_folder, tmp_path, monkeypatch):
    assert "Judge" in load_prompt("mine/judge").text
    env_dir = tmp_path / "env_prompts"
    (env_dir / "env").mkdir(parents=True)
    (env_dir / "env" / "hello.txt").write_text("Hello {{who}}")
    monkeypatch.setenv("AGENTCIR_PROMPTS", str(env_dir))
    assert load_prompt("env/hello").render(who="you") == "Hello you"
    # the project's prompts come first: a folder cannot change a built-in prompt
    (prompt_folder / "tasks").mkdir()
    (prompt_folder / "tasks" / "refine.txt").write_text("hijacked")
    assert load_prompt("tasks/refine").text != "hijacked"
    with pytest.raises(InputError) as e:
        load_prompt("nowhere/at_all")
    msg = str(e.value)
    assert "prompt 'nowhere/at_all' not found; looked in:" in msg
    for where in (
        str(prompts.PROMPTS_DIR),
        "the project's prompts",
        str(prompt_folder),
        "add_prompt_dir",
        str(env_dir),
        "AGENTCIR_PROMPTS",
        "mine/judge",
        "env/hello",
        "tasks/refine",
    ):
        assert where in msg, where
    with pytest.raises(InputError, match="add_prompt_dir: '.*' is not a folder"):
        add_prompt_dir(tmp_path / "missing")


def test_plugin_tasks_and_prompts_come_from_entry_points(tmp_path):
    """A package declaring agentcir.tasks and agentcir.prompts entry points, installed by pip."""
    pkg = tmp_path / "src"
    (pkg / "tp_plugin" / "prompts" / "tp").mkdir(parents=True)
    (pkg / "tp_plugin" / "__init__.py").write_text("")
    (pkg / "tp_plugin" / "prompts" / "__init__.py").write_text("")
    (pkg / "tp_plugin" / "prompts" / "tp" / "ask.txt").write_text('Ask about {{thing}}. JSON {"answer": "..."}')
    (pkg / "tp_plugin" / "tasks.py").write_text(
        textwrap.dedent("""
        from agentcir.framework.tasks import register_task
        register_task("tp_ask", ("thing",), fields={"answer": "str"}, prompt="tp/ask",
                      replier=lambda v: {"answer": "about " + v["thing"]})
    """)
    )
    (pkg / "setup.py").write_text(
        textwrap.dedent("""
        from setuptools import setup
        setup(name="tp-plugin", version="0.1", packages=["tp_plugin", "tp_plugin.prompts"],
              package_data={"tp_plugin.prompts": ["tp/*.txt"]},
              entry_points={"agentcir.tasks": ["tp = tp_plugin.tasks"],
                            "agentcir.prompts": ["tp = tp_plugin.prompts"]})
    """)
    )
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(pkg),
        ],
        check=True,
        capture_output=True,
    )
    code = textwrap.dedent("""
        import json
        from agentcir.framework.prompts import load_prompt
        from agentcir.framework.tasks import task_spec
        from agentcir.registry import LLMS
        spec = task_spec("tp_ask")
        print(json.dumps({"prompt": load_prompt(spec.prompt_name).render(thing="shoes"),
                          "reply": LLMS.build("rules", {}).run_task("tp_ask", {"thing": "shoes"})}))
    """)
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"prompt": 'Ask about shoes. JSON {"answer": "..."}', "reply": '{"answer": "about shoes"}'}


def test_unknown_task_names_the_registration():
    assert find_task("no_such_task") is None
    with pytest.raises(InputError, match="unknown LLM task 'no_such_task'; tasks: caption.*register_task"):
        tasks.task_spec("no_such_task")
