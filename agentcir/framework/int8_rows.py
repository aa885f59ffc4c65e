"""The image embeddings of an int8 gallery (``run.gallery_dtype=int8``): float32 rows that score as int8.

:class:`Int8Rows` is the gallery's float32 ``image_emb`` (a memory map; every array use, gathers and
shapes included, sees those float32 rows) carrying the gallery's :class:`agentcir.kernels.Int8Gallery`
(``image_codes.npy`` + ``image_scales.npy``). Passed as the gallery of ``cosine_topk`` /
``octopus_topk`` / ``octopus_weights`` / ``octopus_gap_sums`` it routes the call (the scoring core's
``__agentcir_kernel__`` hook) to the int8 scan with the exact float32 re-rank of a shortlist
(``rerank=`` the float32 rows; agentcir/kernels/README.md "Precision"); every other op, and any
slice or copy of it, scores the float32 rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Int8Rows(np.ndarray):
    """float32 ``[N, d]`` rows whose gallery ops run on their int8 codes, re-ranked exactly."""

    int8: Any = None  # the Int8Gallery of exactly these rows (None on slices, copies and views)

    @classmethod
    def wrap(cls, rows: np.ndarray, int8) -> "Int8Rows":
        out = rows.view(cls)
        out.int8 = int8
        return out

    def __array_finalize__(self, obj) -> None:
        self.int8 = None  # a slice or a copy is no longer the whole gallery the codes stand for

    def __reduce__(self):  # pickled (e.g. sent to a worker) as the plain float32 rows
        return np.asarray(self).__reduce__()

    def __agentcir_kernel__(self, name: str, a: dict[str, Any]):
        from ..kernels import api

        fn = getattr(api, name)
        plain = np.asarray(self)
        a = dict(a)
        if self.int8 is None or name not in ("cosine_topk", "octopus_topk", "octopus_weights", "octopus_gap_sums"):
            a["images" if name == "octopus_topk" else "gallery"] = plain
            if name == "octopus_topk" and isinstance(a.get("captions"), Int8Rows):
                a["captions"] = np.asarray(a["captions"])
            return fn(**a)
        if name == "cosine_topk":
            a["gallery"] = self.int8
            if a.get("rerank") is None:
                a["rerank"] = plain
            return fn(**a)
        if name in ("octopus_weights", "octopus_gap_sums"):
            a["gallery"] = self.int8
            return fn(**a)
        # octopus_topk: the images as int8 (re-ranked against these rows); captions stay as given
        a["images"] = self.int8
        caps = a.get("captions")
        if a.get("rerank_images") is None:
            a["rerank_images"] = plain
            if caps is not None:
                rows = np.asarray(caps)
                a["rerank_captions"] = rows if rows.dtype == np.float32 else rows.astype(np.float32)
                if isinstance(caps, Int8Rows) and caps.int8 is not None:
                    a["captions"] = caps.int8
                else:
                    a["captions"] = rows
        return fn(**a)
