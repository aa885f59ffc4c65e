"""Dataset interface: gallery items, queries, and the benchmark's own metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..component import Component

if TYPE_CHECKING:  # pragma: no cover
    from ..gallery import Gallery, GalleryItem
    from ..types import Candidates, Query


class Dataset(Component):
    """A benchmark or a user collection.

    ``gallery_items`` lists what to index (missing files are skipped and counted, never
    silently), ``queries`` the batch, and ``evaluate`` computes the benchmark's metrics
    exactly as its official code does, on rankings of gallery rows.
    """

    kind: ClassVar[str] = "dataset"

    def gallery_items(self) -> list["GalleryItem"]:  # pragma: no cover - abstract
        raise NotImplementedError

    def queries(self) -> list["Query"]:  # pragma: no cover - abstract
        raise NotImplementedError

    def evaluate(self, candidates: "Candidates", queries: list["Query"], gallery: "Gallery") -> dict[str, float]:
        """Metrics for a ranking (``{}`` when the dataset has no ground truth)."""
        return {}

    def subset_note(self) -> str:
        """One line saying exactly which subset a run evaluated (split, counts, skips)."""
        return ""
