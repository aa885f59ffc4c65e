"""Offline, deterministic answers to refine_loop's tasks (no model): enough to run and test the
method anywhere. A real LLM (``llm=openai``) answers the same tasks from the prompt files.

Variables arrive as Python values from the ``rules`` LLM and as rendered text from the scripted
endpoint (a list as ``- item`` lines), so both are accepted.
"""

from __future__ import annotations

import re

COLOURS = ("red", "blue", "green", "yellow", "black", "white", "pink", "purple", "orange", "brown", "grey", "navy")
_COLOUR = re.compile(r"\b(" + "|".join(COLOURS) + r")\b", re.I)


def as_list(value) -> list[str]:
    """A list variable: a list as is, rendered text (``- a - b`` or one item a line) split."""
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [p.strip() for p in re.split(r"(?:^|\s)-\s+|\n", str(value or "")) if p.strip()]


def plan(v: dict) -> dict:
    """The reference caption with the requested colour swapped in (or the request appended)."""
    ref = str(v["reference_caption"]).strip().rstrip(".")
    mod = str(v["modification"]).strip().rstrip(".")
    want = _COLOUR.findall(mod)
    if want and _COLOUR.search(ref):
        description = _COLOUR.sub(want[-1].lower(), ref)
    else:
        description = f"{ref}, {mod}"
    keep = [w for w in ref.split() if w.lower() not in COLOURS and len(w) > 2]
    return {"description": description, "keep": keep}


_STOP = {"a", "an", "the", "of", "with", "and", "in", "on", "photo", "image", "picture"}


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", str(text).lower()) if w not in _STOP]


def critique(v: dict) -> dict:
    """Accept when the first candidate's caption has every word of the description; otherwise
    stress the missing words (repeated at the end of the description) for another round."""
    description = str(v["description"]).strip().rstrip(".")
    first = set(words((as_list(v["candidates"]) or [""])[0]))
    missing = [w for w in dict.fromkeys(words(description)) if w not in first]
    if not missing:
        return {"verdict": "accept", "description": description}
    return {"verdict": "revise", "description": f"{description}, {' '.join(missing)}"}
