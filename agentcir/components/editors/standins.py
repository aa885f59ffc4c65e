"""Offline editors: ``editor=none`` (the image unchanged) and ``editor=recolour`` (a visible,
deterministic stand-in that only knows colours). Neither is an image editing model; they let a
method that edits images run end to end offline, and say what they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...framework.errors import InputError
from ...framework.images import load_rgb
from ...framework.interfaces import Editor
from ...registry import EDITORS
from ..generators.files import save_content_addressed


def _check(where: str, image: Path, instruction: str) -> Path:
    if not isinstance(instruction, str):
        raise InputError(f"{where}: the instruction must be a text, got {type(instruction).__name__}")
    path = Path(image)
    if not path.is_file():
        raise InputError(f"{where}: image '{image}' does not exist")
    return path


@EDITORS.register("none")
class NoEditor(Editor):
    """Returns the image unchanged (its own path). In recipes ``editor=none`` means the group is
    absent: methods take the editor as optional and use the reference where an edit would be."""

    @dataclass
    class Config:
        pass

    def edit(self, image: Path, instruction: str) -> Path:
        return _check("editor 'none'", image, instruction).resolve()


@EDITORS.register("recolour")
class RecolourEditor(Editor):
    """An offline stand-in: the image's foreground tinted to the last colour the instruction names
    (from the colour vocabulary, ``agentcir/data/vocab/colours.txt``, where PIL knows the colour);
    an instruction naming no known colour leaves the image unchanged. It shows the wiring of an
    edit (a new file, content-addressed, cached) and gives colour edits a visible effect; it does
    not change shapes, articles or anything else an instruction asks for.

    Config:
        background: pixels whose every channel is at least this bright are background (kept).
        output_dir: folder for the PNG files.
    """

    @dataclass
    class Config:
        background: int = 235
        output_dir: str = "runs/edited"

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if not 0 <= self.cfg.background <= 255:
            raise InputError(f"editor 'recolour': field 'background' must be within 0..255, got {self.cfg.background}")

    @staticmethod
    def target_colour(instruction: str) -> tuple[int, int, int] | None:
        """The RGB of the last colour ``instruction`` names that PIL knows, else ``None``."""
        from PIL import ImageColor

        from ...framework.vocab import load_vocab

        for _s, _e, name in reversed(load_vocab("colours").find(instruction)):
            for candidate in (name, name.split()[-1]):
                try:
                    return ImageColor.getrgb(candidate.replace(" ", ""))[:3]
                except ValueError:
                    continue
        return None

    def edit(self, image: Path, instruction: str) -> Path:
        import numpy as np

        path = _check("editor 'recolour'", image, instruction)
        rgb = self.target_colour(instruction)
        if rgb is None:
            return path.resolve()
        px = np.asarray(load_rgb(path), dtype=np.float32)
        fg = ~(px >= self.cfg.background).all(axis=-1)
        lum = (px @ np.array([0.299, 0.587, 0.114], np.float32)) / 255.0
        tinted = np.clip(lum[..., None] * np.array(rgb, np.float32) * 1.5, 0, 255)
        out = np.where(fg[..., None], tinted, px).astype(np.uint8)
        from PIL import Image

        return save_content_addressed(Image.fromarray(out), self.cfg.output_dir, what="editor 'recolour'")
