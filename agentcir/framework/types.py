"""The data that flows through a run (docs/design/principles.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Query:
    """One retrieval request.

    Composed retrieval: ``reference`` (image path(s); several = video keyframes) and
    ``text`` (the modification). History search: ``user`` and ``text`` (the question).
    ``targets`` are ground-truth gallery item ids when known (evaluation only; methods
    must not read them).
    """

    id: str
    text: str
    reference: list[str] = field(default_factory=list)
    reference_id: str | None = None
    user: str | None = None
    targets: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def reference_paths(self) -> list[Path]:
        """The reference image (or keyframe) files as paths."""
        return [Path(p) for p in self.reference]

    def to_json(self) -> dict:
        """The query as a JSON-ready dict (the inverse of :meth:`from_json`)."""
        return {
            "id": self.id,
            "text": self.text,
            "reference": list(self.reference),
            "reference_id": self.reference_id,
            "user": self.user,
            "targets": list(self.targets),
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Query":
        """A query from the dict :meth:`to_json` wrote."""
        return cls(**d)


@dataclass
class Candidates:
    """Ranked gallery rows per query: ``ids int32[Q,k]`` (-1 = padding), ``scores float32[Q,k]``."""

    ids: np.ndarray
    scores: np.ndarray

    def __post_init__(self):
        self.ids = np.ascontiguousarray(self.ids, dtype=np.int32)
        self.scores = np.ascontiguousarray(self.scores, dtype=np.float32)
        if self.ids.ndim != 2 or self.ids.shape != self.scores.shape:
            raise ValueError(
                f"Candidates need ids and scores of one shape [Q,k], got {self.ids.shape} and {self.scores.shape}"
            )

    @property
    def num_queries(self) -> int:
        """Q, the number of ranked queries."""
        return self.ids.shape[0]

    @property
    def k(self) -> int:
        """The depth of each ranking."""
        return self.ids.shape[1]

    def row(self, q: int) -> list[int]:
        """Query ``q``'s ranked gallery rows, without the ``-1`` padding."""
        r = self.ids[q]
        return [int(i) for i in r[r >= 0]]

    def save(self, path: str | Path) -> None:
        """Write ids and scores to the ``.npz`` file ``path`` atomically."""
        path = Path(path)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, ids=self.ids, scores=self.scores)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "Candidates":
        """Read candidates written by :meth:`save`."""
        with np.load(path) as z:
            return cls(z["ids"], z["scores"])

    @classmethod
    def from_scores(cls, scores: np.ndarray, k: int) -> "Candidates":
        """Top-k of a dense ``[Q,N]`` score matrix (ties: lower row id first)."""
        scores = np.asarray(scores, dtype=np.float32)
        q, n = scores.shape
        k = min(k, n)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return cls(order.astype(np.int32), np.take_along_axis(scores, order, 1))
