"""``captioner=vlm``: captions through the injected (vision-)language model, task ``caption``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...framework.interfaces import Captioner
from ...registry import CAPTIONERS
from ...framework.parsing import clean_caption


@CAPTIONERS.register("vlm")
class VLMCaptioner(Captioner):
    """Asks the injected LLM (a VLM) for a one-sentence caption of the image.

    Calls ``llm.run_task("caption", {}, images=[image], prompt=cfg.prompt)`` (``acaption``:
    ``llm.arun_task``, which the runner prefers) and keeps the
    reply's first line, cleaned (:func:`~agentcir.framework.parsing.clean_caption`). The
    offline ``rules`` LLM cannot see (it raises ``NeedsVisionError``): offline, use
    ``captioner=tagger``.

    Config:
        prompt: prompt file (name under ``recipes/prompts`` or a path); part of the identity.
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("images", "task:caption")}
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    @dataclass
    class Config:
        prompt: str = "tasks/caption"

    def caption(self, image: Path) -> str:
        """One-sentence caption of ``image``; an empty reply raises ``ReplyParseError``."""
        return clean_caption(self.llm.run_task("caption", {}, images=[Path(image)], prompt=self.cfg.prompt))

    async def acaption(self, image: Path) -> str:
        """:meth:`caption` awaiting the LLM (no thread held while the endpoint answers)."""
        return clean_caption(await self.llm.arun_task("caption", {}, images=[Path(image)], prompt=self.cfg.prompt))
