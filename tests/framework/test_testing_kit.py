"""agentcir.testing: the scripted endpoint answers plugin tasks through pluggable repliers, reads a
task's variables back from its prompt, and runs from the command line on a fixed port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from agentcir.framework.prompts import load_prompt
from agentcir.framework.tasks import PLUGIN_TASKS, TASKS, check_variables, register_task
from agentcir.registry import LLMS
from agentcir.testing import ScriptedServer, read_variables, task_of, task_replier

SAMPLE = {
    "reference_caption": "a red dress",
    "modification": "make it blue",
    "target_caption": "a blue dress",
    "k": 2,
    "n": 3,
    "objects": ["dog", "hat"],
    "captions": ["one", "two"],
    "statement": "it is blue",
    "caption": "a dress",
    "goal": "find it",
    "findings": ["x"],
    "session_memory": "none",
    "history": "h",
    "top_captions": ["a blue dress", "a red skirt"],
    "last_description": "a blue dress",
    "suggestions": "make it longer",
    "instruction": "make it blue",
    "ref_image_desc": "a red dress",
    "atomic_inst": "change the colour to blue",
}


@pytest.fixture
def clean_tasks():
    before = dict(PLUGIN_TASKS)
    yield
    PLUGIN_TASKS.clear()
    PLUGIN_TASKS.update(before)


@pytest.mark.parametrize("task", [t for t in TASKS if t not in ("caption", "list_objects")])
def test_variables_are_read_back_from_every_task_prompt(task):
    values = check_variables(
        task, {k: SAMPLE[k] for k in (*TASKS[task].variables, *(o for o, _ in TASKS[task].optional))}
    )
    text = " ".join(load_prompt(f"tasks/{task}").render(values).split())
    assert task_of({"messages": [{"role": "user", "content": text}]}) == task
    got = read_variables(task, text)
    for name, value in values.items():
        want = "\n".join(f"- {x}" for x in value) if isinstance(value, list) else str(value)
        assert got[name] == " ".join(want.split()), name


@pytest.fixture
def plugin_prompt(tmp_path):
    from agentcir.framework.prompts import add_prompt_dir, remove_prompt_dir

    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "grade.txt").write_text(
        'Grade the photo {{caption}} for the wish:\n{{wish}}\nReply JSON {"grade": "...", "reasons": ["..."]}\n'
    )
    add_prompt_dir(tmp_path)
    yield tmp_path
    remove_prompt_dir(tmp_path)


def test_plugin_tasks_answered_by_their_replier_or_a_given_one(clean_tasks, plugin_prompt):
    register_task(
        "kit_grade",
        ("caption", "wish"),
        fields={"grade": "str", "reasons": "list[str]"},
        prompt="kit/grade",
        replier=lambda v: {"grade": f"{v['caption']}|{v['wish']}", "reasons": []},
    )
    with ScriptedServer() as srv:
        srv.script("/chat/completions", task_replier())
        llm = LLMS.build("openai", {"base_url": srv.base_url, "model": "m", "retries": 0})
        assert json.loads(llm.run_task("kit_grade", {"caption": "a red hat", "wish": "make it green"})) == {
            "grade": "a red hat|make it green",
            "reasons": [],
        }
        # a replier given to the endpoint answers first; None passes to the next
        srv.script(
            "/chat/completions",
            task_replier(repliers=[lambda task, v: None, lambda task, v: {"grade": "A", "reasons": [task]}]),
        )
        assert json.loads(llm.run_task("kit_grade", {"caption": "c", "wish": "w"})) == {
            "grade": "A",
            "reasons": ["kit_grade"],
        }
        # without any replier: a reply of the declared shape
        register_task(
            "kit_grade", ("caption", "wish"), fields={"grade": "str", "reasons": "list[str]"}, prompt="kit/grade"
        )
        srv.script("/chat/completions", task_replier())
        out = json.loads(llm.run_task("kit_grade", {"caption": "c", "wish": "w"}))
        assert set(out) == {"grade", "reasons"} and isinstance(out["reasons"], list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_command_line_serves_on_a_fixed_port_with_a_replier_module(clean_tasks, tmp_path, plugin_prompt):
    (tmp_path / "kit_replies.py").write_text(
        textwrap.dedent("""
        from agentcir.framework.tasks import register_task
        register_task("kit_grade", ("caption", "wish"), fields={"grade": "str", "reasons": "list[str]"},
                      prompt="kit/grade")

        def reply(task, variables):
            if task == "kit_grade":
                return {"grade": "B", "reasons": [variables["wish"]]}
            return None
    """)
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "AGENTCIR_PROMPTS": str(tmp_path),
    }
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentcir.testing.server", "--port", str(port), "--replier", "kit_replies:reply"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == f"serving http://127.0.0.1:{port}/v1", line + proc.stderr.read()
        sys.path.insert(0, str(tmp_path))
        try:
            import kit_replies  # noqa: F401  (the same task, registered here for the client)
        finally:
            sys.path.remove(str(tmp_path))
        llm = LLMS.build("openai", {"base_url": f"http://127.0.0.1:{port}/v1", "model": "scripted", "retries": 0})
        assert json.loads(llm.run_task("kit_grade", {"caption": "c", "wish": "bluer"})) == {
            "grade": "B",
            "reasons": ["bluer"],
        }
        # a built-in task the replier passes on (None): the endpoint's own reply of the declared shape
        out = json.loads(llm.run_task("target_caption", {"reference_caption": "r", "modification": "m"}))
        assert set(out) == {"target_caption", "modifications"}
        # a second server cannot take the port: a clear error, exit status 2
        busy = subprocess.run(
            [sys.executable, "-m", "agentcir.testing.server", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    bad = subprocess.run(
        [sys.executable, "-m", "agentcir.testing.server", "--replier", "kit_replies:nothing"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "module 'kit_replies' has no function 'nothing'" in bad.stderr


def test_components_hold_no_testing_code():
    from pathlib import Path

    import agentcir.components.llms as llms

    for name in ("scripted_server.py", "scripted_tasks.py"):
        text = (Path(llms.__file__).parent / name).read_text()
        assert "agentcir.testing" in text.replace("...testing", "agentcir.testing") and len(text.splitlines()) <= 6
