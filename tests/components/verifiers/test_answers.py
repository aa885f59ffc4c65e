"""How the LLM verifiers read answers: strictly (the shared parser of
agentcir/framework/parsing.py, tested in depth in tests/components/llms/test_parsing.py)
under the verifier's ``unclear`` policy (agentcir/components/verifiers/answers.py)."""

import logging

import pytest

from agentcir.framework.parsing import ReplyParseError
from agentcir.components.verifiers.answers import check_policy, decide
from agentcir.framework.errors import InputError

YES = [
    "yes",
    "Yes.",
    "Yes, the colour is now blue.",
    "**Yes**",
    "True",
    "true, it is striped",
    "Answer: yes",
    '{"answer": "yes"}',
    '{"answer": true}',
    True,
]
NO = [
    "no",
    "No.",
    "No, the sleeves are long.",
    "No - it is red",
    "**No**",
    "False",
    "false, it is plain",
    "Answer: no",
    '{"answer": false}',
    '{"answer": "False"}',
    False,
]
UNCLEAR = [
    "",
    "maybe",
    "I don't know",
    "I do not know.",
    "Not sure",
    "not",
    "Nothing to compare",
    "None of them",
    "The shirt has no stripes",
    "knows",
    "Notably blue",
]


@pytest.mark.parametrize("reply", YES, ids=repr)
def test_yes(reply):
    assert decide(reply, "error", what="yes/no answer") is True


@pytest.mark.parametrize("reply", NO, ids=repr)
def test_no(reply):
    assert decide(reply, "error", what="yes/no answer") is False


@pytest.mark.parametrize("reply", UNCLEAR, ids=repr)
def test_not_and_know_are_never_no(reply):
    # the released XR code found "no" by substring ("not", "know"): here they are unclear,
    # so under the "yes" policy they count as yes, never as a parsed no
    with pytest.raises(ReplyParseError, match="could not read a yes/no answer"):
        decide(reply, "error", what="yes/no answer")
    assert decide(reply, "yes", what="yes/no answer") is True


def test_string_false_is_false():
    assert decide("False", "yes", what="true/false answer") is False


def test_policies_log_what_they_count(caplog):
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        assert decide("maybe", "no", what="yes/no answer of verifier 'vlm'") is False
        assert decide("maybe", "yes", what="yes/no answer of verifier 'vlm'") is True
    assert "verifier 'vlm'" in caplog.text and "counted as no" in caplog.text and "counted as yes" in caplog.text


def test_bad_policy_names_the_field():
    with pytest.raises(
        InputError, match=r"verifier 'vlm': field 'unclear' must be one of no, yes, error, got 'sometimes'"
    ):
        check_policy("sometimes", "verifier 'vlm'")
