"""Seeded benchmark inputs (unit vectors; OCTOPUS-like proxies), the baselines the kernels are
compared with (straightforward numpy / torch implementations; the exact-search peers faiss
``IndexFlatIP``, usearch exact search and hnswlib's brute-force index), and the CPU line
printed next to every table (:func:`cpu_summary`)."""

from __future__ import annotations

import numpy as np

from agentcir.kernels._inputs import float32_to_bfloat16_bits


def unit(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape, dtype=np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x


def as_kind(G: np.ndarray, kind: str) -> np.ndarray:
    if kind == "float32":
        return G
    if kind == "float16":
        return G.astype(np.float16)
    import ml_dtypes

    return float32_to_bfloat16_bits(G).view(ml_dtypes.bfloat16)


def gallery(N: int, d: int, seed: int = 0) -> np.ndarray:
    """``[N, d]`` unit rows, generated in chunks (no float64 temporaries of the whole gallery)."""
    rng = np.random.default_rng(seed)
    G = np.empty((N, d), dtype=np.float32)
    for s in range(0, N, 65536):
        G[s : s + 65536] = unit(rng, min(65536, N - s), d)
    return G


def octopus_inputs(Q: int, K: int, N: int, d: int, seed: int = 1) -> dict:
    """Reference, K textual proxies near it, target and visual queries, image and caption galleries."""
    rng = np.random.default_rng(seed)
    I = gallery(N, d, seed)
    C = gallery(N, d, seed + 1)
    C += 0.5 * I  # captions correlate with their images
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    ref = unit(rng, Q, d)
    P = ref[:, None, :] * 0.5 + unit(rng, Q, K, d) * 0.5
    P /= np.linalg.norm(P, axis=-1, keepdims=True)
    qt = P.mean(axis=1) + unit(rng, Q, d) * 0.3
    qt /= np.linalg.norm(qt, axis=1, keepdims=True)
    qv = ref + unit(rng, Q, d) * 0.5
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    return dict(
        ref=ref,
        P=P.astype(np.float32),
        qt=qt.astype(np.float32),
        qv=qv.astype(np.float32),
        I=I,
        C=C,
        exclude=rng.integers(0, N, size=Q),
    )


# -- baselines -------------------------------------------------------------------------
def numpy_topk(q: np.ndarray, G: np.ndarray, k: int):
    """Straightforward numpy: ``q @ G.T`` then argpartition + sort."""
    S = q @ G.T
    part = np.argpartition(-S, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
    ids = np.take_along_axis(part, order, axis=1)
    return np.take_along_axis(S, ids, axis=1), ids


def torch_topk(q, G, k: int):
    """Straightforward torch: matmul + topk."""
    import torch

    return torch.topk(q @ G.T, k, dim=1)


def torch_proxy(P, G, k: int, agg: str, tau: float = 0.04):
    """Straightforward torch: one ``[Q, K, N]`` score tensor, reduce, topk."""
    import torch

    Q, K, d = P.shape
    S = (P.reshape(Q * K, d) @ G.T).view(Q, K, -1)
    A = S.mean(dim=1) if agg == "mean" else tau * torch.logsumexp(S / tau, dim=1)
    return torch.topk(A, k, dim=1)


def torch_octopus_weights(ref, P, I, tau: float = 0.04):
    import torch

    Q, K, d = P.shape
    Sr = ref @ I.T
    SE = (P.reshape(Q * K, d) @ I.T).view(Q, K, -1)
    s = torch.relu(Sr[:, None, :] - SE).mean(dim=-1)
    return torch.softmax(s / tau, dim=-1)


def torch_octopus(ref, P, qt, qv, I, C, exclude, k: int, lam: float = 0.2, tau: float = 0.04):
    """The straightforward torch OCTOPUS fusion of docs/design/methods.md (matmuls, elementwise, topk)."""
    import torch

    w = torch_octopus_weights(ref, P, I, tau)
    e = (w[..., None] * P).sum(dim=1)
    e = e / e.norm(dim=1, keepdim=True)
    St = ((e + qt) / 2) @ I.T
    Sv = qv @ C.T
    S = lam * St + (1 - lam) * (Sv * St)
    S[torch.arange(S.shape[0]), exclude] = -10.0
    return torch.topk(S, k, dim=1)


class FaissFlatIP:
    """faiss ``IndexFlatIP`` over the gallery; ``search(..., blas_threshold=)`` sets
    ``faiss.cvar.distance_compute_blas_threshold`` around the search (faiss-cpu 1.15 scans
    query by query below it: 128,000 by default; 1 makes every batch one BLAS product)."""

    def __init__(self, G: np.ndarray):
        import faiss

        self.faiss = faiss
        self.index = faiss.IndexFlatIP(G.shape[1])
        self.index.add(G)

    def search(self, q: np.ndarray, k: int, blas_threshold: int | None = None):
        cvar = self.faiss.cvar
        old = cvar.distance_compute_blas_threshold
        if blas_threshold is not None:
            cvar.distance_compute_blas_threshold = blas_threshold
        try:
            return self.index.search(q, k)
        finally:
            cvar.distance_compute_blas_threshold = old


class UsearchExact:
    """usearch's exact (brute-force) search, ``usearch.index.search(..., exact=True)``: inner
    products (``MetricKind.IP``) over the gallery array itself (no copy), all cores."""

    def __init__(self, G: np.ndarray):
        from usearch.index import MetricKind, search

        self.G, self._search, self._ip = G, search, MetricKind.IP

    def search(self, q: np.ndarray, k: int):
        m = self._search(self.G, q, k, self._ip, exact=True, threads=0)
        return m.distances.reshape(len(q), -1), m.keys.reshape(len(q), -1)  # one query: 1-d arrays


class HnswlibBF:
    """hnswlib ``BFIndex`` (its brute-force index, space ``ip``) over a copy of the gallery, all cores."""

    def __init__(self, G: np.ndarray):
        import hnswlib

        self.index = hnswlib.BFIndex(space="ip", dim=G.shape[1])
        self.index.init_index(max_elements=G.shape[0])
        self.index.add_items(G)

    def search(self, q: np.ndarray, k: int):
        labels, dist = self.index.knn_query(q, k=k, num_threads=-1)
        return dist, labels


def cpu_summary(flags: set[str] | None = None, brand: str | None = None, count: int | None = None) -> str:
    """``"<model>, <n> CPUs, AVX-512 yes/no, AVX512-BF16 yes/no, AMX yes/no"`` of this machine
    (``/proc/cpuinfo``), or of the ``flags`` / ``brand`` / ``count`` given (a saved run's machine info)."""
    import os

    count = count or os.cpu_count()
    if flags is None or brand is None:
        info = {}
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    info.setdefault(key.strip(), value.strip())
        except OSError:
            pass
        brand = brand or info.get("model name", "unknown CPU")
        flags = flags if flags is not None else set(info.get("flags", "").split())
    yes = lambda f: "yes" if f in flags else "no"  # noqa: E731
    return f"{brand}, {count} CPUs, AVX-512 {yes('avx512f')}, AVX512-BF16 {yes('avx512_bf16')}, AMX {yes('amx_tile')}"


def topk_agreement(ids_a, ids_b) -> float:
    """Fraction of queries whose top-k id sets are equal."""
    a, b = np.asarray(ids_a), np.asarray(ids_b)
    return float(np.mean([set(x.tolist()) == set(y.tolist()) for x, y in zip(a, b)]))


def forced(path: str, fn):
    """``fn`` with the numba backend's product path forced (``loop`` or ``blas``, agentcir.kernels.tune)."""

    def run(x):
        from agentcir.kernels import tune

        with tune.path_forced(path):
            return fn(x)

    return run


def lazy(x: dict, key: str, build):
    """``x["lazy"][key]``, built on first use (so a provider's extra inputs cost only when it runs)."""
    cache = x.setdefault("lazy", {})
    if key not in cache:
        cache[key] = build()
    return cache[key]


def machine_busy_s() -> float | None:
    """Core-seconds this machine's cores have been busy since boot (``/proc/stat``; None where
    there is none)."""
    import os

    try:
        with open("/proc/stat", encoding="ascii") as f:
            user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    except OSError:
        return None
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def busy_cores(window: float = 0.25) -> float | None:
    """Cores of this machine busy over the next ``window`` seconds (None without ``/proc/stat``)."""
    import time

    b0, t0 = machine_busy_s(), time.perf_counter()
    time.sleep(window)
    b1 = machine_busy_s()
    return None if b0 is None or b1 is None else (b1 - b0) / (time.perf_counter() - t0)


def quiet(below: float = 0.2, limit: float = 15.0) -> float:
    """Wait until the machine is idle (under ``below`` cores busy in two windows running), at
    most ``limit`` seconds; the seconds waited. Between timed variants: what one leaves running
    (Ray actors exiting, about 0.8 s of a core each to unload torch; a command's Ray shutting
    down) would otherwise be timed in the next."""
    import time

    t, calm = time.perf_counter(), 0
    while calm < 2 and time.perf_counter() - t < limit:
        busy = busy_cores()
        if busy is None:
            break
        calm = calm + 1 if busy < below else 0
    return round(time.perf_counter() - t, 2)
