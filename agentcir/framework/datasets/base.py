"""Dataset interface: gallery items, queries, and the benchmark's own metrics.

Also the bookkeeping every loader shares: which part of a benchmark a run really
evaluated (:class:`Subset`: gallery images and queries kept and skipped, and why),
finding image files, and turning ranked gallery rows into ranked item ids.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence

from ..component import Component
from ..errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from ..gallery import Gallery, GalleryItem
    from ..types import Candidates, Query

log = logging.getLogger("agentcir")


@dataclass
class Subset:
    """Exactly what a run evaluates: counts of gallery images and queries listed by the
    benchmark, kept, and skipped with the reason (never silently)."""

    name: str
    gallery_listed: int = 0
    gallery_missing: list[str] = field(default_factory=list)
    queries_listed: int = 0
    queries_kept: int = 0
    query_skips: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def skip_query(self, reason: str) -> None:
        self.query_skips[reason] += 1

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def render(self) -> str:
        g_kept = self.gallery_listed - len(self.gallery_missing)
        gal = f"gallery {g_kept} of {self.gallery_listed} images"
        if self.gallery_missing:
            gal += f" ({len(self.gallery_missing)} missing on disk, skipped; e.g. {self.gallery_missing[0]})"
        qs = f"{self.queries_kept} of {self.queries_listed} queries"
        if self.query_skips:
            qs += " (skipped: " + ", ".join(f"{n} {why}" for why, n in sorted(self.query_skips.items())) + ")"
        return f"{self.name}: evaluated {qs}; {gal}." + "".join(f" {n}" for n in self.notes)


class Dataset(Component):
    """A benchmark or a user collection.

    ``gallery_items`` lists what to index (missing files are skipped and counted, never
    silently), ``queries`` the batch, and ``evaluate`` computes the benchmark's metrics
    exactly as its official code does, on rankings of gallery rows. Loaders build cheaply
    (recipes are built in tests): they read files on first use and fail there with an
    error naming the missing file.
    """

    kind: ClassVar[str] = "dataset"
    #: shown by ``subset_note`` before anything is loaded
    title: ClassVar[str] = "dataset"

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.subset = Subset(self.title)

    def gallery_items(self) -> list["GalleryItem"]:  # pragma: no cover - abstract
        raise NotImplementedError

    def queries(self) -> list["Query"]:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, candidates: "Candidates", queries: list["Query"], gallery: "Gallery") -> dict[str, float]:
        """Metrics for a ranking (``{}`` when the dataset has no ground truth)."""
        return {}

    def subset_note(self) -> str:
        """One line saying exactly which subset a run evaluated (split, counts, skips)."""
        return self.subset.render()

    def write_submission(self, rankings: dict[str, list[str]], out_dir: str | os.PathLike) -> list[Path]:
        """Write the benchmark's test-server submission file(s) from ranked ids per query id."""
        raise InputError(f"dataset '{self.registry_key or self.title}' has no submission format")

    # -- helpers for loaders ----------------------------------------------------------
    def _finish_queries(self, queries: list["Query"], limit: int) -> list["Query"]:
        if limit and limit < len(queries):
            self.subset.note(f"Limited to the first {limit} of {len(queries)} usable queries (dataset.limit).")
            queries = queries[:limit]
        self.subset.queries_kept = len(queries)
        return queries

    def rankings(self, candidates: "Candidates", queries: Sequence["Query"], gallery: "Gallery") -> list[list[str]]:
        """Ranked gallery item ids per query (padding dropped)."""
        if candidates.num_queries != len(queries):
            raise InputError(f"{candidates.num_queries} rankings for {len(queries)} queries")
        ids = gallery.ids
        return [[ids[i] for i in candidates.row(q)] for q in range(len(queries))]

    def check_depth(self, candidates: "Candidates", need: int, why: str) -> None:
        """Note in the subset line when rankings are shallower than a metric needs."""
        if candidates.k < need:
            self.subset.note(f"Rankings hold {candidates.k} items but {why} needs {need}: raise the method's top_k "
                             f"(items beyond the ranking count as misses).")

    def check_targets_indexed(self, targets: Iterable[str], gallery: "Gallery", what: str = "target") -> None:
        """Note ground-truth items that the indexer had to skip (unreadable images)."""
        missing = {t for t in targets if gallery.index_of(t) < 0}
        if missing:
            self.subset.note(f"{len(missing)} {what} image(s) are not in the indexed gallery (unreadable) and cannot be retrieved.")


def resolve_root(root: str, what: str, hint: str) -> Path:
    """``root`` expanded; a clear error when it is empty or absent."""
    if not root:
        raise InputError(f"{what}: set dataset.root to the dataset folder ({hint})")
    p = Path(root).expanduser()
    if not p.is_dir():
        raise InputError(f"{what}: dataset folder '{p}' not found ({hint})")
    return p


def find_annotation(root: Path, rel: str, what: str, also: Sequence[str] = ()) -> Path:
    """``root/rel`` or ``root/<a>/rel`` for each ``a`` in ``also``; an error listing the tried paths."""
    tried = [root / rel, *(root / a / rel for a in also)]
    for p in tried:
        if p.is_file():
            return p
    raise InputError(f"{what}: annotation file not found; looked for {', '.join(str(t) for t in tried)}")


def read_json(path: Path, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{what}: '{path}' is not valid JSON ({e})") from None


def read_jsonl(path: Path, what: str) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise InputError(f"{what}: '{path}' line {n} is not valid JSON ({e})") from None
    return out


def files_by_stem(folder: Path, suffixes: Sequence[str]) -> dict[str, Path]:
    """Map file stem -> path for the files in ``folder`` (one directory scan, not one stat per id).
    When several suffixes exist for a stem, the first of ``suffixes`` wins."""
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    rank = {s: i for i, s in enumerate(suffixes)}
    with os.scandir(folder) as it:
        for e in it:
            stem, dot, suf = e.name.rpartition(".")
            suf = "." + suf.lower()
            if dot and suf in rank and e.is_file():
                prev = out.get(stem)
                if prev is None or rank[suf] < rank[prev.suffix.lower()]:
                    out[stem] = Path(e.path)
    return out


def require_field(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise InputError(f"{where}: missing field '{key}' (has: {', '.join(sorted(d))})")
    return d[key]
