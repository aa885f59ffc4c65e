"""Named photo subsets: the explicit state memory of a search agent (ImageSeeker).

A tool that finds photos (``image_search``, ``filter_metadata``) can save its result under a
name; later calls search or filter *within* a saved subset, and the final answer cites the
chain of subsets that produced it. :class:`NamedSubsets` is that store (one per agent
session); the ``subsets`` memory component hands out one store per session key and
persists each as JSON when given a folder, so an interrupted run resumes with its subsets.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ...framework.errors import InputError
from ...framework.interfaces import Memory
from ...registry import MEMORIES

MAX_NAME = 100


class SubsetError(InputError):
    """An unknown subset name, a bad name, or a broken subsets file."""


@dataclass
class Subset:
    """A named, ordered set of photo ids and where it came from.

    Attributes:
        name: the name it is saved under.
        ids: photo ids, in the order the producing tool ranked them (no duplicates).
        source: how it was made, e.g. ``image_search(query='cat', top_k=50)`` or ``union(a, b)``.
        parents: the subsets it was derived from (``search_within`` / ``filter_within`` / set operations).
        created: time it was saved (seconds since the epoch).
    """

    name: str
    ids: list[str]
    source: str = ""
    parents: list[str] = field(default_factory=list)
    created: float = 0.0

    def __len__(self) -> int:
        return len(self.ids)

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "size": len(self.ids), "source": self.source, "parents": list(self.parents)}


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise SubsetError(f"a subset name must be a non-empty string, got {name!r}")
    name = name.strip()
    if len(name) > MAX_NAME:
        raise SubsetError(f"subset name '{name[:40]}...' is longer than {MAX_NAME} characters")
    return name


def _unique(ids: Iterable[Any]) -> list[str]:
    if isinstance(ids, (str, bytes)):
        raise SubsetError(f"subset ids must be a list of ids, got the single string {ids!r}")
    return list(dict.fromkeys(str(i) for i in ids))


class NamedSubsets:
    """Named photo subsets of one agent session (thread-safe).

    Args:
        path: JSON file the store is loaded from (if it exists) and saved to after every
            change; ``None`` keeps it in memory only.
    """

    VERSION = 1

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path).expanduser() if path is not None else None
        self._subsets: dict[str, Subset] = {}
        self._lock = threading.RLock()
        if self.path is not None and self.path.is_file():
            self._load()

    # -- persistence ----------------------------------------------------------------------
    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            items = data["subsets"]
            self._subsets = {
                s["name"]: Subset(
                    s["name"],
                    [str(i) for i in s["ids"]],
                    s.get("source", ""),
                    list(s.get("parents", [])),
                    float(s.get("created", 0.0)),
                )
                for s in items
            }
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SubsetError(
                f"subsets file '{self.path}' is not a valid subsets file ({type(e).__name__}: {e}); "
                "delete it to start with no subsets"
            ) from None

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), ensure_ascii=False), encoding="utf-8")
        tmp.replace(self.path)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {"version": self.VERSION, "subsets": [asdict(s) for s in self._subsets.values()]}

    # -- reading --------------------------------------------------------------------------
    def names(self) -> list[str]:
        with self._lock:
            return list(self._subsets)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip() in self._subsets

    def __len__(self) -> int:
        return len(self._subsets)

    def _unknown(self, name: str) -> SubsetError:
        have = ", ".join(f"{s.name} ({len(s)})" for s in self._subsets.values())
        return SubsetError(
            f"unknown subset '{name}'; " + (f"saved subsets: {have}" if have else "no subset has been saved yet")
        )

    def get(self, name: str) -> Subset:
        """The subset ``name``; an unknown name raises :class:`SubsetError` listing the saved ones."""
        name = _check_name(name)
        with self._lock:
            s = self._subsets.get(name)
            if s is None:
                raise self._unknown(name)
            return Subset(s.name, list(s.ids), s.source, list(s.parents), s.created)

    def ids(self, name: str) -> list[str]:
        return self.get(name).ids

    def list(self) -> list[dict[str, Any]]:
        """Name, size, source and parents of every subset, oldest first."""
        with self._lock:
            return [s.summary() for s in self._subsets.values()]

    def lineage(self, name: str) -> list[Subset]:
        """The chain of subsets that produced ``name``: its ancestors (oldest first), then itself."""
        out: list[Subset] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen:
                return
            seen.add(n)
            s = self.get(n)
            for p in s.parents:
                if p in self:
                    visit(p)
            out.append(s)

        visit(_check_name(name))
        return out

    # -- writing --------------------------------------------------------------------------
    def save(self, name: str, ids: Iterable[Any], *, source: str = "", parents: Sequence[str] = ()) -> Subset:
        """Save (or replace) subset ``name``; ids keep their order, duplicates dropped."""
        name = _check_name(name)
        parents = [_check_name(p) for p in parents]
        with self._lock:
            missing = [p for p in parents if p not in self._subsets and p != name]
            if missing:
                raise self._unknown(missing[0])
            s = Subset(name, _unique(ids), str(source), parents, time.time())
            self._subsets[name] = s
            self._save()
            return self.get(name)

    def delete(self, name: str) -> None:
        name = _check_name(name)
        with self._lock:
            if name not in self._subsets:
                raise self._unknown(name)
            del self._subsets[name]
            self._save()

    def clear(self) -> None:
        with self._lock:
            self._subsets.clear()
            self._save()

    def _combine(self, op: str, name: str, names: Sequence[str]) -> Subset:
        if not names:
            raise SubsetError(f"{op} needs at least one subset name")
        sets = [self.get(n) for n in names]
        if op == "union":
            ids = [i for s in sets for i in s.ids]
        elif op == "intersect":
            common = set(sets[0].ids).intersection(*(set(s.ids) for s in sets[1:]))
            ids = [i for i in sets[0].ids if i in common]
        else:  # difference: the first minus all others
            drop = set().union(*(set(s.ids) for s in sets[1:]))
            ids = [i for i in sets[0].ids if i not in drop]
        return self.save(name, ids, source=f"{op}({', '.join(s.name for s in sets)})", parents=[s.name for s in sets])

    def union(self, name: str, *names: str) -> Subset:
        """Save under ``name`` every id of ``names`` (first-seen order)."""
        return self._combine("union", name, names)

    def intersect(self, name: str, *names: str) -> Subset:
        """Save under ``name`` the ids in all of ``names`` (in the first one's order)."""
        return self._combine("intersect", name, names)

    def difference(self, name: str, first: str, *others: str) -> Subset:
        """Save under ``name`` the ids of ``first`` that are in none of ``others``."""
        return self._combine("difference", name, (first, *others))

    # -- search / filter within -----------------------------------------------------------
    def within(self, spec: str | Sequence[str] | None) -> set[str] | None:
        """The ids a ``search_within`` / ``filter_within`` argument allows.

        ``None`` or ``""``: everything (returns ``None``); a name: that subset; a list of
        names: their union.
        """
        if spec is None or (isinstance(spec, str) and not spec.strip()):
            return None
        names = [spec] if isinstance(spec, str) else list(spec)
        if not names:
            return None
        return set().union(*(set(self.ids(n)) for n in names))

    def mask(self, spec: str | Sequence[str] | None, ids_in_order: Sequence[Any]) -> np.ndarray:
        """Boolean ``[N]`` mask over a collection's ids (e.g. gallery rows) for ``spec``
        (see :meth:`within`); all true when ``spec`` is empty."""
        allowed = self.within(spec)
        if allowed is None:
            return np.ones(len(ids_in_order), dtype=bool)
        return np.fromiter((str(i) in allowed for i in ids_in_order), dtype=bool, count=len(ids_in_order))


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@MEMORIES.register("subsets")
class SubsetsMemory(Memory):
    """Named photo subsets, one store per agent session (see :class:`NamedSubsets`).

    Config:
        dir: folder where each session's subsets are saved as ``<session>.json`` (and
            reloaded on resume); ``None`` keeps them in memory only.
    """

    @dataclass
    class Config:
        dir: str | None = None

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        self._stores: dict[str, NamedSubsets] = {}
        self._lock = threading.Lock()

    def session(self, key: str, *, dir: str | os.PathLike | None = None) -> NamedSubsets:
        """The subsets of session ``key`` (e.g. a query id); the same store for the same key.

        ``dir`` overrides the configured folder (e.g. the run directory).
        """
        if not isinstance(key, str) or not key:
            raise SubsetError(f"a subsets session key must be a non-empty string, got {key!r}")
        folder = dir if dir is not None else self.cfg.dir
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                path = Path(folder).expanduser() / f"{_SAFE.sub('_', key)}.json" if folder else None
                store = self._stores[key] = NamedSubsets(path)
            return store
