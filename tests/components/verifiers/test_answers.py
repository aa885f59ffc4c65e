"""Strict yes/no and true/false parsing (agentcir/components/verifiers/answers.py)."""

import logging

import pytest

from agentcir.components.verifiers.answers import UnclearAnswerError, check_policy, decide, parse_bool
from agentcir.framework.errors import InputError

YES = [
    "yes", "Yes", "YES.", "Yes, the colour is now blue.", "yes - it matches", "**Yes**", "`yes`", "'Yes'",
    "True", "true.", "TRUE, the shirt is striped", "Correct.", "Yep", "Y", "y.", "t",
    "Answer: yes", "Final answer: True", "The answer is yes.", "After comparing both images, the answer is: yes",
    "Looking at both images carefully, yes.", '{"answer": "yes"}', '{"answer": true}', '```json\n{"answer": true}\n```',
    '{"result": "True"}', "> yes", "- yes", "(yes)", "\n\n  Yes\n", True,
]
NO = [
    "no", "No", "NO.", "No, the sleeves are long.", "No - it is red", "**No**", "False", "false, it is plain",
    "Incorrect.", "Nope", "N", "n.", "f", "Answer: no", "The answer is no.", "verdict: false",
    "Comparing the two images, no.", '{"answer": "no"}', '{"answer": false}', '{"answer": "False"}',
    '{"verdict": "No, different colour"}', False,
]
UNCLEAR = [
    "", "   ", "maybe", "I don't know", "I do not know.", "Not sure", "not", "Nothing to compare",
    "None of the above", "The shirt has no stripes", "There is not a single stripe",
    "It is known", "Noted, the image is blurry", "Yesterday's photo", "Notably blue", "nobody knows",
    "The answer is yes, no wait the answer is no", "N/A", '{"answer": "perhaps"}', '{"foo": true}',
    "{not json", "knows", "no-one can tell",
]


@pytest.mark.parametrize("reply", YES, ids=repr)
def test_yes(reply):
    assert parse_bool(reply) is True


@pytest.mark.parametrize("reply", NO, ids=repr)
def test_no(reply):
    assert parse_bool(reply) is False


@pytest.mark.parametrize("reply", UNCLEAR, ids=repr)
def test_unclear_replies_raise(reply):
    with pytest.raises(UnclearAnswerError, match="cannot read a yes/no or true/false answer"):
        parse_bool(reply)


def test_not_and_know_are_never_no():
    # the released XR code found "no" by substring; these must not read as no
    for reply in ("not", "know", "I know it is", "Notice the colour", "cannot", "Nonetheless, yes"):
        try:
            assert parse_bool(reply) is True
        except UnclearAnswerError:
            pass


def test_string_false_is_false_not_truthy():
    assert parse_bool("False") is False and parse_bool('{"answer": "False"}') is False


def test_error_message_quotes_the_reply_and_names_it():
    with pytest.raises(UnclearAnswerError) as e:
        parse_bool("Perhaps, hard to say", what="verifier 'vlm': verify reply")
    assert str(e.value) == ("verifier 'vlm': verify reply: cannot read a yes/no or true/false answer "
                            "from the reply 'Perhaps, hard to say'")


def test_long_reply_is_shortened_in_the_message():
    with pytest.raises(UnclearAnswerError) as e:
        parse_bool("hmm " * 100)
    assert str(e.value).endswith("...'") and len(str(e.value)) < 220


def test_non_text_reply():
    with pytest.raises(UnclearAnswerError, match="expected a text reply, got int 1"):
        parse_bool(1)


def test_decide_policies(caplog):
    assert decide("No.", "error", what="x") is False
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        assert decide("maybe", "no", what="x") is False
        assert decide("maybe", "yes", what="x") is True
    assert "counted as no" in caplog.text and "counted as yes" in caplog.text
    with pytest.raises(UnclearAnswerError):
        decide("maybe", "error", what="x")


def test_bad_policy_names_the_field():
    with pytest.raises(InputError, match=r"verifier 'vlm': field 'unclear' must be one of no, yes, error, got 'sometimes'"):
        check_policy("sometimes", "verifier 'vlm'")
