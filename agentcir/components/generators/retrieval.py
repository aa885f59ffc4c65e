"""``generator=retrieval``: "retrieval-as-imagination", the offline visual proxy.

Instead of drawing the target, it returns the real gallery image nearest to the target
description by the injected encoder (text -> image cosine similarity). Honest and
limited: the proxy can only be as good as the nearest existing item.

It needs the gallery, which a method binds once per run::

    gen = generator.bind(state.gallery)          # a bound copy; its identity includes the gallery
    path = await ctx.call(gen, "generate", description=target_caption, reference=ref_path)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...framework.errors import InputError
from ...framework.hashing import stable_hash
from ...framework.interfaces import Generator
from ...registry import GENERATORS


@GENERATORS.register("retrieval")
class RetrievalGenerator(Generator):
    """The gallery item nearest to the description is the visual proxy.

    Config:
        exclude_reference: never return the reference image itself (matched by path).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder",)

    @dataclass
    class Config:
        exclude_reference: bool = True

    gallery: Any = None
    _rows_by_path: dict[str, int] | None = None

    def bind(self, gallery: Any) -> "RetrievalGenerator":
        """A copy of this generator that searches ``gallery`` (an opened
        :class:`~agentcir.framework.gallery.Gallery` indexed by the same encoder)."""
        enc = self.encoder.identity
        if getattr(gallery, "encoder_identity", enc) != enc:
            raise InputError(
                f"generator 'retrieval': gallery '{getattr(gallery, 'root', '?')}' was indexed by another "
                f"encoder (identity {gallery.encoder_identity}) than the generator's ({enc}); give both "
                f"the same encoder"
            )
        bound = copy.copy(self)
        bound.__dict__.pop("identity", None)  # recomputed with the gallery in it
        bound.gallery = gallery
        bound._rows_by_path = None
        return bound

    def model_identity(self) -> str:
        g = self.gallery
        if g is None:
            return "unbound"
        plan = getattr(g, "info", {}).get("plan")
        return stable_hash(plan if plan else [list(g.ids), list(g.paths)], n=24)

    def _reference_row(self, reference: Path | None) -> int:
        if reference is None:
            return -1
        if self._rows_by_path is None:
            self._rows_by_path = {str(Path(p).resolve()): i for i, p in enumerate(self.gallery.paths)}
        return self._rows_by_path.get(str(Path(reference).resolve()), -1)

    def nearest(self, description: str, *, reference: Path | None = None) -> tuple[int, float]:
        """Gallery row nearest to ``description`` and its cosine similarity."""
        if self.gallery is None:
            raise InputError(
                "generator 'retrieval' needs the gallery: call generator.bind(gallery) first "
                "(methods do this once per run)"
            )
        if not isinstance(description, str) or not description.strip():
            raise InputError(f"generator 'retrieval': the description must be a non-empty text, got {description!r}")
        q = self.encoder.encode_texts([description], progress=False)[0]
        scores = np.asarray(self.gallery.image_emb, np.float32) @ q
        if self.cfg.exclude_reference:
            row = self._reference_row(reference)
            if row >= 0:
                scores[row] = -np.inf
        best = int(np.argmax(scores))
        if not np.isfinite(scores[best]):
            raise InputError("generator 'retrieval': the gallery holds no item but the reference")
        return best, float(scores[best])

    def generate(self, description: str, *, reference: Path | None = None) -> Path:
        """Path of the gallery image nearest to ``description`` (never the reference)."""
        row, _ = self.nearest(description, reference=reference)
        return Path(self.gallery.paths[row])
