"""CIRR (Liu et al., ICCV 2021), evaluated and submitted as the official code does.

Layout (``root``; the annotation folders may also sit under ``root/cirr/`` as in the
official release)::

    captions/cap.rc2.{split}.json       [{"pairid", "reference", "target_hard", "caption", "img_set": {"members"}}]
    image_splits/split.rc2.{split}.json {name: "./dev/<name>.png"}   (paths relative to ``images``)

Protocol (SEARLE / CLIP4Cir ``cirr_compute_val_metrics``): rank the split's whole gallery,
**remove the reference** from each ranking, Recall@1/5/10/50 on ``target_hard``;
Recall_subset@1/2/3 ranks only ``img_set.members`` minus the reference (5 images, so a
random ranking scores R_subset@1 = 20%). Test (``test1``) has no targets: write the
server's files with ``agentcir eval RUN --submit DIR`` (``{"version": "rc2", "metric":
"recall"}`` + pairid -> top 50, and ``"recall_subset"`` + pairid -> top 3).

For exact numbers the method's ``top_k`` must cover the gallery (val: 2,297 images): a
subset member absent from a truncated ranking is placed after the ranked ones, and the
run's subset line says how many queries that touched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...registry import DATASETS, Choice
from ..errors import InputError
from ..eval.metrics import cirr_metrics, subset_ranking
from ..eval.submissions import cirr_submission, write_json
from ..gallery import GalleryItem
from ..hashing import stable_hash
from ..types import Candidates, Query
from .base import Dataset, Record, _shown, check_unique, find_annotation, read_json, read_json_list, resolve_root

HINT = "the CIRR folder with captions/ and image_splits/ (or cirr/captions, cirr/image_splits) and the image folders"


class CirrSplit(Choice):
    """CIRR's splits (``dataset.split``; ``test1``: no ground truth, a submission file)."""

    train = "train"
    val = "val"
    test1 = "test1"


@DATASETS.register("cirr")
class CIRR(Dataset):
    """CIRR rc2 (see the module docstring for the protocol).

    Config:
        root: the CIRR folder.
        split: val (with targets), test1 (submission only) or train.
        images: folder the split file's relative paths start from; empty = ``root``.
        limit: use only the first ``limit`` usable queries (0 = all).
    """

    title = "CIRR"

    @dataclass
    class Config:
        root: str = ""
        split: CirrSplit = CirrSplit.val
        images: str = ""
        limit: int = 0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.subset.name = f"CIRR {self.cfg.split}"
        self._items: list[GalleryItem] | None = None
        self._paths: dict[str, str] = {}
        self._annotations: dict[str, tuple[str, list[str]]] | None = None

    def _file(self, kind: str) -> Path:
        root = resolve_root(self.cfg.root, "dataset 'cirr'", HINT)
        rel = (
            f"captions/cap.rc2.{self.cfg.split}.json"
            if kind == "captions"
            else f"image_splits/split.rc2.{self.cfg.split}.json"
        )
        return find_annotation(root, rel, "dataset 'cirr'", also=("cirr",))

    def model_identity(self) -> str:
        try:
            return stable_hash(self._file("captions"), self._file("split"), n=16)
        except InputError:
            return ""

    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            split = read_json(self._file("split"), "dataset 'cirr'")
            if not isinstance(split, dict):
                raise InputError(f"dataset 'cirr': '{self._file('split')}' should map image names to relative paths")
            base = Path(self.cfg.images or self.cfg.root).expanduser()
            items, missing = [], []
            for name, rel in split.items():
                if not isinstance(rel, str) or not rel.strip():
                    raise InputError(
                        f"dataset 'cirr': '{self._file('split')}' image '{name}': expected a relative "
                        f"path (a string), got {_shown(rel)}"
                    )
                p = base / rel
                if os.path.isfile(p):
                    items.append(GalleryItem(str(name), str(p.resolve()), None, {}))
                else:
                    missing.append(str(name))
            self.subset.gallery_listed = len(split)
            self.subset.gallery_missing = missing
            self._items = items
            self._paths = {it.id: it.path for it in items}
        return self._items

    def queries(self) -> list[Query]:
        self.gallery_items()
        where = "dataset 'cirr'"
        path = self._file("captions")
        rows = read_json_list(path, where)
        self.subset.query_skips.clear()
        self.subset.queries_listed = len(rows)
        out = []
        self._annotations = {}
        seen = []
        for n, row in enumerate(rows):
            r = Record(row, path, f"record {n}", what=where)
            pairid = r.keyed("pairid", seen)
            ref = r.id("reference")
            img_set = Record(r.mapping("img_set"), path, f"{r.where} img_set", what=where)
            members = img_set.ids("members")
            caption = r.text("caption")
            target = r.id("target_hard", optional=True)
            target_soft = r.mapping("target_soft", optional=True)
            self._annotations[pairid] = (ref, members)
            if ref not in self._paths:
                self.subset.skip_query("reference image missing")
                continue
            if target is not None and target not in self._paths:
                self.subset.skip_query("target image missing")
                continue
            out.append(
                Query(
                    id=pairid,
                    text=caption,
                    reference=[self._paths[ref]],
                    reference_id=ref,
                    targets=[target] if target is not None else [],
                    meta={"members": members, "target_soft": target_soft, "img_set_id": img_set.row.get("id")},
                )
            )
        check_unique(seen, path, where, "pairid")
        return self._finish_queries(out, self.cfg.limit)

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        if not queries or not all(q.targets for q in queries):
            self.subset.note(
                "No ground truth in this split: nothing scored (write a submission with `agentcir eval RUN --submit DIR`)."
            )
            return {}
        self.check_depth(candidates, 51, "R@50 after removing the reference")
        self.check_targets_indexed([q.targets[0] for q in queries], gallery)
        rankings = self.rankings(candidates, queries, gallery)
        short = sum(1 for r, q in zip(rankings, queries) if subset_ranking(r, q.meta["members"], q.reference_id)[1])
        if short:
            self.subset.note(
                f"{short} queries had subset members beyond the ranking depth (placed after the ranked "
                f"ones): raise the method's top_k to the gallery size for exact R_subset."
            )
        self.subset.note("Reference removed from rankings (official CIRR protocol).")
        return cirr_metrics(
            rankings,
            [q.reference_id for q in queries],
            [q.targets[0] for q in queries],
            [q.meta["members"] for q in queries],
        )

    def write_submission(self, rankings: dict[str, list[str]], out_dir: str | os.PathLike) -> list[Path]:
        """``recall`` and ``recall_subset`` files for the CIRR test server, validated first."""
        if self._annotations is None:
            self.queries()
        refs = {k: v[0] for k, v in self._annotations.items()}
        members = {k: v[1] for k, v in self._annotations.items()}
        recall, subset = cirr_submission(rankings, refs, members)
        out = Path(out_dir)
        return [
            write_json(recall, out / f"cirr_{self.cfg.split}_recall.json"),
            write_json(subset, out / f"cirr_{self.cfg.split}_recall_subset.json"),
        ]
