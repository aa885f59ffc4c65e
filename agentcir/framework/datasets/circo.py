"""CIRCO (Baldrati et al., ICCV 2023), evaluated and submitted as the official code does.

Official layout (``root``)::

    annotations/{split}.json                                  [{"id", "reference_img_id", "relative_caption",
                                                                "shared_concept", "target_img_id", "gt_img_ids",
                                                                "semantic_aspects"}]  (test: no targets)
    COCO2017_unlabeled/annotations/image_info_unlabeled2017.json  {"images": [{"id", "file_name"}]}
    COCO2017_unlabeled/unlabeled2017/{id:012d}.jpg

Protocol (miccunifi/CIRCO ``src/evaluation.py``): the gallery is every COCO 2017 unlabeled
image; ``AP@k = sum_{i<=k} P@i * rel_i / min(k, #gt)``, mAP@5/10/25/50 over all ground
truths; Recall@k uses ``target_img_id`` only; semantic mAP@10 per aspect; no reference
removal; duplicate predictions are an error. Test: ``agentcir eval RUN --submit DIR``
writes ``{query id: top 50 ids}`` for the server.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...registry import DATASETS, Choice
from ..errors import InputError
from ..eval.metrics import average_precision_at_k, circo_metrics
from ..eval.submissions import circo_submission, write_json
from ..gallery import GalleryItem
from ..hashing import stable_hash
from ..types import Candidates, Query
from .base import Dataset, Record, check_unique, find_annotation, read_json, read_json_list, resolve_root

KS = (5, 10, 25, 50)
HINT = "the CIRCO folder with annotations/ and COCO2017_unlabeled/"
SEMANTIC_ASPECTS = (
    "cardinality",
    "addition",
    "negation",
    "direct_addressing",
    "compare_change",
    "comparative_statement",
    "statement_with_conjunction",
    "spatial_relations_background",
    "viewpoint",
)


class CircoSplit(Choice):
    """CIRCO's splits (``dataset.split``; ``test``: no ground truth, a submission file)."""

    val = "val"
    test = "test"


@DATASETS.register("circo")
class CIRCO(Dataset):
    """CIRCO (see the module docstring for the protocol).

    Config:
        root: the CIRCO folder.
        split: val (with ground truths) or test (submission only).
        limit: use only the first ``limit`` usable queries (0 = all).
    """

    title = "CIRCO"

    @dataclass
    class Config:
        root: str = ""
        split: CircoSplit = CircoSplit.val
        limit: int = 0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.subset.name = f"CIRCO {self.cfg.split}"
        self._items: list[GalleryItem] | None = None
        self._paths: dict[str, str] = {}
        self._all_ids: list[str] | None = None

    def _root(self) -> Path:
        return resolve_root(self.cfg.root, "dataset 'circo'", HINT)

    def _annotations(self) -> Path:
        return find_annotation(self._root(), f"annotations/{self.cfg.split}.json", "dataset 'circo'")

    def model_identity(self) -> str:
        try:
            return stable_hash(self._annotations(), n=16)
        except InputError:
            return ""

    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            root = self._root()
            info_path = find_annotation(
                root, "COCO2017_unlabeled/annotations/image_info_unlabeled2017.json", "dataset 'circo'"
            )
            info = read_json(info_path, "dataset 'circo'")
            images = info.get("images") if isinstance(info, dict) else None
            if not isinstance(images, list):
                raise InputError(f"dataset 'circo': '{info_path}' has no 'images' list")
            folder = root / "COCO2017_unlabeled" / "unlabeled2017"
            on_disk = set(os.listdir(folder)) if folder.is_dir() else set()
            items, missing = [], []
            for n, im in enumerate(images):
                rec = Record(im, info_path, f"images[{n}]", what="dataset 'circo'")
                iid = rec.id("id")
                name = rec.text("file_name", optional=True)
                if not name:
                    if not iid.isdigit():
                        raise rec.fail("file_name", "a file name (the id is not a number to derive one from)", name)
                    name = f"{int(iid):012d}.jpg"
                if name in on_disk:
                    items.append(GalleryItem(iid, str((folder / name).resolve()), None, {}))
                else:
                    missing.append(iid)
            self.subset.gallery_listed = len(images)
            self.subset.gallery_missing = missing
            self._items = items
            self._paths = {it.id: it.path for it in items}
        return self._items

    def queries(self) -> list[Query]:
        self.gallery_items()
        where = "dataset 'circo'"
        path = self._annotations()
        rows = read_json_list(path, where)
        self.subset.query_skips.clear()
        self.subset.queries_listed = len(rows)
        self._all_ids = []
        out = []
        seen = []
        for n, row in enumerate(rows):
            r = Record(row, path, f"query {n}", what=where)
            qid = r.keyed("id", seen)
            self._all_ids.append(qid)
            ref = r.id("reference_img_id")
            text = r.text("relative_caption")
            gts = r.ids("gt_img_ids", optional=True)
            meta = {
                "shared_concept": r.text("shared_concept", optional=True, default=""),
                "semantic_aspects": r.texts("semantic_aspects", optional=True),
            }
            target = r.id("target_img_id", optional=True)
            if target is not None:
                meta["target_img_id"] = target
            if ref not in self._paths:
                self.subset.skip_query("reference image missing")
                continue
            out.append(Query(id=qid, text=text, reference=[self._paths[ref]], reference_id=ref, targets=gts, meta=meta))
        check_unique(seen, path, where)
        return self._finish_queries(out, self.cfg.limit)

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        if not queries or not all(q.targets for q in queries):
            self.subset.note(
                "No ground truth in this split: nothing scored (write a submission with `agentcir eval RUN --submit DIR`)."
            )
            return {}
        self.check_depth(candidates, max(KS), "mAP@50")
        self.check_targets_indexed([t for q in queries for t in q.targets], gallery, "ground-truth")
        rankings = self.rankings(candidates, queries, gallery)
        out = circo_metrics(
            rankings,
            [q.targets for q in queries],
            [q.meta["target_img_id"] for q in queries],
            KS,
            query_ids=[q.id for q in queries],
        )
        per_aspect: dict[str, list[float]] = defaultdict(list)
        for r, q in zip(rankings, queries):
            ap = average_precision_at_k(r, q.targets, 10)
            for a in q.meta.get("semantic_aspects", []):
                per_aspect[a].append(ap)
        for a in SEMANTIC_ASPECTS:
            if per_aspect.get(a):
                out[f"mAP@10/{a}"] = 100.0 * float(np.mean(per_aspect[a]))
        self.subset.note("Reference not removed (official CIRCO protocol); R@k counts target_img_id only.")
        return out

    def write_submission(self, rankings: dict[str, list[str]], out_dir: str | os.PathLike) -> list[Path]:
        """``circo_{split}_submission.json`` for the CIRCO server, validated first."""
        if self._all_ids is None:
            self.queries()
        return [
            write_json(
                circo_submission(rankings, self._all_ids), Path(out_dir) / f"circo_{self.cfg.split}_submission.json"
            )
        ]
