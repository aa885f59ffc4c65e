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
from ..eval.metrics import map_at_k, recall_at_k
from ..gallery import GalleryItem
from ..types import Candidates, Query
from .base import Dataset

log = logging.getLogger("agentcir")

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

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.root = Path(self.cfg.root or DEMO_ROOT).expanduser()
        for name in ("gallery.csv", "queries.jsonl"):
            if not (self.root / name).is_file():
                raise InputError(f"dataset folder '{self.root}' has no {name} (see agentcir.framework.datasets.composed "
                                 f"for the format, or build one with `agentcir build-benchmark`)")
        self._missing: list[str] = []
        self._items: list[GalleryItem] | None = None

    def model_identity(self) -> str:
        from ..hashing import file_digest

        return file_digest(self.root / "gallery.csv") + file_digest(self.root / "queries.jsonl")

    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            items, missing = [], []
            with open(self.root / "gallery.csv", newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                for col in ("id", "image"):
                    if col not in (reader.fieldnames or []):
                        raise InputError(f"'{self.root / 'gallery.csv'}' needs a column '{col}' (has: {reader.fieldnames})")
                for row in reader:
                    path = (self.root / row["image"]).resolve()
                    if not path.is_file():
                        missing.append(row["id"])
                        continue
                    meta = {k: v for k, v in row.items() if k not in ("id", "image", "caption")}
                    items.append(GalleryItem(row["id"], str(path), row.get("caption") or None, meta))
            if missing:
                log.warning("dataset '%s': %d gallery image(s) missing on disk, skipped (e.g. %s)", self.root, len(missing), missing[0])
            self._items, self._missing = items, missing
        return self._items

    def queries(self) -> list[Query]:
        have = {it.id: it.path for it in self.gallery_items()}
        out = []
        with open(self.root / "queries.jsonl", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    ref = str(d["reference_id"])
                    q = Query(id=str(d["id"]), text=d["text"], reference_id=ref, targets=[str(t) for t in d["targets"]],
                              meta={k: v for k, v in d.items() if k not in ("id", "text", "reference_id", "targets")})
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise InputError(f"'{self.root / 'queries.jsonl'}' line {n}: not a query ({type(e).__name__}: {e})") from None
                if ref not in have:
                    continue  # reference image missing: counted in subset_note via _missing
                q.reference = [have[ref]]
                out.append(q)
        if self.cfg.limit:
            out = out[: self.cfg.limit]
        self._num_queries = len(out)
        return out

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        rankings = []
        for qi, q in enumerate(queries):
            ids = [gallery.ids[i] for i in candidates.row(qi)]
            rankings.append([i for i in ids if i != q.reference_id])
        gts = [q.targets for q in queries]
        return {**map_at_k(rankings, gts, MAP_KS), **recall_at_k(rankings, gts, KS)}

    def subset_note(self) -> str:
        n = getattr(self, "_num_queries", None)
        return (f"Composed benchmark '{self.root}': {n} queries, {len(self.gallery_items())} gallery images"
                f"{f', {len(self._missing)} missing on disk and skipped' if self._missing else ''}; reference excluded "
                f"from rankings; mAP@k over all correct targets (CIRCO protocol), R@k = any correct target in the top k.")


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
