"""Is a gallery far from its encoder's domain? A measured check printed by ``agentcir index``.

An encoder trained on one kind of photo (the bundled catalog encoder: catalogue product shots)
describes other photos badly (it tags a flower "a green backpack"), and everything built on it
(zero-shot tags, the offline visual checks) is then weak. An encoder that knows its domain
says so with a ``domain_sample`` attribute: a folder of photos of that domain. The check embeds
up to ``REFERENCE_SIZE`` of them and measures, for each indexed photo, the cosine similarity to
its nearest reference photo; a photo is *far* when that similarity is below the ``QUANTILE``-th
percentile of the reference photos' own nearest-neighbour similarities (leave-one-out), so on
the encoder's own domain about ``QUANTILE`` % of photos are far by chance. When more than
``FAR_FRACTION`` of the gallery is far, the photos are out of the encoder's domain.

Measured with the bundled catalog encoder (96 reference photos, ``python -m
agentcir.framework.domain FOLDER``, the first 150 photos of each folder): 5 % of the demo's other
product photos are far, 15 % of ``../shared/data/fashion-products`` (the same catalogue), 61 % of the
consumer photos of ``../shared/data/clothing`` and 66 % of the 122 photos of ``../shared/data/exif-photos``.

Encoders without a ``domain_sample`` (general ones such as open_clip) are not checked.

The reference photos' embeddings are kept in the gallery folder (:data:`REFERENCE_FILE`, keyed by
the encoder's identity and the photos' bytes), so a re-index computes nothing, and a Ray
embedding job embeds them on its encoder actors with the gallery's photos: the command's own
process then never loads the encoder (which may be set to a GPU only the actors' nodes have).
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import atomic_path
from .hashing import stable_hash
from .images import list_images

log = logging.getLogger(__name__)

REFERENCE_SIZE = 96
QUANTILE = 5.0
FAR_FRACTION = 0.35
MAX_PHOTOS = 4000


@dataclass
class DomainCheck:
    """The result of :func:`domain_check`."""

    encoder: str
    reference: str
    photos: int
    far_fraction: float  # photos farther from the reference than QUANTILE % of the reference itself
    median_nn: float  # median nearest-reference similarity of the photos
    reference_median_nn: float  # the same within the reference (leave-one-out)
    threshold: float  # the QUANTILE-th percentile of the reference's nearest-neighbour similarities

    @property
    def far(self) -> bool:
        return self.far_fraction > FAR_FRACTION

    def line(self) -> str:
        what = (
            f"{self.far_fraction:.0%} of {self.photos} photo(s) are farther from the encoder's own domain "
            f"({self.reference}) than {100 - QUANTILE:.0f}% of that domain's photos are from each other "
            f"(median nearest-reference similarity {self.median_nn:.2f}, within the domain {self.reference_median_nn:.2f})"
        )
        if not self.far:
            return f"domain check: encoder '{self.encoder}': {what}: close to its domain"
        return (
            f"domain check: the photos look far from the domain of encoder '{self.encoder}': {what}. Its zero-shot tags "
            f"and visual checks will be weak on them; for personal photos index with a general encoder, e.g. "
            f"`encoder=open_clip` (needs its weights; see `agentcir list encoder`)"
        )


def reference_images(encoder) -> list[Path]:
    """Up to ``REFERENCE_SIZE`` photos of the encoder's ``domain_sample`` folder (sorted; [] when none)."""
    folder = getattr(encoder, "domain_sample", None)
    if not folder or not Path(folder).is_dir():
        return []
    return list_images(folder, recursive=False)[0][:REFERENCE_SIZE]


#: the reference photos' embeddings in a gallery folder (see the module docstring)
REFERENCE_FILE = "domain_reference.npz"


def _reference_key(encoder, refs: list[Path]) -> str:
    return stable_hash(encoder.identity, list(refs))  # the photos by their bytes


def store_reference(folder: str | Path, encoder, refs: list[Path], emb: np.ndarray) -> None:
    """Keep the embeddings ``emb`` of the reference photos ``refs`` in gallery ``folder``. Best
    effort: a folder that cannot take them (full, read-only) only means they are embedded again."""
    try:
        with atomic_path(Path(folder) / REFERENCE_FILE) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, emb=np.asarray(emb, np.float32), key=np.array(_reference_key(encoder, refs)))
    except OSError as e:
        log.warning("domain check: the reference embeddings could not be kept in '%s' (%s)", folder, e)


def _stored_reference(folder: str | Path, encoder, refs: list[Path]) -> np.ndarray | None:
    try:
        with np.load(Path(folder) / REFERENCE_FILE) as z:
            return z["emb"] if str(z["key"]) == _reference_key(encoder, refs) else None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # none yet, unreadable: embed them again
        return None


def domain_check(
    encoder, image_emb: np.ndarray, *, name: str = "", folder: str | Path | None = None
) -> DomainCheck | None:
    """Measure how far ``image_emb`` (``[n, d]``, L2-normalised) lies from ``encoder``'s domain
    (see the module docstring); ``None`` when the encoder names no domain or there are fewer than
    5 photos. ``folder``: the gallery's, where the reference embeddings are kept."""
    refs = reference_images(encoder)
    n = len(image_emb)
    if len(refs) < 5 or n < 5:
        return None
    # a fixed, even sample of a large gallery, taken before any conversion (a memory-mapped or
    # sharded gallery is read only at these rows)
    rows = np.linspace(0, n - 1, MAX_PHOTOS).astype(np.int64) if n > MAX_PHOTOS else slice(None)
    emb = np.asarray(image_emb[rows], np.float32)
    ref = _stored_reference(folder, encoder, refs) if folder is not None else None
    if ref is None:
        ref = np.asarray(encoder.encode_images([str(p) for p in refs], progress=False), np.float32)
        if folder is not None:
            store_reference(folder, encoder, refs, ref)
    within = ref @ ref.T
    np.fill_diagonal(within, -np.inf)
    ref_nn = within.max(1)
    nn = (emb @ ref.T).max(1)
    cut = float(np.percentile(ref_nn, QUANTILE))
    return DomainCheck(
        encoder=name or getattr(encoder, "registry_key", type(encoder).__name__),
        reference=f"{len(refs)} photos of {'/'.join(Path(encoder.domain_sample).parts[-2:])}",
        photos=len(emb),
        far_fraction=float(np.mean(nn < cut)),
        median_nn=float(np.median(nn)),
        reference_median_nn=float(np.median(ref_nn)),
        threshold=cut,
    )


if __name__ == "__main__":  # pragma: no cover - the measurement of the docstring
    import os
    import sys

    from .recipe import ComponentPool, compose

    pool = ComponentPool(compose(sys.argv[2:]))
    enc = pool.get("encoder")
    skip = {p.resolve() for p in reference_images(enc)}
    files = [p for p in list_images(sys.argv[1])[0] if p.resolve() not in skip][
        : int(os.environ.get("AGENTCIR_DOMAIN_MAX", "10000"))
    ]
    res = domain_check(enc, enc.encode_images([str(p) for p in files], progress=False))
    print(res.line() if res else "the encoder names no domain (no domain_sample): nothing to check")
