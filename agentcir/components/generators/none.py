"""``generator=none``: no visual proxy (methods then use the text path alone)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...framework.interfaces import Generator
from ...registry import GENERATORS


@GENERATORS.register("none")
class NoGenerator(Generator):
    """Returns ``None`` for every description: the method runs without a visual proxy."""

    @dataclass
    class Config:
        pass

    def generate(self, description: str, *, reference: Path | None = None) -> None:
        return None
