"""How the LLM verifiers read yes/no and true/false replies.

Parsing is strict and shared with every LLM caller
(:func:`agentcir.framework.parsing.parse_bool_reply`): the answer is the reply's
first word (after markdown, quotes and an ``Answer:`` label), a JSON ``{"answer": ...}``,
or a closing ``Answer: <yes|no>``; ``"No, ..."`` is no, ``"not"``/``"know"``/``"Nothing"``
are never no, and no string is turned into a bool with ``bool()``. What a verifier does
with a reply that states no answer is its ``unclear`` setting: count it as ``no`` or
``yes`` (logged), or raise (``error``).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from ...framework.errors import InputError
from ...framework.parsing import ReplyParseError, parse_bool_reply
from ...registry import Choice

log = logging.getLogger(__name__)


class Unclear(Choice):
    """What a verifier does with an unclear reply (config field ``unclear``): count it as
    ``no`` or ``yes``, or raise (``error``)."""

    no = "no"
    yes = "yes"
    error = "error"


#: the answer an unclear reply counts as, per policy (``None``: an error)
UNCLEAR_POLICIES = {Unclear.no: False, Unclear.yes: True, Unclear.error: None}


def check_policy(policy: str, where: str) -> str:
    """``policy`` if it is one of :data:`UNCLEAR_POLICIES`, else an error naming the field."""
    if policy not in UNCLEAR_POLICIES:
        raise InputError(f"{where}: field 'unclear' must be one of {', '.join(UNCLEAR_POLICIES)}, got {policy!r}")
    return policy


def ask(run: Callable[[], Any], policy: str, *, what: str) -> bool:
    """Run ``run()`` (an LLM call) and read its reply strictly as yes/no (true/false).

    A reply that states no answer, whether the backend raised
    :class:`~agentcir.framework.parsing.ReplyParseError` itself (prompted backends ask
    again first) or returned it, counts as ``policy`` says: ``no`` / ``yes`` (logged with
    ``what``), or ``error`` (raise).
    """
    try:
        return parse_bool_reply(run(), what=what)
    except ReplyParseError as e:
        return _unclear(e, policy)


def _unclear(e: ReplyParseError, policy: str) -> bool:
    default = UNCLEAR_POLICIES[policy]
    if default is None:
        raise e
    log.warning("%s; counted as %s (unclear='%s')", e, "yes" if default else "no", policy)
    return default


async def aask(run: Callable[[], Awaitable[Any]], policy: str, *, what: str) -> bool:
    """:func:`ask` of an async LLM call."""
    try:
        reply = await run()
    except ReplyParseError as e:
        return _unclear(e, policy)
    return decide(reply, policy, what=what)


def decide(reply: Any, policy: str, *, what: str) -> bool:
    """:func:`ask` for a reply already in hand."""
    return ask(lambda: reply, policy, what=what)
