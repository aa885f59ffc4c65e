"""WebVid-CoVR (Ventura et al., AAAI 2024): composed video retrieval, evaluated as the
official code does.

Layout (``root``)::

    webvid8m-covr_test.csv   columns txt1, txt2, sim_txt, pth1, pth2, edit, scores
                             (pth1 = reference video id, pth2 = target video id, e.g. "1011/1011521")
    videos/{pth}.mp4         the WebVid videos (decoded with PyAV: ``pip install 'agentcir[video]'``), or
    frames/{pth}/*.jpg       pre-extracted frames of each video (used first when present), or
    preload/                 a release's precomputed features and no media (the OCTOPUS release:
                             annotation/webvid8m-covr_test.csv, preload/{img,ref_img,gen_img}_features/<arch>_*.pkl)

**From a release's features** (no ``videos/`` nor ``frames/``, a ``preload/`` folder): the
gallery is the targets the release has features for, in the release's order (its
``img_features`` names: the CSV order of the rows it kept); a query is a CSV row whose target
and reference the release holds (the OCTOPUS release lacks 2 of the 2,556 rows); images are
feature references (``features:img_features/<pth2>``, ``features:ref_img_features/<pth1>``,
:mod:`agentcir.framework.features`) that ``encoder=features`` serves; a gallery item's caption is
its ``txt2`` (the target captions the authors' ``S_v2t`` uses, ``tar_captions``); a query's
``meta["release_row"]`` is its row in the release's per-query files (the generated proxies).
This is the authors' setting (``src/compute_results.py``): query i's target is gallery column i,
the reference masked.

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
from ...registry.config import bounded
from ..errors import InputError
from ..eval.metrics import covr_metrics
from ..features import feature_ref, load_tables
from ..gallery import GalleryItem
from ..hashing import stable_hash
from ..types import Candidates, Query
from .base import Dataset, resolve_root
from .video import find_video, keyframes

KS = (1, 5, 10, 50)
COLUMNS = ("txt1", "txt2", "sim_txt", "pth1", "pth2", "edit", "scores")
REQUIRED = ("pth1", "pth2", "edit")
HINT = "the folder with webvid8m-covr_test.csv and videos/ or frames/ (or annotation/ and a release's preload/)"


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
        preload: a release's features folder, used when there are no videos nor frames;
            empty = ``<root>/preload``.
        preload_arch: the release's features that name the gallery and the queries (empty =
            the first ``<table>/<arch>_*.pkl`` found; every arch of a release lists the same items).
    """

    title = "WebVid-CoVR"

    @dataclass
    class Config:
        root: str = ""
        annotation: str = "webvid8m-covr_test.csv"
        videos: str = ""
        frames: str = ""
        num_frames: int = bounded(1, 1)
        cache: str = ""
        limit: int = 0
        preload: str = ""
        preload_arch: str = ""

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if self.cfg.num_frames < 1:
            raise InputError(f"dataset 'webvid_covr': field 'num_frames' must be at least 1, got {self.cfg.num_frames}")
        self.subset.name = f"WebVid-CoVR {Path(self.cfg.annotation).stem}"
        self._rows: list[dict] | None = None
        self._items: list[GalleryItem] | None = None
        self._sources: dict[str, Path] = {}
        self._release: dict | None = None

    # -- files ------------------------------------------------------------------------
    def _root(self) -> Path:
        return resolve_root(self.cfg.root, "dataset 'webvid_covr'", HINT)

    def _csv(self) -> Path:
        p = Path(self.cfg.annotation).expanduser()
        if not p.is_absolute():  # <root>/<annotation>, else the release's <root>/annotation/<annotation>
            p = next((c for c in (self._root() / p, self._root() / "annotation" / p) if c.is_file()), self._root() / p)
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
                    raise InputError(
                        f"dataset 'webvid_covr': '{path}' lacks column(s) {', '.join(missing)} "
                        f"(has: {', '.join(cols)}; expected {', '.join(COLUMNS)})"
                    )
                self._rows = [r for r in reader if any((v or "").strip() for v in r.values())]
            if not self._rows:
                raise InputError(f"dataset 'webvid_covr': '{path}' has no rows")
        return self._rows

    def _source(self, vid: str) -> Path | None:
        if vid not in self._sources:
            self._sources[vid] = find_video(
                vid, self._dir(self.cfg.frames, "frames"), self._dir(self.cfg.videos, "videos")
            )
        return self._sources[vid]

    def _cache(self) -> Path:
        return self._dir(self.cfg.cache, "_keyframes")

    # -- a release's features ----------------------------------------------------------
    def release(self) -> dict | None:
        """From a release's ``preload/`` (no videos nor frames): ``{"arch", "folder", "gallery": the
        target ids in the release's order, "references": the set of reference ids}``; None when the
        media are there."""
        if self._release is None:
            media = [self._dir(self.cfg.frames, "frames"), self._dir(self.cfg.videos, "videos")]
            pre = self._dir(self.cfg.preload, "preload")
            if any(m.is_dir() for m in media) or not pre.is_dir():
                self._release = {}
            else:
                arch = self.cfg.preload_arch or _first_arch(pre)
                tables = load_tables(pre, arch)
                need = [t for t in ("img_features", "ref_img_features") if t not in tables]
                if need:
                    raise InputError(
                        f"dataset 'webvid_covr': the release folder '{pre}' lacks "
                        f"{', '.join(f'{t}/{arch}_*.pkl' for t in need)} (and there are no videos/ nor frames/)"
                    )
                self._release = {
                    "arch": arch,
                    "folder": str(pre),
                    "gallery": tables["img_features"].ids,
                    "references": set(tables["ref_img_features"].ids),
                }
        return self._release or None

    # -- dataset ----------------------------------------------------------------------
    def gallery_items(self) -> list[GalleryItem]:
        rel = self.release()
        if self._items is None and rel is not None:
            caption = {r["pth2"].strip(): (r.get("txt2") or "").strip() or None for r in self.rows()}
            listed = list(caption)  # the CSV's targets, in order
            held = set(rel["gallery"])
            self._items = [
                GalleryItem(v, feature_ref("img_features", v), caption.get(v), {"release": rel["folder"]})
                for v in dict.fromkeys(rel["gallery"])
                if v in caption
            ]
            self.subset.gallery_listed = len(listed)
            self.subset.gallery_missing = [v for v in listed if v not in held]
            self.subset.note(
                f"Images are the release's precomputed features ({rel['folder']}): the gallery and the "
                f"queries are the items its {rel['arch']} tables list (every arch lists the same), in the "
                f"release's order, reference masked; the features scored are the encoder's (see Components)."
            )
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
        rel = self.release()
        if rel is not None:
            out = []
            for n, r in enumerate(rows):
                ref, tgt = r["pth1"].strip(), r["pth2"].strip()
                if tgt not in have:
                    self.subset.skip_query("target not in the release")
                    continue
                if ref not in rel["references"]:
                    self.subset.skip_query("reference not in the release")
                    continue
                meta = {k: r[k] for k in ("txt1", "txt2", "sim_txt", "scores") if k in r}
                meta["release_row"] = len(out)
                out.append(
                    Query(
                        id=str(n),
                        text=r["edit"].strip(),
                        reference=[feature_ref("ref_img_features", ref)],
                        reference_id=ref,
                        targets=[tgt],
                        meta=meta,
                    )
                )
            return self._finish_queries(out, self.cfg.limit)
        out = []
        for n, r in enumerate(
            tqdm(rows, desc="reference keyframes", unit="video", disable=len(rows) < 200, leave=False)
        ):
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
            out.append(
                Query(
                    id=str(n),
                    text=r["edit"].strip(),
                    reference=keyframes(src, self.cfg.num_frames, self._cache()),
                    reference_id=ref,
                    targets=[tgt],
                    meta=meta,
                )
            )
        return self._finish_queries(out, self.cfg.limit)

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        self.check_depth(candidates, 51, "R@50 after masking the reference")
        self.check_targets_indexed([q.targets[0] for q in queries], gallery)
        if self.release() is None:
            self.subset.note(
                "Gallery videos are their middle keyframe (CoVR emb_pool=middle); reference video masked "
                f"in rankings; references are {self.cfg.num_frames} keyframe(s)."
            )
        return covr_metrics(
            self.rankings(candidates, queries, gallery),
            [q.reference_id for q in queries],
            [q.targets[0] for q in queries],
            KS,
        )


def _first_arch(preload: Path) -> str:
    """The arch of the first ``img_features/<arch>_*.pkl`` of a release (``ViT-B/32`` for ``ViT-B/32_*.pkl``)."""
    folder = preload / "img_features"
    hits = sorted(folder.glob("*/*_*.pkl")) if folder.is_dir() else []
    if not hits:
        raise InputError(
            f"dataset 'webvid_covr': no img_features/<arch>_*.pkl under the release folder '{preload}' "
            f"(and there are no videos/ nor frames/)"
        )
    return f"{hits[0].parent.name}/{hits[0].name.split('_', 1)[0]}"
