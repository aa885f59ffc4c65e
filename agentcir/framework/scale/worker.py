"""One shard's scorer: the unit a local sharded search holds per shard and a Ray actor wraps.

:class:`ShardWorker` opens its shard's rows memory-mapped and answers the scoring-core calls of
:class:`~agentcir.framework.shards.ShardSearch` on them, with global row ids in its results.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import AgentcirError


class ShardError(AgentcirError, RuntimeError):
    """A shard could not answer (its worker died and was not restarted); the message names the shard."""


def source_rows(root: Path, shard: dict, source: str) -> np.ndarray:
    """The rows of ``source`` (``image``, or a file of global rows) held by ``shard``, memory-mapped."""
    if source == "image":
        return np.load(root / shard["dir"] / "image_emb.npy", mmap_mode="r")
    a = np.load(source, mmap_mode="r")
    return a[shard["offset"] : shard["offset"] + shard["n"]]


class ShardWorker:
    """Scores one shard (memory-mapped) with the scoring core; the unit a Ray actor wraps.

    Every method takes and returns numpy arrays; ids in results are global rows.
    """

    def __init__(
        self,
        root: str,
        shard: dict,
        backend: str = "auto",
        ann: str | None = None,
        nprobe: int = 16,
        ef_search: int = 64,
        refine: int = 0,
        threads: int = 0,
    ):
        self.root, self.shard, self.backend = Path(root), dict(shard), backend
        self.threads = threads
        self.offset, self.n = int(shard["offset"]), int(shard["n"])
        self._arrays: dict[str, np.ndarray] = {}
        self._ann = None
        self.ann_path, self.nprobe, self.ef_search, self.refine = ann, nprobe, ef_search, refine

    def _hold_threads(self) -> None:
        """Run the next kernel call on at most ``threads`` numba threads (0: all). numba's setting
        belongs to the calling thread, so it is made on each call."""
        if self.threads:
            import numba

            numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))

    def ping(self) -> str:
        return self.shard["dir"]

    def memory(self) -> dict[str, float]:
        """This process's id, resident and peak resident memory (MiB), for the benchmarks."""
        import os
        import resource

        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * resource.getpagesize()
        return {
            "pid": os.getpid(),
            "rss_mb": rss / 2**20,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }

    def array(self, source: str) -> np.ndarray:
        if source not in self._arrays:
            self._arrays[source] = source_rows(self.root, self.shard, source)
        return self._arrays[source]

    def _local_exclude(self, exclude: np.ndarray | None) -> np.ndarray | None:
        if exclude is None:
            return None
        ex = np.asarray(exclude, np.int64)
        local = ex - self.offset
        return np.where((ex >= 0) & (local >= 0) & (local < self.n), local, -1).astype(np.int32)

    def _global(self, scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(ids, np.int64)
        return np.asarray(scores, np.float32), np.where(ids >= 0, ids + self.offset, -1)

    def topk(self, op: str, source: str, args: dict) -> tuple[np.ndarray, np.ndarray]:
        """``cosine_topk`` / ``proxy_scores_topk`` of the scoring core on this shard."""
        from ... import kernels

        self._hold_threads()
        args = dict(args, exclude=self._local_exclude(args.get("exclude")), backend=args.get("backend") or self.backend)
        if op == "cosine_topk" and self.ann_path is not None:
            return self.ann_topk(args["queries"], args["k"], args["exclude"], args.get("exclude_score"), source)
        out = getattr(kernels, op)(gallery=self.array(source), **args)
        return self._global(out.scores, out.ids)

    def gap_sums(self, reference: np.ndarray, proxies: np.ndarray, backend: str | None = None) -> np.ndarray:
        """``sum_j relu(ref.x_j - p.x_j)`` over this shard's rows (OCTOPUS proxy weights), by the kernels."""
        from ... import kernels

        self._hold_threads()
        return np.asarray(
            kernels.octopus_gap_sums(reference, proxies, self.array("image"), backend=backend or self.backend),
            np.float64,
        )

    def drops(self, before: np.ndarray, proxies: np.ndarray, m: int, backend: str | None = None) -> np.ndarray:
        """Per query and proxy the ``m`` largest ``relu(b.x - p.x)`` over this shard's rows (LDRE weights)."""
        from ... import kernels

        self._hold_threads()
        return np.asarray(
            kernels.ldre_top_drops(before, proxies, self.array("image"), topk=m, backend=backend or self.backend),
            np.float32,
        )

    def octopus(
        self,
        e: np.ndarray,
        target: np.ndarray,
        visual: np.ndarray | None,
        captions: str | None,
        k: int,
        lam: float,
        entropy_tau: float,
        exclude: np.ndarray | None,
        exclude_score: float | None,
        backend: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """OCTOPUS fused top-k of this shard for the global query ``e`` (weights already merged):
        scores, global ids, the shard's softmax entropy and its log partition function."""
        from ... import kernels

        self._hold_threads()
        ex = self._local_exclude(exclude)
        C = None if captions is None else self.array(captions)
        out = kernels.octopus_topk(
            e,
            e[:, None, :],
            target,
            self.array("image"),
            k,
            visual=visual,
            captions=C,
            lam=lam,
            entropy_tau=entropy_tau,
            exclude=ex,
            exclude_score=exclude_score,
            backend=backend or self.backend,
        )
        s, i = self._global(out.scores, out.ids)
        return s, i, np.asarray(out.entropy, np.float64), np.asarray(out.log_partition, np.float64)

    # -- approximate search ------------------------------------------------------------------
    def ann_topk(
        self,
        queries: np.ndarray,
        k: int,
        exclude: np.ndarray | None,
        exclude_score: float | None,
        source: str = "image",
    ) -> tuple[np.ndarray, np.ndarray]:
        from .ann import load_index, search_index

        if self._ann is None:
            self._ann = load_index(self.ann_path, self.nprobe, self.ef_search)
        s, i = search_index(
            self._ann,
            np.ascontiguousarray(queries, np.float32),
            k,
            exclude,
            exclude_score,
            refine=self.refine,
            rows=self.array(source) if self.refine else None,
        )
        return self._global(s, i)
