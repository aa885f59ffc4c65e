"""Strict parsing of yes/no and true/false replies from (vision-)language models.

A reply is read from its *first word*: ``"No, the sleeves are long."`` is no,
``"Yes."`` is yes, ``"**False** - the shirt is red"`` is false. Words that merely
contain the letters (``not``, ``know``, ``nothing``, ``none``, ``yesterday``) are never
answers. When the first word decides nothing, an explicit ``answer is X`` /
``answer: X`` decides, and else the *last* word (``"Looking at both images, yes."``).
Answer words elsewhere never decide: ``"The shirt has no stripes"`` is unclear (the
"no" is not an answer), and so is ``"I don't know"``. JSON replies
(``{"answer": false}``, ``{"answer": "yes"}``) and Python booleans are read by value,
never by ``bool(str)`` (``bool("False")`` is true: the bug of a released CIR code base).

Anything else raises :class:`UnclearAnswerError`, whose message quotes the reply.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from ...framework.errors import AgentcirError, InputError

log = logging.getLogger("agentcir")

#: answer words (lower case) -> value
YES_WORDS = frozenset({"yes", "yeah", "yep", "true", "correct"})
NO_WORDS = frozenset({"no", "nope", "false", "incorrect"})
#: one-letter replies, accepted only as the whole reply ("Y", "n.")
_LETTERS = {"y": True, "n": False, "t": True, "f": False}
_JSON_KEYS = ("answer", "result", "verdict", "value", "match", "label")
_WORD = re.compile(r"[a-z]+(?:['-][a-z]+)*")  # "no-one", "don't" are single words
_LEAD = re.compile(r"^(?:answer|final answer|verdict|result|output|response)\s*[:=\-]\s*", re.I)
_STATED = re.compile(r"\b(?:answer|verdict)\b\W{0,3}(?:is\W{0,3})?(yes|no|true|false)\b", re.I)


class ReplyError(AgentcirError):
    """A model reply that cannot be used (empty, unparseable); the message quotes it."""


class UnclearAnswerError(ReplyError):
    """A model reply that is neither a clear yes/true nor a clear no/false."""


def _word_value(word: str) -> bool | None:
    if word in YES_WORDS:
        return True
    if word in NO_WORDS:
        return False
    return None


_NOT_JSON = object()


def _from_json(text: str) -> Any:
    """The answer of a JSON object reply (``None``: unclear), or ``_NOT_JSON``."""
    s = text.strip()
    if s.startswith("```"):
        s = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", s)
    if not s.startswith("{"):
        return _NOT_JSON
    try:
        obj = json.loads(s)
    except json.JSONDecodeError:
        return _NOT_JSON
    if not isinstance(obj, dict):
        return _NOT_JSON
    for key in _JSON_KEYS:
        if key in obj:
            val = obj[key]
            if isinstance(val, bool):
                return val
            if isinstance(val, str):
                return _from_text(val)
    return None


def _from_text(text: str) -> bool | None:
    s = _LEAD.sub("", text.strip().lstrip("*_`\"'([ \t\n>#-").strip())
    words = _WORD.findall(s.lower())
    if not words:
        return None
    if len(words) == 1 and words[0] in _LETTERS:
        return _LETTERS[words[0]]
    first = _word_value(words[0])
    if first is not None:
        return first
    stated = {_word_value(m.lower()) for m in _STATED.findall(s)}
    if stated:
        return stated.pop() if len(stated) == 1 else None
    return _word_value(words[-1])


def parse_bool(reply: Any, *, what: str = "answer") -> bool:
    """Parse a yes/no or true/false reply strictly.

    Args:
        reply: the model's reply (text, JSON text, or a bool).
        what: names the reply in the error message (e.g. ``"verify reply"``).

    Returns:
        ``True`` for yes/true, ``False`` for no/false.

    Raises:
        UnclearAnswerError: the reply is empty, says both, or says neither.
    """
    if isinstance(reply, bool):
        return reply
    if not isinstance(reply, str):
        raise UnclearAnswerError(f"{what}: expected a text reply, got {type(reply).__name__} {reply!r}")
    value = _from_json(reply)
    if value is _NOT_JSON:
        value = _from_text(reply)
    if value is None:
        shown = reply.strip().replace("\n", " ")
        shown = shown[:120] + ("..." if len(shown) > 120 else "")
        raise UnclearAnswerError(f"{what}: cannot read a yes/no or true/false answer from the reply {shown!r}")
    return value


#: what a verifier does with an unclear reply (config field ``unclear``)
UNCLEAR_POLICIES = {"no": False, "yes": True, "error": None}


def check_policy(policy: str, where: str) -> str:
    if policy not in UNCLEAR_POLICIES:
        raise InputError(f"{where}: field 'unclear' must be one of {', '.join(UNCLEAR_POLICIES)}, got {policy!r}")
    return policy


def decide(reply: Any, policy: str, *, what: str) -> bool:
    """:func:`parse_bool` under an unclear-reply policy: ``no`` / ``yes`` (logged) or ``error``."""
    try:
        return parse_bool(reply, what=what)
    except UnclearAnswerError as e:
        default = UNCLEAR_POLICIES[policy]
        if default is None:
            raise
        log.warning("%s; counted as %s (unclear='%s')", e, "yes" if default else "no", policy)
        return default
