"""``detector=vlm``: object listing by the injected VLM, task ``list_objects`` (as OCTOPUS
lists the objects of the reference before filtering them against the modification)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...framework.interfaces import Detector
from ...registry import DETECTORS
from ..verifiers.answers import ReplyError

_FENCE = re.compile(r"```(?:json|python)?\s*(.*?)```", re.S | re.I)
#: a plain-text list item longer than this is prose, not an object label
MAX_WORDS = 5
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")


def _load(text: str) -> Any:
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
    return None


def parse_objects(reply: str) -> list[str]:
    """Object labels from a ``list_objects`` reply.

    Accepts ``{"objects": [...]}`` (fenced or with text around it, single-quoted too), a
    bare JSON list, or a plain bulleted / comma-separated list of short phrases. Labels are lower-cased,
    stripped of articles and punctuation, and de-duplicated in order.

    Raises:
        ReplyError: nothing list-like in the reply (the message quotes it).
    """
    text = reply.strip()
    m = _FENCE.search(text)
    candidates = [m.group(1)] if m else []
    for open_, close in (("{", "}"), ("[", "]")):
        a, b = text.find(open_), text.rfind(close)
        if 0 <= a < b:
            candidates.append(text[a:b + 1])
    items: list | None = None
    for cand in candidates:
        obj = _load(cand.strip())
        if isinstance(obj, dict):
            obj = next((obj[k] for k in ("objects", "labels", "items") if isinstance(obj.get(k), list)), None)
        if isinstance(obj, list):
            items = obj
            break
    if items is None and text and not text.startswith(("{", "[")):
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) > 1:
            items = [_BULLET.sub("", ln) for ln in lines if not ln.rstrip().endswith(":")]
        else:
            items = re.split(r",|;|\band\b", text.split(":", 1)[-1])
        if any(len(str(it).split()) > MAX_WORDS for it in items):
            items = None  # prose, not a list
    if items is None:
        raise ReplyError(f"detector 'vlm': cannot read a list of objects from the reply {text[:160]!r}")
    out: list[str] = []
    for it in items:
        if isinstance(it, dict):
            it = it.get("label") or it.get("name") or it.get("object")
        if not isinstance(it, str):
            continue
        label = re.sub(r"^(?:a|an|the|some)\s+", "", " ".join(it.lower().strip(" .\"'`*").split()))
        if label and label not in out:
            out.append(label)
    return out


@DETECTORS.register("vlm")
class VLMDetector(Detector):
    """Lists the objects of an image with the injected VLM.

    Calls ``llm.run_task("list_objects", {}, images=[image], prompt=cfg.prompt, json_mode=True)``
    and parses ``{"objects": [...]}``. A VLM gives no confidence or box: each object gets
    ``score`` 1.0 and ``box`` None.

    Config:
        prompt: prompt file (name under ``recipes/prompts`` or a path); part of the identity.
        max_objects: keep at most this many objects (0: all).
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    @dataclass
    class Config:
        prompt: str = "detector/list_objects"
        max_objects: int = 0

    def detect(self, image: Path) -> list[dict]:
        reply = self.llm.run_task("list_objects", {}, images=[Path(image)], prompt=self.cfg.prompt, json_mode=True)
        labels = parse_objects(reply)
        if self.cfg.max_objects > 0:
            labels = labels[:self.cfg.max_objects]
        return [{"label": lb, "score": 1.0, "box": None} for lb in labels]
