"""Reading model replies: tolerant JSON extraction and strict yes/no, true/false answers.

Used by every LLM backend, by the vision components and by the methods:

- :func:`extract_json` finds the JSON in a reply: a fenced `````json`` block, the whole
  reply, or the first balanced ``{...}`` / ``[...]`` inside surrounding text; it repairs
  single-quoted strings, trailing commas, comments and Python literals (``True``,
  ``False``, ``None``). When nothing parses it raises :class:`ReplyParseError` naming
  what it tried and quoting the reply.
- :func:`parse_yes_no` / :func:`parse_true_false` read the answer from the reply's
  *first word* only (after markdown, quotes and an ``Answer:`` label), so
  ``"No, the colour differs"`` is no, while ``"not"``, ``"know"`` or ``"Nothing"`` are
  never read as no; a reply that states no answer raises (or returns ``default``).
  Strings are never turned into booleans with ``bool()``.
- :func:`parse_task_reply` returns the value the task table promises
  (:mod:`agentcir.framework.tasks`), checking field names and types.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .errors import AgentcirError
from .tasks import task_spec


class ReplyParseError(AgentcirError, ValueError):
    """A model reply does not hold what the caller asked for (the message quotes it)."""


def _snippet(text: str, n: int = 160) -> str:
    t = " ".join(str(text).split())
    return repr(t if len(t) <= n else t[:n] + "...")


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)


def strip_reasoning(text: str) -> str:
    """Remove ``<think>...</think>`` blocks that reasoning models put before the answer."""
    return _THINK.sub("", str(text)).strip()


# -- JSON ---------------------------------------------------------------------------------
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)(?:```|$)", re.S)
_LITERALS = {
    "true": "true",
    "True": "true",
    "TRUE": "true",
    "false": "false",
    "False": "false",
    "FALSE": "false",
    "null": "null",
    "None": "null",
    "none": "null",
    "NULL": "null",
}


def _balanced(text: str, start: int) -> str | None:
    """The bracketed segment opening at ``text[start]`` (quotes respected), or None if unclosed."""
    pairs = {"{": "}", "[": "]"}
    stack = [pairs[text[start]]]
    quote = None
    i = start + 1
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            # an apostrophe inside a word ("it's") is not a quote
            if not (c == "'" and text[i - 1].isalnum() and i + 1 < len(text) and text[i + 1].isalnum()):
                quote = c
        elif c in pairs:
            stack.append(pairs[c])
        elif c in "}]":
            if c != stack[-1]:
                return None
            stack.pop()
            if not stack:
                return text[start : i + 1]
        i += 1
    return None


def _repair(src: str) -> str:
    """JSON-ish (single quotes, trailing commas, comments, Python literals) -> strict JSON text."""
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j, buf = i + 1, []
            while j < n and src[j] != c:
                d = src[j]
                if d == "\\" and j + 1 < n:
                    nxt = src[j + 1]
                    buf.append("'" if nxt == "'" else src[j : j + 2])
                    j += 2
                    continue
                buf.append('\\"' if d == '"' else "\\n" if d == "\n" else "\\t" if d == "\t" else d)
                j += 1
            out.append('"' + "".join(buf) + '"')
            i = j + 1
            continue
        if c == "/" and src.startswith("//", i) or c == "#":
            while i < n and src[i] != "\n":
                i += 1
            continue
        if c == "/" and src.startswith("/*", i):
            end = src.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if c.isalpha() or c == "_":
            j = i
            while j < n and (src[j].isalnum() or src[j] == "_"):
                j += 1
            word = src[i:j]
            out.append(_LITERALS.get(word, word))
            i = j
            continue
        if c == ",":
            j = i + 1
            while j < n and src[j] in " \t\r\n":
                j += 1
            if j < n and src[j] in "}]":
                i += 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def _candidates(text: str) -> list[str]:
    cands: list[str] = []
    for m in _FENCE.finditer(text):
        body = m.group(2).strip()
        if body:
            cands.append(body)
    cands.append(text.strip())
    seen = 0
    for i, c in enumerate(text):
        if c in "{[" and seen < 8:
            seg = _balanced(text, i)
            if seg is not None:
                cands.append(seg)
                seen += 1
    return list(dict.fromkeys(c for c in cands if c))


def extract_json(text: str, *, expect: type | tuple[type, ...] = (dict, list), what: str = "model reply") -> Any:
    """The JSON value in a model reply.

    Tries, in order: fenced code blocks, the whole reply, then balanced ``{...}`` /
    ``[...]`` segments; each as strict JSON, then repaired (single quotes, trailing
    commas, comments, ``True``/``False``/``None``). The first value of type ``expect``
    wins.

    Raises:
        ReplyParseError: nothing parses as ``expect``; the message names ``what``,
            the reason and quotes the reply.
    """
    if not isinstance(text, str):
        raise ReplyParseError(f"{what}: expected text, got {type(text).__name__}")
    body = strip_reasoning(text)
    first_error = None
    wrong_type = None
    for cand in _candidates(body):
        for attempt in (cand, _repair(cand)):
            try:
                value = json.loads(attempt)
            except json.JSONDecodeError as e:
                if first_error is None and cand[:1] in "{[":
                    first_error = f"{e.msg}, line {e.lineno} column {e.colno}, in {_snippet(cand, 80)}"
                continue
            if isinstance(value, expect):
                return value
            wrong_type = wrong_type or type(value).__name__
            break
    names = " or ".join(t.__name__ for t in (expect if isinstance(expect, tuple) else (expect,)))
    if not body:
        reason = "the reply is empty"
    elif wrong_type:
        reason = f"found JSON of type {wrong_type}, expected {names}"
    elif first_error:
        reason = f"the JSON is malformed ({first_error})"
    else:
        reason = "no JSON object or array found"
    raise ReplyParseError(f"could not parse JSON from the {what}: {reason}; reply: {_snippet(text)}")


# -- yes / no, true / false ---------------------------------------------------------------
_LEAD = re.compile(r"^[\s*_#>`\"'(\[\-–•:.]+")
_LABEL = re.compile(
    r"^(?:final\s+)?(?:answer|response|verdict|output|result|judg(?:e)?ment)\s*(?:is)?\s*[:=\-]\s*", re.I
)
_WORD = re.compile(r"[A-Za-z]+")
_ANSWER_ANYWHERE = re.compile(
    r"\b(?:final\s+answer|answer|verdict)\s*(?:is)?\s*[:=\-]?\s*[*_\"'`]*\s*(yes|no|true|false)\b", re.I
)
_POS = {"yes": True, "true": True}
_NEG = {"no": False, "false": False}
_ANSWER_KEYS = ("answer", "verdict", "result", "output", "response", "label", "judgement", "judgment")
_UNSET = object()


def _leading_answer(text: str) -> bool | None:
    t = text
    for _ in range(3):
        t = _LEAD.sub("", t)
        t2 = _LABEL.sub("", t)
        if t2 == t:
            break
        t = t2
    m = _WORD.match(t)
    if m is None:
        return None
    word = m.group(0).lower()
    return _POS.get(word, _NEG.get(word))


def _json_answer(text: str) -> bool | None:
    if "{" not in text:
        return None
    try:
        obj = extract_json(text, expect=dict)
    except ReplyParseError:
        return None
    for k, v in obj.items():
        if str(k).lower() in _ANSWER_KEYS:
            if isinstance(v, bool):
                return v
            if isinstance(v, str):
                return _leading_answer(v)
    return None


def parse_bool_reply(text: Any, *, what: str = "yes/no answer", default: Any = _UNSET) -> bool:
    """A yes/no or true/false reply -> bool, read strictly from its first word.

    Accepted: a bool; a reply whose first word (after markdown, quotes and a label such as
    ``Answer:``) is yes/true or no/false; a JSON object with an ``answer`` field; a
    reasoning text that ends in ``Answer: <yes|no>``. Anything else raises
    :class:`ReplyParseError` unless ``default`` is given.
    """
    if isinstance(text, bool):
        return text
    if not isinstance(text, str):
        if default is not _UNSET:
            return default
        raise ReplyParseError(f"could not read a {what} from a {type(text).__name__}: {text!r}")
    body = strip_reasoning(text)
    ans = _leading_answer(body)
    if ans is None:
        ans = _json_answer(body)
    if ans is None:
        found = _ANSWER_ANYWHERE.findall(body)
        if found:
            word = found[-1].lower()
            ans = _POS.get(word, _NEG.get(word))
    if ans is None:
        if default is not _UNSET:
            return default
        raise ReplyParseError(
            f"could not read a {what} from the reply: it does not start with "
            f"yes/no or true/false; reply: {_snippet(text)}"
        )
    return ans


def parse_yes_no(text: Any, *, default: Any = _UNSET) -> bool:
    """``"Yes."`` -> True, ``"No, it is red"`` -> False; ``"Not sure"`` raises (see :func:`parse_bool_reply`)."""
    return parse_bool_reply(text, what="yes/no answer", default=default)


def parse_true_false(text: Any, *, default: Any = _UNSET) -> bool:
    """``"True"`` -> True, ``"false."`` -> False (never ``bool("False")``); see :func:`parse_bool_reply`."""
    return parse_bool_reply(text, what="true/false answer", default=default)


# -- task replies -------------------------------------------------------------------------
def clean_caption(text: Any) -> str:
    """A caption reply -> one clean sentence (reasoning, labels, quotes and extra lines removed)."""
    if not isinstance(text, str):
        raise ReplyParseError(f"expected a caption as text, got {type(text).__name__}")
    body = strip_reasoning(text)
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if not lines:
        raise ReplyParseError(f"the caption reply is empty; reply: {_snippet(text)}")
    line = re.sub(r"^(?:caption|description)\s*[:\-]\s*", "", lines[0], flags=re.I).strip()
    line = line.strip("*_`\"' ")
    if not line:
        raise ReplyParseError(f"the caption reply is empty; reply: {_snippet(text)}")
    return line


def _as_str(value: Any, where: str) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ReplyParseError(f"{where} must be a string, got {type(value).__name__}: {_snippet(json.dumps(value))}")
    s = str(value).strip()
    if not s:
        raise ReplyParseError(f"{where} is empty")
    return s


def _as_str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise ReplyParseError(f"{where} must be a list of strings, got {type(value).__name__}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, dict) and len(v) == 1:
            v = next(iter(v.values()))
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ReplyParseError(f"{where}[{i}] must be a string, got {type(v).__name__}: {_snippet(json.dumps(v))}")
        s = str(v).strip()
        if s:
            out.append(s)
    return out


def _as_questions(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ReplyParseError(
            f'{where} must be a list of {{"statement", "answer"}} objects, got {type(value).__name__}'
        )
    out = []
    for i, q in enumerate(value):
        if not isinstance(q, dict):
            raise ReplyParseError(
                f"{where}[{i}] must be an object with 'statement' and 'answer', got {_snippet(json.dumps(q))}"
            )
        low = {str(k).lower(): v for k, v in q.items()}
        stmt = low.get("statement", low.get("question", low.get("text")))
        if "answer" not in low:
            raise ReplyParseError(f"{where}[{i}] has no 'answer': {_snippet(json.dumps(q))}")
        ans = low["answer"]
        if isinstance(ans, int) and not isinstance(ans, bool) and ans in (0, 1):
            ans = bool(ans)
        ans = parse_true_false(ans, default=None) if isinstance(ans, (bool, str)) else None
        if ans is None:
            raise ReplyParseError(f"{where}[{i}].answer must be true or false, got {low['answer']!r}")
        out.append({"statement": _as_str(stmt, f"{where}[{i}].statement"), "answer": ans})
    return out


_CONVERT = {"str": _as_str, "list[str]": _as_str_list, "questions": _as_questions}


def parse_task_reply(task: str, text: Any, variables: Mapping[str, Any] | None = None) -> Any:
    """The reply to ``task`` as the task table promises.

    Returns a ``str`` (``caption``), a ``bool`` (``verify``, ``answer``, ``entail``) or,
    for JSON tasks, a dict holding every field of the task (e.g. ``{"target_caption": str,
    "modifications": [str]}``). A bare list or string is accepted for one-field tasks.
    Lists are cut to the task's ``k``/``n`` when ``variables`` give it.

    Raises:
        ReplyParseError: the reply lacks the JSON, a required field, or has a wrong type.
    """
    spec = task_spec(task)
    if spec.parser is not None:  # a plugin task with its own reader
        return spec.parser(text, dict(variables or {}))
    if spec.reply == "text":
        return clean_caption(text)
    if spec.reply == "yes_no":
        return parse_yes_no(text)
    if spec.reply == "true_false":
        return parse_true_false(text)
    what = f"reply to LLM task '{task}'"
    data = text if isinstance(text, (dict, list)) else extract_json(text, what=what)
    names = [f for f, _ in spec.fields]
    if not isinstance(data, dict):
        if len(names) != 1:
            raise ReplyParseError(f"{what} must be a JSON object with {', '.join(names)}; got a {type(data).__name__}")
        data = {names[0]: data}
    low = {str(k).lower(): v for k, v in data.items()}
    if len(names) == 1 and names[0] not in low and len(low) == 1:
        low = {names[0]: next(iter(low.values()))}  # one-field task answered under another key
    if names[0] not in low:
        raise ReplyParseError(
            f"{what} lacks the field '{names[0]}' (has: {', '.join(map(str, data)) or 'none'}); "
            f"reply: {_snippet(json.dumps(data))}"
        )
    out: dict[str, Any] = {}
    for name, typ in spec.fields:
        if name in low or typ != "str":
            out[name] = _CONVERT[typ](low.get(name), f"{what}: field {name}")
        else:
            out[name] = ""  # an optional text field the reply left out
    limit = None
    if spec.count and variables and variables.get(spec.count) is not None:
        try:
            limit = int(variables[spec.count])
        except (TypeError, ValueError):
            limit = None
    if limit is not None:
        for name, typ in spec.fields:
            if typ != "str":
                out[name] = out[name][:limit]
    return out
