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

log = logging.getLogger(__name__)


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
            self.subset.note(
                f"Rankings hold {candidates.k} items but {why} needs {need}: raise the method's top_k "
                f"(items beyond the ranking count as misses)."
            )

    def check_targets_indexed(self, targets: Iterable[str], gallery: "Gallery", what: str = "target") -> None:
        """Note ground-truth items that the indexer had to skip (unreadable images)."""
        missing = {t for t in targets if gallery.index_of(t) < 0}
        if missing:
            self.subset.note(
                f"{len(missing)} {what} image(s) are not in the indexed gallery (unreadable) and cannot be retrieved."
            )


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


def _shown(value: Any) -> str:
    """How a wrong value is named in an error: its JSON type and a short excerpt."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r}{'...' if len(value) > 40 else ''})" if value else "an empty string"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"an object with {', '.join(map(str, list(value)[:5])) or 'no fields'}"
    return type(value).__name__


class Record:
    """Typed access to one annotation record: every error names the file, the record (line or
    index, and id once known), the field, what was expected and what came.

    ``Record(row, path, "line 3", what="dataset 'cirr'").id("pairid")``
    """

    def __init__(self, row: Any, path: Path | str, where: str, *, what: str):
        self.path, self.where, self.what = path, where, what
        if not isinstance(row, dict):
            raise InputError(f"{what}: '{path}' {where}: expected a JSON object, got {_shown(row)}")
        self.row = row

    def keyed(self, key: str, seen: list[tuple[str, str]]) -> str:
        """The record's id field ``key``: named in every later error of this record, and appended
        with the record to ``seen`` (for :func:`check_unique`)."""
        rid = self.id(key)
        self.where = f"{self.where} ({key} {rid})"
        seen.append((rid, self.where))
        return rid

    def fail(self, key: str, expected: str, value: Any, *, got: str | None = None) -> InputError:
        return InputError(
            f"{self.what}: '{self.path}' {self.where}: field '{key}': expected {expected}, got {got or _shown(value)}"
        )

    def _get(self, key: str, optional: bool) -> Any:
        if key not in self.row:
            if optional:
                return None
            raise InputError(
                f"{self.what}: '{self.path}' {self.where}: missing field '{key}' "
                f"(has: {', '.join(sorted(map(str, self.row))) or 'none'})"
            )
        return self.row[key]

    def text(self, key: str, *, optional: bool = False, default: str | None = None, empty: bool = True) -> str | None:
        """A string field (``null`` is an error unless ``optional``, then ``default``)."""
        v = self._get(key, optional)
        if v is None and optional:
            return default
        if not isinstance(v, str) or (not empty and not v.strip()):
            raise self.fail(key, "a string" if empty else "a non-empty string", v)
        return v

    @staticmethod
    def _is_id(v: Any) -> bool:
        return (isinstance(v, str) and bool(v.strip())) or (isinstance(v, int) and not isinstance(v, bool))

    def id(self, key: str, *, optional: bool = False) -> str | None:
        """An id: a non-empty string or an integer, returned as a string."""
        v = self._get(key, optional)
        if v is None and optional:
            return None
        if not self._is_id(v):
            raise self.fail(key, "an id (a non-empty string or an integer)", v)
        return str(v)

    def ids(self, key: str, *, optional: bool = False) -> list[str]:
        """A list of ids (a bare string is an error, not split into characters)."""
        v = self._get(key, optional)
        if v is None and optional:
            return []
        if not isinstance(v, list) or not all(self._is_id(x) for x in v):
            got = None
            if isinstance(v, list):
                got = f"{_shown(v)} holding {_shown(next(x for x in v if not self._is_id(x)))}"
            raise self.fail(key, "a list of ids (strings or integers)", v, got=got)
        return [str(x) for x in v]

    def texts(self, key: str, *, optional: bool = False) -> list[str]:
        v = self._get(key, optional)
        if v is None and optional:
            return []
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(key, "a list of strings", v)
        return list(v)

    def mapping(self, key: str, *, optional: bool = False) -> dict:
        v = self._get(key, optional)
        if v is None and optional:
            return {}
        if not isinstance(v, dict):
            raise self.fail(key, "an object", v)
        return v


def check_unique(ids: Sequence[tuple[str, str]], path: Path | str, what: str, kind: str = "query id") -> None:
    """``ids``: (id, where) pairs; a repeated id is an error naming both records."""
    seen: dict[str, str] = {}
    for i, where in ids:
        if i in seen:
            raise InputError(f"{what}: '{path}': duplicate {kind} '{i}' ({seen[i]} and {where})")
        seen[i] = where


def read_json_list(path: Path, what: str) -> list:
    """A JSON file that must hold a list (of records)."""
    data = read_json(path, what)
    if not isinstance(data, list):
        raise InputError(f"{what}: '{path}' should hold a JSON list of records, got {_shown(data)}")
    return data
