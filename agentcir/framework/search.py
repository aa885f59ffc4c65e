"""One query at a time against an indexed gallery, with a recipe's method.

Used by ``agentcir search`` and by the web page (``agentcir serve``). The method runs
through the same runner as a benchmark run (no run directory): every model call goes
through the call cache, and gallery captions are computed once and stored in the gallery.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache import open_call_cache
from .errors import InputError
from .gallery import Gallery
from .images import load_rgb
from .method import RunState
from .recipe import ComponentPool
from .runner import RunContext, Runner, caption_stage
from .types import Query


@dataclass
class Hit:
    rank: int
    id: str
    score: float
    path: str
    row: int


@dataclass
class SearchResult:
    hits: list[Hit]
    #: what each stage recorded for the query (reference caption, target description, ...)
    trace: dict[str, Any] = field(default_factory=dict)


class Searcher:
    """Holds the built components and the opened gallery; ``search`` runs one query.

    Args:
        recipe: a resolved recipe (:func:`agentcir.framework.recipe.compose`).
        gallery_dir: a gallery made by ``agentcir index`` with the recipe's encoder.
        progress: progress bars on stderr.
    """

    def __init__(self, recipe: dict[str, Any], gallery_dir: str | Path, *, progress: bool = False):
        self.recipe = recipe
        self.pool = ComponentPool(recipe)
        self.gallery = Gallery.open(gallery_dir, encoder=self.pool.get("encoder"), scale=recipe.get("scale"))
        self.method = self.pool.get("method")
        self.cache = open_call_cache(self.pool, recipe["run"])
        self.progress = progress
        self._lock = threading.Lock()  # one query at a time: components need not be thread-safe

    def search(self, *, image: str | Path | None = None, text: str = "", k: int = 10) -> SearchResult:
        """Rank the gallery for a reference ``image`` and/or a ``text``; the top ``k`` hits."""
        text = (text or "").strip()
        if image is None and not text:
            raise InputError("a search needs a reference image, a text, or both")
        if k < 1:
            raise InputError(f"k must be at least 1, got {k}")
        ref: list[str] = []
        if image is not None:
            if not Path(image).is_file():
                raise InputError(f"reference image '{image}' not found")
            load_rgb(image)  # a clear error now rather than deep inside a stage
            ref = [str(Path(image).resolve())]
        q = Query(id="query", text=text, reference=ref)
        state = RunState(queries=[q], gallery=self.gallery)
        run = self.recipe["run"]
        ctx = RunContext(cache=self.cache, run_dir=None, concurrency=run["concurrency"], progress=self.progress,
                         kernels=self.recipe["kernels"]["backend"])
        prepare = [caption_stage(self.pool, run["gallery_captions"])] if self.method.needs_captions else []
        with self._lock:
            asyncio.run(Runner(self.method, ctx, state, prepare=prepare).execute())
        c = state.candidates
        hits = [Hit(r, self.gallery.ids[row], float(s), self.gallery.paths[row], int(row))
                for r, (row, s) in enumerate(zip(c.ids[0][:k], c.scores[0][:k]), 1) if row >= 0]
        return SearchResult(hits, state.traces.get(q.id, {}))
