"""``detector=vlm``: object listing by the injected VLM, task ``list_objects`` (as OCTOPUS
lists the objects of the reference before filtering them against the modification)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...framework.interfaces import Detector
from ...registry import DETECTORS
from ...framework.parsing import parse_task_reply

_ARTICLE = re.compile(r"^(?:a|an|the|some)\s+")


def normalize_labels(labels: list[str]) -> list[str]:
    """Lower-case, strip articles and punctuation, drop duplicates (order kept)."""
    out: list[str] = []
    for it in labels:
        label = _ARTICLE.sub("", " ".join(str(it).lower().strip(" .,;:\"'`*").split()))
        if label and label not in out:
            out.append(label)
    return out


@DETECTORS.register("vlm")
class VLMDetector(Detector):
    """Lists the objects of an image with the injected VLM.

    Calls ``llm.run_task("list_objects", {}, images=[image], prompt=cfg.prompt, json_mode=True)``
    and reads ``{"objects": [...]}`` with the shared task-reply parser (fenced or surrounded
    JSON, single quotes, a bare list; ``ReplyParseError`` quoting the reply otherwise). A VLM
    gives no confidence or box: each object gets ``score`` 1.0 and ``box`` None. The offline
    ``rules`` LLM cannot see: offline, use ``detector=crop_tagger``.

    Config:
        prompt: prompt file (name under ``recipes/prompts`` or a path); part of the identity.
        max_objects: keep at most this many objects (0: all).
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("images", "task:list_objects")}
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    @dataclass
    class Config:
        prompt: str = "tasks/list_objects"
        max_objects: int = 0

    def detect(self, image: Path) -> list[dict]:
        return self._objects(
            self.llm.run_task("list_objects", {}, images=[Path(image)], prompt=self.cfg.prompt, json_mode=True)
        )

    async def adetect(self, image: Path) -> list[dict]:
        """:meth:`detect` awaiting the LLM (no thread held while the endpoint answers)."""
        return self._objects(
            await self.llm.arun_task("list_objects", {}, images=[Path(image)], prompt=self.cfg.prompt, json_mode=True)
        )

    def _objects(self, reply: str) -> list[dict]:
        labels = normalize_labels(parse_task_reply("list_objects", reply)["objects"])
        if self.cfg.max_objects > 0:
            labels = labels[: self.cfg.max_objects]
        return [{"label": lb, "score": 1.0, "box": None} for lb in labels]
