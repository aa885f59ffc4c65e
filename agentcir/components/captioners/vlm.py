"""``captioner=vlm``: captions through the injected (vision-)language model, task ``caption``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...framework.interfaces import Captioner
from ...registry import CAPTIONERS
from ..verifiers.answers import ReplyError


def one_line(reply: str) -> str:
    """A caption from a model reply: fences, quotes and a ``Caption:`` lead removed, one line."""
    text = reply.strip().strip("`").strip()
    for lead in ("caption:", "description:"):
        if text.lower().startswith(lead):
            text = text[len(lead):].strip()
    text = " ".join(text.split())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


@CAPTIONERS.register("vlm")
class VLMCaptioner(Captioner):
    """Asks the injected LLM (a VLM) for a one-sentence caption of the image.

    Calls ``llm.run_task("caption", {}, images=[image], prompt=cfg.prompt)``; offline LLM
    backends implement the ``caption`` task directly.

    Config:
        prompt: prompt file (name under ``recipes/prompts`` or a path); part of the identity.
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    @dataclass
    class Config:
        prompt: str = "captioner/caption"

    def caption(self, image: Path) -> str:
        reply = self.llm.run_task("caption", {}, images=[Path(image)], prompt=self.cfg.prompt)
        text = one_line(reply)
        if not text:
            raise ReplyError(f"captioner 'vlm': the model gave an empty caption for image '{image}' (reply {reply!r})")
        return text
