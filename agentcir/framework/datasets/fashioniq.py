"""FashionIQ (Wu et al., CVPR 2021), one category per run, evaluated as the official code does.

Official layout (``root``)::

    captions/cap.{category}.{split}.json      [{"candidate", "target", "captions": [c0, c1]}]
    image_splits/split.{category}.{split}.json [image names]
    images/{name}.png (or .jpg)

Protocol (CLIP4Cir / SEARLE ``fiq_val_retrieval``): the gallery is
``split.{category}.val.json``; the query text is
``"{c0.strip('.?, ')} and {c1.strip('.?, ')}"``; the reference is *not* removed from the
ranking; R@1/5/10/50 per category. The reported FashionIQ average is the plain mean over
dress, shirt and toptee: run the three categories (``dataset.category=...``) and
``agentcir eval`` the three run directories, which adds the average row
(:func:`agentcir.framework.eval.metrics.fashioniq_average`).

About 3k FashionIQ images can no longer be downloaded: missing gallery images are skipped
and counted, and queries whose reference or target image is missing are skipped and
counted (the official code cannot score them either); :meth:`subset_note` states both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...registry import DATASETS, Choice
from ..errors import InputError
from ..eval.metrics import recall_at_k
from ..gallery import GalleryItem
from ..hashing import stable_hash
from ..types import Candidates, Query
from .base import Dataset, files_by_stem, find_annotation, read_json, require_field, resolve_root

KS = (1, 5, 10, 50)
SUFFIXES = (".png", ".jpg", ".jpeg")
HINT = "the FashionIQ folder with captions/, image_splits/ and images/"


def fashioniq_text(captions: list[str]) -> str:
    """The official query text: the two relative captions stripped of ``.?, `` and joined by " and "."""
    return " and ".join(c.strip(".?, ") for c in captions)


class FashionIQCategory(Choice):
    """FashionIQ's categories (``dataset.category``; :data:`~..eval.metrics.FASHIONIQ_CATEGORIES`)."""

    dress = "dress"
    shirt = "shirt"
    toptee = "toptee"


class FashionIQSplit(Choice):
    """FashionIQ's splits (``dataset.split``)."""

    train = "train"
    val = "val"
    test = "test"


@DATASETS.register("fashioniq")
class FashionIQ(Dataset):
    """FashionIQ, one category (see the module docstring for the protocol).

    Config:
        root: the FashionIQ folder (captions/, image_splits/, images/).
        category: dress, shirt or toptee.
        split: val (with targets) or test (no targets: nothing to score).
        images: image folder; empty = ``<root>/images``.
        limit: use only the first ``limit`` usable queries (0 = all).
    """

    title = "FashionIQ"

    @dataclass
    class Config:
        root: str = ""
        category: FashionIQCategory = FashionIQCategory.dress
        split: FashionIQSplit = FashionIQSplit.val
        images: str = ""
        limit: int = 0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self.subset.name = f"FashionIQ {self.cfg.category} {self.cfg.split}"
        self._items: list[GalleryItem] | None = None
        self._paths: dict[str, Path] = {}

    # -- files ------------------------------------------------------------------------
    def _root(self) -> Path:
        return resolve_root(self.cfg.root, "dataset 'fashioniq'", HINT)

    def _file(self, kind: str) -> Path:
        c, s = self.cfg.category, self.cfg.split
        rel = f"captions/cap.{c}.{s}.json" if kind == "captions" else f"image_splits/split.{c}.{s}.json"
        return find_annotation(self._root(), rel, "dataset 'fashioniq'")

    def model_identity(self) -> str:
        try:
            return stable_hash(self._file("captions"), self._file("split"), n=16)
        except InputError:
            return ""

    # -- dataset ----------------------------------------------------------------------
    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            names = read_json(self._file("split"), "dataset 'fashioniq'")
            if not isinstance(names, list):
                raise InputError(f"dataset 'fashioniq': '{self._file('split')}' should be a list of image names")
            folder = Path(self.cfg.images).expanduser() if self.cfg.images else self._root() / "images"
            if not folder.is_dir():
                raise InputError(f"dataset 'fashioniq': image folder '{folder}' not found (set dataset.images)")
            on_disk = files_by_stem(folder, SUFFIXES)
            items, missing = [], []
            for name in dict.fromkeys(str(n) for n in names):
                p = on_disk.get(name)
                if p is None:
                    missing.append(name)
                else:
                    items.append(GalleryItem(name, str(p.resolve()), None, {"category": self.cfg.category}))
            self.subset.gallery_listed = len(items) + len(missing)
            self.subset.gallery_missing = missing
            self._items = items
            self._paths = {it.id: Path(it.path) for it in items}
        return self._items

    def queries(self) -> list[Query]:
        self.gallery_items()
        where = "dataset 'fashioniq'"
        rows = read_json(self._file("captions"), where)
        out = []
        self.subset.query_skips.clear()
        self.subset.queries_listed = len(rows)
        for n, r in enumerate(rows):
            ref = str(require_field(r, "candidate", f"{where} caption {n}"))
            caps = [str(c) for c in require_field(r, "captions", f"{where} caption {n}")]
            target = r.get("target")
            if ref not in self._paths:
                self.subset.skip_query("reference image missing")
                continue
            if target is not None and str(target) not in self._paths:
                self.subset.skip_query("target image missing")
                continue
            out.append(
                Query(
                    id=f"{self.cfg.category}-{self.cfg.split}-{n:05d}",
                    text=fashioniq_text(caps),
                    reference=[str(self._paths[ref])],
                    reference_id=ref,
                    targets=[str(target)] if target is not None else [],
                    meta={"category": self.cfg.category, "captions": caps, "text_reversed": fashioniq_text(caps[::-1])},
                )
            )
        return self._finish_queries(out, self.cfg.limit)

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        if not queries or not all(q.targets for q in queries):
            self.subset.note("No ground truth in this split: nothing scored.")
            return {}
        self.check_depth(candidates, max(KS), "R@50")
        self.check_targets_indexed([q.targets[0] for q in queries], gallery)
        self.subset.note("Reference not removed from rankings (official FashionIQ protocol).")
        return recall_at_k(self.rankings(candidates, queries, gallery), [q.targets[0] for q in queries], KS)
