"""Composed-retrieval benchmarks in the agentcir folder format, and the bundled demo.

Folder format (written by :mod:`agentcir.framework.datasets.builder`, or by hand)::

    gallery.csv     id, image (path relative to the folder), then any attribute columns;
                    an optional ``caption`` column gives dataset captions
    queries.jsonl   {"id", "reference_id", "text", "targets": [gallery ids], "edit": {...}}

Scored like CIRCO (mAP@k over all correct targets, reference excluded from the
ranking) plus Recall@k (a correct target in the top k).
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ...registry import DATASETS
from ..errors import InputError
from ..eval.metrics import map_at_k, recall_at_k, remove_ids
from ..gallery import GalleryItem
from ..types import Candidates, Query
from .base import Dataset, Record, check_unique

log = logging.getLogger(__name__)

DEMO_ROOT = Path(__file__).resolve().parent.parent.parent / "data" / "demo"
KS = (1, 5, 10, 50)
MAP_KS = (5, 10, 25, 50)


@DATASETS.register("composed")
class ComposedFolder(Dataset):
    """A composed-retrieval benchmark folder (see module docstring).

    Config:
        root: the folder.
        limit: use only the first ``limit`` queries (0 = all).
    """

    exclude_reference = True

    @dataclass
    class Config:
        root: str = ""
        limit: int = 0

    title = "Composed benchmark"

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.root = Path(self.cfg.root or DEMO_ROOT).expanduser()
        self.subset.name = f"Composed benchmark '{self.root}'"
        self._items: list[GalleryItem] | None = None

    def missing_hint(self) -> str:
        return "see agentcir.framework.datasets.composed for the format, or build one with `agentcir build-benchmark`"

    def _check_files(self) -> None:
        for name in ("gallery.csv", "queries.jsonl"):
            if not (self.root / name).is_file():
                raise InputError(f"dataset folder '{self.root}' has no {name} ({self.missing_hint()})")

    def model_identity(self) -> str:
        from ..hashing import file_digest

        try:
            return file_digest(self.root / "gallery.csv") + file_digest(self.root / "queries.jsonl")
        except OSError:
            return ""

    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            self._check_files()
            items, missing = [], []
            with open(self.root / "gallery.csv", newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                for col in ("id", "image"):
                    if col not in (reader.fieldnames or []):
                        raise InputError(
                            f"'{self.root / 'gallery.csv'}' needs a column '{col}' (has: {reader.fieldnames})"
                        )
                seen = []
                for n, row in enumerate(reader, 2):
                    for col in ("id", "image"):
                        if not (row.get(col) or "").strip():
                            raise InputError(f"'{self.root / 'gallery.csv'}' line {n}: column '{col}' is empty")
                    seen.append((row["id"], f"line {n}"))
                    path = (self.root / row["image"]).resolve()
                    if not path.is_file():
                        missing.append(row["id"])
                        continue
                    meta = {k: v for k, v in row.items() if k not in ("id", "image", "caption")}
                    items.append(GalleryItem(row["id"], str(path), row.get("caption") or None, meta))
            check_unique(seen, self.root / "gallery.csv", f"dataset '{self.root}'", "gallery id")
            if missing:
                log.warning(
                    "dataset '%s': %d gallery image(s) missing on disk, skipped (e.g. %s)",
                    self.root,
                    len(missing),
                    missing[0],
                )
            self.subset.gallery_listed = len(items) + len(missing)
            self.subset.gallery_missing = missing
            self._items = items
        return self._items

    def queries(self) -> list[Query]:
        have = {it.id: it.path for it in self.gallery_items()}
        out = []
        self.subset.query_skips.clear()
        listed = 0
        path = self.root / "queries.jsonl"
        where = f"dataset '{self.root}'"
        seen = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                listed += 1
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{where}: '{path}' line {n}: not valid JSON ({e})") from None
                r = Record(d, path, f"line {n}", what=where)
                qid = r.keyed("id", seen)
                ref = r.id("reference_id")
                q = Query(
                    id=qid,
                    text=r.text("text"),
                    reference_id=ref,
                    targets=r.ids("targets"),
                    meta={k: v for k, v in d.items() if k not in ("id", "text", "reference_id", "targets")},
                )
                if ref not in have:
                    self.subset.skip_query("reference image missing")
                    continue
                if not any(t in have for t in q.targets):
                    self.subset.skip_query("no target image on disk")
                    continue
                q.reference = [have[ref]]
                out.append(q)
        check_unique(seen, path, where)
        self.subset.queries_listed = listed
        return self._finish_queries(out, self.cfg.limit)

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        self.check_depth(candidates, max(MAP_KS) + 1, "mAP@50 after excluding the reference")
        self.check_targets_indexed([t for q in queries for t in q.targets], gallery)
        rankings = [
            remove_ids(r, [q.reference_id]) for r, q in zip(self.rankings(candidates, queries, gallery), queries)
        ]
        gts = [q.targets for q in queries]
        self.subset.note(
            "Reference excluded from rankings; mAP@k over all correct targets (CIRCO protocol), "
            "R@k = any correct target in the top k."
        )
        return {**map_at_k(rankings, gts, MAP_KS), **recall_at_k(rankings, gts, KS)}


@DATASETS.register("demo")
class Demo(ComposedFolder):
    """The bundled demo: a few hundred real product photos and composed queries (see data/demo/README.md)."""

    @dataclass
    class Config:
        limit: int = 0

    def __init__(self, cfg=None, **deps):
        cfg = cfg or Demo.Config()
        super().__init__(ComposedFolder.Config(root=str(DEMO_ROOT), limit=cfg.limit), **deps)
        self.cfg = cfg


@DATASETS.register("fashion_cir")
class FashionCIR(ComposedFolder):
    """The full real-photo benchmark built from the fashion-products photos (every ``val`` photo
    of the id hash split, 400 queries by default); build it once with ``agentcir build-benchmark``.

    Config:
        root: the built benchmark folder.
        source: the fashion-products folder it is built from (``products.csv`` + ``images/``),
            named in the error that tells how to build a missing benchmark.
        limit: use only the first ``limit`` queries (0 = all).
    """

    @dataclass
    class Config:
        root: str = "runs/_bench/fashion-cir"
        source: str = "../shared/data/fashion-products"
        limit: int = 0

    def missing_hint(self) -> str:
        src = self.cfg.source.rstrip("/")
        return (
            f"build it first: agentcir build-benchmark --csv {src}/products.csv --images {src}/images "
            f"--out {self.cfg.root}"
        )
