"""Near-duplicate grouping of a result set: the same picture in several files (a JPEG and its
TIFF, a resized or recompressed copy) shows once, with its copies behind it.

Two hits are copies of one picture when

1. the cosine of their image embeddings (the gallery's, already computed) is at least
   ``threshold`` (default :data:`DEFAULT_THRESHOLD`), and
2. their perceptual hashes (a 64-bit difference hash of the small thumbnail, :func:`dhash`)
   differ in at most ``hash_distance`` bits (default :data:`DEFAULT_HASH_DISTANCE`; ``-1``
   skips this check). Embeddings of one encoder put different photos of one kind close
   together (two product shots on white can reach a cosine of 0.995); the hash tells a copy
   from a look-alike. It is computed only for hits that pass the cosine test, from the 128 px
   thumbnail (made and cached if missing), and kept in memory per file.

Grouping is greedy in rank order: each hit joins the first earlier group whose **leader**
(its best-ranked hit) it matches, else it leads a new group; a group never chains through a
middle member. ``threshold = 0`` turns grouping off (every hit is its own group).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

#: cosine of image embeddings at or above which two hits may be copies of one picture
DEFAULT_THRESHOLD = 0.97
#: most differing bits (of 64) of two copies' difference hashes
DEFAULT_HASH_DISTANCE = 10


def dhash(image) -> int:
    """The 64-bit difference hash of a PIL image: 9x8 grey pixels, one bit per horizontal step
    (brighter to the right or not). Resizing, recompression and format changes keep it within a
    few bits; another photo differs in about half of them."""
    from PIL import Image

    g = image.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    a = np.asarray(g, dtype=np.int16)
    bits = (a[:, 1:] > a[:, :-1]).ravel()
    return int(sum(1 << i for i, b in enumerate(bits) if b))


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def check_threshold(threshold: float) -> float:
    t = float(threshold)
    if not (t == 0 or 0.5 <= t <= 1.0):
        raise ValueError(f"dup_threshold: {threshold} is not 0 (off) or a cosine between 0.5 and 1")
    return t


def group_rows(
    rows: Sequence[int],
    vectors: np.ndarray,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    hash_of: Optional[Callable[[int], Optional[int]]] = None,
    hash_distance: int = DEFAULT_HASH_DISTANCE,
) -> list[list[int]]:
    """Groups of positions into ``rows`` (in rank order), each led by its best-ranked hit.

    Args:
        rows: the gallery rows of the hits, best first.
        vectors: their image embeddings, one row each (normalised here).
        threshold: the cosine test (0: no grouping).
        hash_of: a gallery row's perceptual hash, or None when it has none (then only the cosine decides).
        hash_distance: the hash test (-1: skipped).
    """
    t = check_threshold(threshold)
    n = len(rows)
    if t == 0 or n < 2:
        return [[i] for i in range(n)]
    v = np.asarray(vectors, dtype=np.float32).reshape(n, -1)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sims = v @ v.T
    hashes: dict[int, Optional[int]] = {}

    def h(i: int) -> Optional[int]:
        if i not in hashes:
            hashes[i] = hash_of(int(rows[i])) if hash_of is not None else None
        return hashes[i]

    groups: list[list[int]] = []
    for i in range(n):
        for grp in groups:
            lead = grp[0]
            if sims[i, lead] < t:
                continue
            if hash_distance >= 0 and hash_of is not None:
                a, b = h(i), h(lead)
                if a is not None and b is not None and hamming(a, b) > hash_distance:
                    continue
            grp.append(i)
            break
        else:
            groups.append([i])
    return groups
