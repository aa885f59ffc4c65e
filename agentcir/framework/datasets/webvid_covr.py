"""WebVid-CoVR (Ventura et al., AAAI 2024): composed video retrieval, evaluated as the
official code does.

Layout (``root``)::

    webvid8m-covr_test.csv   columns txt1, txt2, sim_txt, pth1, pth2, edit, scores
                             (pth1 = reference video id, pth2 = target video id, e.g. "1011/1011521")
    videos/{pth}.mp4         the WebVid videos (decoded with PyAV: ``pip install 'agentcir[video]'``), or
    frames/{pth}/*.jpg       pre-extracted frames of each video (used first when present)

Protocol (CoVR ``src/test/*/webvid_covr.py``): the gallery is the target video of every
row (one row per target in the test file), so query i's target is gallery column i;
gallery items equal to the query's reference video are masked (score -10); R@1/5/10/50,
meanR3 = mean(R@1, R@5, R@10), meanR4 = mean(R@1, R@5, R@10, R@50).

A query's reference is ``num_frames`` uniformly sampled keyframes (CoVR's test setting is
one middle frame). A gallery video is represented by its middle keyframe (CoVR's
``emb_pool=middle``; its default pools frame embeddings weighted by the ``scores``
column, which a one-image-per-item gallery cannot do; the subset line says so).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ...registry import DATASETS
from ..errors import InputError
from ..eval.metrics import covr_metrics
from ..gallery import GalleryItem
from ..hashing import stable_hash
from ..types import Candidates, Query
from .base import Dataset, resolve_root
from .video import find_video, keyframes

KS = (1, 5, 10, 50)
COLUMNS = ("txt1", "txt2", "sim_txt", "pth1", "pth2", "edit", "scores")
REQUIRED = ("pth1", "pth2", "edit")
HINT = "the folder with webvid8m-covr_test.csv and videos/ or frames/"


@DATASETS.register("webvid_covr")
class WebVidCoVR(Dataset):
    """WebVid-CoVR test (see the module docstring for the protocol).

    Config:
        root: the dataset folder.
        annotation: the CSV, relative to ``root`` (or absolute).
        videos: folder of ``{pth}.mp4``; empty = ``<root>/videos``.
        frames: folder of pre-extracted frames ``{pth}/*.jpg``; empty = ``<root>/frames``.
        num_frames: keyframes per reference video (1 = the middle frame, as CoVR tests).
        cache: where decoded keyframes are written; empty = ``<root>/_keyframes``.
        limit: use only the first ``limit`` usable queries (0 = all).
    """

    title = "WebVid-CoVR"

    @dataclass
    class Config:
        root: str = ""
        annotation: str = "webvid8m-covr_test.csv"
        videos: str = ""
        frames: str = ""
        num_frames: int = 1
        cache: str = ""
        limit: int = 0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if self.cfg.num_frames < 1:
            raise InputError(f"dataset 'webvid_covr': field 'num_frames' must be at least 1, got {self.cfg.num_frames}")
        self.subset.name = f"WebVid-CoVR {Path(self.cfg.annotation).stem}"
        self._rows: list[dict] | None = None
        self._items: list[GalleryItem] | None = None
        self._sources: dict[str, Path] = {}

    # -- files ------------------------------------------------------------------------
    def _root(self) -> Path:
        return resolve_root(self.cfg.root, "dataset 'webvid_covr'", HINT)

    def _csv(self) -> Path:
        p = Path(self.cfg.annotation).expanduser()
        p = p if p.is_absolute() else self._root() / p
        if not p.is_file():
            raise InputError(f"dataset 'webvid_covr': annotation CSV '{p}' not found")
        return p

    def _dir(self, value: str, default: str) -> Path:
        return Path(value).expanduser() if value else self._root() / default

    def model_identity(self) -> str:
        try:
            return stable_hash(self._csv(), n=16)
        except InputError:
            return ""

    def rows(self) -> list[dict]:
        """The CSV rows (validated columns), in file order."""
        if self._rows is None:
            path = self._csv()
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                cols = reader.fieldnames or []
                missing = [c for c in REQUIRED if c not in cols]
                if missing:
                    raise InputError(f"dataset 'webvid_covr': '{path}' lacks column(s) {', '.join(missing)} "
                                     f"(has: {', '.join(cols)}; expected {', '.join(COLUMNS)})")
                self._rows = [r for r in reader if any((v or "").strip() for v in r.values())]
            if not self._rows:
                raise InputError(f"dataset 'webvid_covr': '{path}' has no rows")
        return self._rows

    def _source(self, vid: str) -> Path | None:
        if vid not in self._sources:
            self._sources[vid] = find_video(vid, self._dir(self.cfg.frames, "frames"), self._dir(self.cfg.videos, "videos"))
        return self._sources[vid]

    def _cache(self) -> Path:
        return self._dir(self.cfg.cache, "_keyframes")

    # -- dataset ----------------------------------------------------------------------
    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            from tqdm.auto import tqdm

            targets = sorted(dict.fromkeys(r["pth2"].strip() for r in self.rows()))  # CoVR sorts by pth2
            items, missing = [], []
            for vid in tqdm(targets, desc="target keyframes", unit="video", disable=len(targets) < 200, leave=False):
                src = self._source(vid)
                if src is None:
                    missing.append(vid)
                    continue
                items.append(GalleryItem(vid, keyframes(src, 1, self._cache())[0], None, {"video": str(src)}))
            self.subset.gallery_listed = len(targets)
            self.subset.gallery_missing = missing
            self._items = items
        return self._items

    def queries(self) -> list[Query]:
        from tqdm.auto import tqdm

        have = {it.id for it in self.gallery_items()}
        rows = self.rows()
        self.subset.query_skips.clear()
        self.subset.queries_listed = len(rows)
        out = []
        for n, r in enumerate(tqdm(rows, desc="reference keyframes", unit="video", disable=len(rows) < 200, leave=False)):
            ref, tgt = r["pth1"].strip(), r["pth2"].strip()
            src = self._source(ref)
            if src is None:
                self.subset.skip_query("reference video missing")
                continue
            if tgt not in have:
                self.subset.skip_query("target video missing")
                continue
            meta = {k: r[k] for k in ("txt1", "txt2", "sim_txt", "scores") if k in r}
            meta["num_frames"] = self.cfg.num_frames
            out.append(Query(id=str(n), text=r["edit"].strip(), reference=keyframes(src, self.cfg.num_frames, self._cache()),
                             reference_id=ref, targets=[tgt], meta=meta))
        return self._finish_queries(out, self.cfg.limit)

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        self.check_depth(candidates, 51, "R@50 after masking the reference")
        self.check_targets_indexed([q.targets[0] for q in queries], gallery)
        self.subset.note("Gallery videos are their middle keyframe (CoVR emb_pool=middle); reference video masked "
                         f"in rankings; references are {self.cfg.num_frames} keyframe(s).")
        return covr_metrics(self.rankings(candidates, queries, gallery), [q.reference_id for q in queries],
                            [q.targets[0] for q in queries], KS)
