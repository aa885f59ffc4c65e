"""Reading replies: tolerant JSON extraction, strict yes/no and true/false, task reply shapes."""

import pytest

from agentcir.framework.parsing import (
    ReplyParseError,
    clean_caption,
    extract_json,
    parse_task_reply,
    parse_true_false,
    parse_yes_no,
)
from agentcir.framework.tasks import TASKS, check_variables, task_spec
from agentcir.framework.errors import InputError
from agentcir.framework.prompts import load_prompt


@pytest.mark.parametrize(
    "reply,value",
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('Here you go:\n```\n{"a": "x"}\n```\nHope this helps!', {"a": "x"}),
        (
            'Sure! The answer is {"target_caption": "a red dress", "modifications": ["red"]}. Anything else?',
            {"target_caption": "a red dress", "modifications": ["red"]},
        ),
        ("{'caption': 'a dog\\'s bed', 'ok': True, 'n': None}", {"caption": "a dog's bed", "ok": True, "n": None}),
        ('{"proxies": ["a", "b",],}', {"proxies": ["a", "b"]}),
        ('{"a": "say \\"hi\\"", // comment\n "b": false}', {"a": 'say "hi"', "b": False}),
        ("{'msg': 'he said \"no\"'}", {"msg": 'he said "no"'}),
        (
            '<think>I should use {braces} carefully</think>{"keep": ["dog"], "remove": []}',
            {"keep": ["dog"], "remove": []},
        ),
        ('["x", "y"]', ["x", "y"]),
        ('It\'s here: {"a": "it\'s fine"}', {"a": "it's fine"}),
        ('```json\n{"a": 1, "b": {"c": [True, False]}}', {"a": 1, "b": {"c": [True, False]}}),  # unclosed fence
    ],
)
def test_extract_json(reply, value):
    assert extract_json(reply) == value


def test_extract_json_prefers_the_expected_type():
    assert extract_json('["not this"] but {"this": 1}', expect=dict) == {"this": 1}


@pytest.mark.parametrize(
    "reply,reason",
    [
        ("I cannot answer that.", "no JSON object or array found"),
        ("", "the reply is empty"),
        ('{"a": 1, "b": }', 'the JSON is malformed (Expecting value, line 1 column 15, in \'{"a": 1, "b": }\')'),
        ('"just a string"', "found JSON of type str, expected dict or list"),
        ('{"target_caption": "a red dress", "modifications": ["cut off', "the JSON is malformed (Unterminated string"),
    ],
)
def test_extract_json_errors_name_the_problem(reply, reason):
    with pytest.raises(ReplyParseError) as e:
        extract_json(reply, what="reply to LLM task 'x'")
    msg = str(e.value)
    assert msg.startswith("could not parse JSON from the reply to LLM task 'x': ") and reason in msg
    assert "reply: " in msg


@pytest.mark.parametrize(
    "reply,value",
    [
        ("Yes", True),
        ("yes.", True),
        ("YES, it matches", True),
        ("**Yes**", True),
        ('"no"', False),
        ("No, the colour differs.", False),
        ("No.", False),
        ("no", False),
        ("Answer: no", False),
        ("Final answer: Yes", True),
        ("True", True),
        ("false", False),
        ('{"answer": "no"}', False),
        ('{"answer": true}', True),
        ("<think>it is not red, I know</think>\nYes", True),
        ("The sleeves are short and the colour matches. Answer: yes", True),
        ("- No", False),
    ],
)
def test_yes_no(reply, value):
    assert parse_yes_no(reply) is value


@pytest.mark.parametrize(
    "reply",
    [
        "Not sure",
        "I know it is blue",
        "Nothing matches",
        "Nope",
        "maybe",
        "Notably, yes-ish",
        "",
        "It is not clear; I don't know",
    ],
)
def test_yes_no_never_guesses(reply):
    with pytest.raises(
        ReplyParseError, match="could not read a yes/no answer from the reply: it does not start with yes/no"
    ):
        parse_yes_no(reply)
    assert parse_yes_no(reply, default=None) is None


@pytest.mark.parametrize(
    "reply,value",
    [
        ("False", False),
        ("false.", False),
        ("True", True),
        ("TRUE", True),
        ("False, the item is red", False),
        (False, False),
        (True, True),
    ],
)
def test_true_false_never_uses_bool_of_a_string(reply, value):
    assert parse_true_false(reply) is value


def test_true_false_rejects_other_types():
    with pytest.raises(ReplyParseError, match="true/false answer from a int"):
        parse_true_false(1)


def test_caption_cleaning():
    assert clean_caption('Caption: "a red dress on a hanger"\n\nI hope this helps.') == "a red dress on a hanger"
    with pytest.raises(ReplyParseError, match="the caption reply is empty"):
        clean_caption("  \n ")


def test_task_reply_shapes():
    assert parse_task_reply("target_caption", '{"target_caption": "a blue dress"}') == {
        "target_caption": "a blue dress",
        "modifications": [],
    }
    assert parse_task_reply("target_caption", '{"Target_Caption": "a", "modifications": "make it blue"}') == {
        "target_caption": "a",
        "modifications": ["make it blue"],
    }
    assert parse_task_reply("textual_proxies", '["a", "b", "c", ""]', {"k": 2}) == {"proxies": ["a", "b"]}
    assert parse_task_reply("rewrite_caption", '{"rewritten": "a blue dress"}') == {"caption": "a blue dress"}
    assert parse_task_reply("filter_objects", '{"keep": ["dog"]}') == {"keep": ["dog"], "remove": []}
    assert parse_task_reply(
        "questions",
        '{"questions": [{"statement": "It is blue.", "answer": "False"}, '
        '{"question": "It is a dress.", "answer": true}, {"statement": "x", "answer": 1}]}',
    ) == {
        "questions": [
            {"statement": "It is blue.", "answer": False},
            {"statement": "It is a dress.", "answer": True},
            {"statement": "x", "answer": True},
        ]
    }
    assert parse_task_reply("verify", "No, the collar differs") is False
    assert parse_task_reply("entail", "true") is True
    assert parse_task_reply("caption", "A red dress.") == "A red dress."
    assert parse_task_reply("compress_context", '{"session_memory": "s"}') == {
        "session_memory": "s",
        "working_memory": "",
    }


@pytest.mark.parametrize(
    "task,reply,message",
    [
        ("target_caption", '{"caption": "x", "other": 1}', "lacks the field 'target_caption' (has: caption, other)"),
        ("target_caption", '{"target_caption": ""}', "field target_caption is empty"),
        ("target_caption", '{"target_caption": {"text": "x"}}', "field target_caption must be a string, got dict"),
        ("textual_proxies", '{"proxies": "a", "x": 2}', None),
        ("questions", '{"questions": [{"statement": "s"}]}', "field questions[0] has no 'answer'"),
        (
            "questions",
            '{"questions": [{"statement": "s", "answer": "maybe"}]}',
            "field questions[0].answer must be true or false, got 'maybe'",
        ),
        (
            "questions",
            '{"questions": ["The dress is blue."]}',
            "field questions[0] must be an object with 'statement' and 'answer'",
        ),
        ("filter_objects", '["dog"]', "must be a JSON object with keep, remove; got a list"),
    ],
)
def test_task_reply_errors(task, reply, message):
    if message is None:
        assert parse_task_reply(task, reply) == {"proxies": ["a"]}
        return
    with pytest.raises(ReplyParseError) as e:
        parse_task_reply(task, reply)
    assert message in str(e.value) and f"LLM task '{task}'" in str(e.value)


def test_every_task_has_a_prompt_with_exactly_its_variables():
    for name, spec in TASKS.items():
        prompt = load_prompt(f"tasks/{name}")
        assert prompt.variables == set(spec.variables) | {o for o, _ in spec.optional}, name
        if spec.reply == "json":
            assert "JSON" in prompt.text and all(f'"{f}"' in prompt.text for f, _ in spec.fields), name
        if spec.reply == "yes_no":
            assert "yes or no" in prompt.text
        if spec.reply == "true_false":
            assert "true or false" in prompt.text


def test_variables_are_checked():
    with pytest.raises(
        InputError,
        match=r"LLM task 'questions' needs variable\(s\) target_caption, n; given: modification, reference_caption",
    ):
        check_variables("questions", {"reference_caption": "a", "modification": "b"})
    with pytest.raises(InputError, match="variable 'k' must be a positive integer, got 'many'"):
        check_variables(
            "textual_proxies", {"reference_caption": "a", "modification": "b", "target_caption": "c", "k": "many"}
        )
    assert (
        check_variables(
            "textual_proxies", {"reference_caption": "a", "modification": "b", "target_caption": "c", "k": "3"}
        )["k"]
        == 3
    )
    with pytest.raises(InputError, match="unknown LLM task 'summarise'; tasks: caption, target_caption"):
        task_spec("summarise")
