"""DISBench (DeepImageSearch, Deng et al. 2026): questions over a personal photo history whose
answers are sets of photo ids.

Official layout (``root``)::

    queries.jsonl             {"query_id", "user_id", "query", "answer": [photo ids], "event_type": "intra-event"|"inter-event"}
    metadata/{user_id}.jsonl  {"photo_id", "metadata": {"taken_time", "longitude", "latitude", "accuracy",
                                                        "address", "capturedevice", ...}}
    images/{user_id}/{photo_id}.jpg

Protocol (DISBench leaderboard): per query, set precision / recall / F1 and exact match of
the answered photo ids against ``answer``; each macro-averaged (mean over queries)
overall, over intra-event and over inter-event queries; ``Best@k`` = per query the best F1
over k independent runs (``agentcir eval --best-of RUN...``).

One run indexes the photos of every selected user; a query is answered from its own
user's photos only, so rankings are restricted to that user before scoring. The answer
set of a query is its whole candidate list (set-answering methods such as ImageSeeker
return exactly their set, padded with -1), or its top ``answer_k`` for ranking methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ...registry import DATASETS
from ..errors import InputError
from ..eval.metrics import best_at_k, disbench_metrics, ranked_set_recall
from ..gallery import GalleryItem
from ..hashing import stable_hash
from ..types import Candidates, Query
from .base import Dataset, files_by_stem, read_jsonl, require_field, resolve_root

HINT = "the DISBench folder with queries.jsonl, metadata/ and images/"
RECALL_KS = (1, 3, 5, 10)
EVENT_TYPES = ("intra-event", "inter-event")


@DATASETS.register("disbench")
class DISBench(Dataset):
    """DISBench-format photo-history questions (see the module docstring).

    Config:
        root: the DISBench folder.
        users: only these user ids (empty = every user with a query).
        answer_k: answer set = the top ``answer_k`` of each ranking (0 = the whole candidate list).
        limit: use only the first ``limit`` usable queries (0 = all).
    """

    title = "DISBench"

    @dataclass
    class Config:
        root: str = ""
        users: list[str] = field(default_factory=list)
        answer_k: int = 0
        limit: int = 0

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        if self.cfg.answer_k < 0:
            raise InputError(
                f"dataset 'disbench': field 'answer_k' must be 0 (whole list) or positive, got {self.cfg.answer_k}"
            )
        self._rows: list[dict] | None = None
        self._items: list[GalleryItem] | None = None
        self._user_of: dict[str, str] = {}

    def _root(self) -> Path:
        return resolve_root(self.cfg.root, "dataset 'disbench'", HINT)

    def model_identity(self) -> str:
        try:
            return stable_hash(self._root() / "queries.jsonl", n=16)
        except (InputError, OSError):
            return ""

    def _query_rows(self) -> list[dict]:
        if self._rows is None:
            path = self._root() / "queries.jsonl"
            if not path.is_file():
                raise InputError(f"dataset 'disbench': '{path}' not found ({HINT})")
            rows = read_jsonl(path, "dataset 'disbench'")
            for n, r in enumerate(rows, 1):
                for k in ("query_id", "user_id", "query", "answer", "event_type"):
                    require_field(r, k, f"dataset 'disbench': queries.jsonl line {n}")
                if str(r["event_type"]) not in EVENT_TYPES:
                    raise InputError(
                        f"dataset 'disbench': queries.jsonl line {n}: event_type must be "
                        f"{' or '.join(EVENT_TYPES)}, got '{r['event_type']}'"
                    )
            self._rows = rows
        return self._rows

    def users(self) -> list[str]:
        """The users this run covers."""
        if self.cfg.users:
            return [str(u) for u in self.cfg.users]
        return list(dict.fromkeys(str(r["user_id"]) for r in self._query_rows()))

    def gallery_items(self) -> list[GalleryItem]:
        if self._items is None:
            root = self._root()
            items, missing, listed = [], [], 0
            for user in self.users():
                meta_path = root / "metadata" / f"{user}.jsonl"
                if not meta_path.is_file():
                    raise InputError(f"dataset 'disbench': metadata file '{meta_path}' for user '{user}' not found")
                on_disk = files_by_stem(root / "images" / user, (".jpg", ".jpeg", ".png"))
                for n, rec in enumerate(read_jsonl(meta_path, "dataset 'disbench'"), 1):
                    pid = str(require_field(rec, "photo_id", f"dataset 'disbench': {meta_path.name} line {n}"))
                    listed += 1
                    if pid in self._user_of:
                        raise InputError(
                            f"dataset 'disbench': photo id '{pid}' appears for users '{self._user_of[pid]}' and '{user}'"
                        )
                    self._user_of[pid] = user
                    p = on_disk.get(pid)
                    if p is None:
                        missing.append(pid)
                        continue
                    items.append(
                        GalleryItem(pid, str(p.resolve()), None, {"user": user, **(rec.get("metadata") or {})})
                    )
            self.subset.gallery_listed = listed
            self.subset.gallery_missing = missing
            self._items = items
        return self._items

    def queries(self) -> list[Query]:
        self.gallery_items()
        rows = self._query_rows()
        users = set(self.users())
        self.subset.query_skips.clear()
        self.subset.queries_listed = len(rows)
        out = []
        for r in rows:
            if str(r["user_id"]) not in users:
                self.subset.skip_query("of users not selected (dataset.users)")
                continue
            out.append(
                Query(
                    id=str(r["query_id"]),
                    text=str(r["query"]),
                    user=str(r["user_id"]),
                    targets=[str(a) for a in r["answer"]],
                    meta={"event_type": str(r["event_type"])},
                )
            )
        return self._finish_queries(out, self.cfg.limit)

    # -- evaluation -------------------------------------------------------------------
    def answers(self, rankings: Sequence[Sequence[str]], queries: Sequence[Query]) -> list[list[str]]:
        """Answer sets: each ranking restricted to the query user's photos, cut at ``answer_k``."""
        self.gallery_items()
        out = []
        for r, q in zip(rankings, queries):
            own = [x for x in r if self._user_of.get(x) == q.user]
            out.append(own[: self.cfg.answer_k] if self.cfg.answer_k else own)
        return out

    def evaluate(self, candidates: Candidates, queries: list[Query], gallery) -> dict[str, float]:
        rankings = self.rankings(candidates, queries, gallery)
        answers = self.answers(rankings, queries)
        self.check_targets_indexed([t for q in queries for t in q.targets], gallery, "answer")
        self.subset.note(
            "Rankings restricted to the query user's photos; answer set = "
            + (f"top {self.cfg.answer_k}." if self.cfg.answer_k else "the whole candidate list.")
        )
        gts, types = [q.targets for q in queries], [q.meta["event_type"] for q in queries]
        own = [[x for x in r if self._user_of.get(x) == q.user] for r, q in zip(rankings, queries)]
        return {**disbench_metrics(answers, gts, types), **ranked_set_recall(own, gts, RECALL_KS)}

    def best_of(self, runs: Sequence[Mapping[str, Sequence[str]]]) -> dict[str, float]:
        """``Best@k`` over k runs given as {query id: ranked photo ids} (``agentcir eval --best-of``)."""
        queries = self.queries()
        for i, r in enumerate(runs):
            missing = [q.id for q in queries if q.id not in r]
            if missing:
                raise InputError(
                    f"run {i + 1} of {len(runs)} has no answer for query '{missing[0]}' ({len(missing)} missing)"
                )
        answer_runs = [self.answers([r[q.id] for q in queries], queries) for r in runs]
        return best_at_k(answer_runs, [q.targets for q in queries], [q.meta["event_type"] for q in queries])
