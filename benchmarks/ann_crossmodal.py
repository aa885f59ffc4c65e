"""Approximate search on the queries agentcir sends: text embeddings against image embeddings.

The set: the catalog encoder's real embeddings of the fashion-products photos. The gallery is
the image embeddings of every photo but the held-out image queries, expanded to ``--n`` rows:
row ``i >= n_real`` is a real row (its base, drawn at random) plus Gaussian noise
``sigma * g``, ``g ~ N(0, I/d)``, L2-normalised. Two noisy copies of one base have cosine
``~ 1 / (1 + sigma^2)``; once a base has more than 10 copies its copies are one another's
nearest neighbours, so ``sigma = sqrt(1 / s10 - 1)`` with ``s10`` the median similarity of a
real row's 10th nearest real row gives the synthetic rows the real rows' 10-NN similarity (the
similarities of both are measured and recorded: ``data.json: neighbours``). Queries: the
``productDisplayName`` texts and templated ``"a photo of <articleType> in <baseColour>"`` texts
(text -> image, cross-modal), and held-out photos (image -> image). Exact top-100 ground truth
by brute force (``agentcir.kernels.cosine_topk``, numba).

Indexes, every search on ONE thread: agentcir's per-shard faiss indexes built by
``agentcir.framework.scale.ann.build_index`` (IVF-Flat, IVF-SQ 8bit and fp16, HNSW: the
project's settings; ``hnsw_m`` 32 and 16), hnswlib and usearch (``M`` / ``connectivity`` 16 and 32
at ``ef_construction`` 200 / ``expansion_add`` 128; ``INDEXES``, ``--indexes`` picks). For each index and query kind the search knob
(``nprobe``; ``ef``) is raised until recall@10 (searching k=10) and recall@100 (k=100) reach
``--target``; the lowest such setting's queries per second of one core is reported (queries
over the CPU time of the searching thread, every library searching in the calling thread, so
other processes on a shared machine do not lower it; ``qps_wall``: over the wall time), with
build time, index bytes and the RSS growth of loading it.

Then OCTOPUS's fused scoring (``method=octopus`` on ``dataset=fashion_cir`` with the offline
components, its ``retrieve`` stage's inputs) over a gallery of the benchmark's photos expanded
the same way to ``--octopus-n`` rows (captions too): exact over the whole gallery
(``kernels.octopus_topk``) against exact fused scores over the union of the ANN candidates of
its two query vectors (``(e + q_t) / 2`` and ``q_v``, ``--octopus-candidates`` each; the proxy
weights stay whole-gallery scans, as on a sharded gallery), per index at the setting chosen for
recall@100 on text queries, and over exact candidates of the same two vectors (what the
candidate path loses before any index does). Reported: fashion_cir's metrics (mAP@k, R@k) and
the overlap of each top-10 with the exact one.

Everything built is cached under ``--out`` (embeddings, gallery, ground truth, indexes, each
sweep's result), keyed by the inputs and this module's code: a killed run continues.

    python benchmarks/ann_crossmodal.py --n 1000000 --nlist 1024 --text-queries 500 \\
        --image-queries 500 --octopus-n 100000 --json benchmarks/results/ann-crossmodal-1m.json

(figures: benchmarks/results/2026-12-03-ann-crossmodal.md)
"""

from __future__ import annotations

import argparse
import csv
import gc
import hashlib
import inspect
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SOURCE = ROOT.parent / "shared" / "data" / "fashion-products"
GT_K = 100
#: the search knob's values, ascending (the sweep stops at the first one reaching the target)
NPROBE = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
EF10 = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
EF100 = (100, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
#: index name -> (library, build settings); --quick keeps the first of each library
INDEXES = {
    "faiss-ivf_flat": ("faiss", {"kind": "ivf_flat"}),
    "faiss-ivf_sq8": ("faiss", {"kind": "ivf_sq", "sq": "8bit"}),
    "faiss-ivf_sq16": ("faiss", {"kind": "ivf_sq", "sq": "fp16"}),
    "faiss-hnsw32": ("faiss", {"kind": "hnsw", "hnsw_m": 32}),
    "faiss-hnsw16": ("faiss", {"kind": "hnsw", "hnsw_m": 16}),
    "hnswlib-m16-ef200": ("hnswlib", {"M": 16, "ef_construction": 200}),
    "hnswlib-m32-ef200": ("hnswlib", {"M": 32, "ef_construction": 200}),
    "usearch-m16-ef128": ("usearch", {"connectivity": 16, "expansion_add": 128}),
    "usearch-m32-ef128": ("usearch", {"connectivity": 32, "expansion_add": 128}),
}
QUICK = ("faiss-ivf_flat", "faiss-ivf_sq8", "faiss-ivf_sq16", "faiss-hnsw32", "hnswlib-m16-ef200", "usearch-m16-ef128")


# -- small helpers -------------------------------------------------------------------------
def key_of(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def code_of(*fns) -> str:
    return key_of([inspect.getsource(f) for f in fns])


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def save_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    os.replace(tmp, path)


def save_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def normalize(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x


# -- 1. the set ----------------------------------------------------------------------------
def read_products(source: Path, limit: int = 0) -> list[dict]:
    rows = []
    with open(source / "products.csv", newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            p = source / "images" / f"{r['id']}.jpg"
            if p.is_file():
                rows.append({**r, "image": str(p)})
    if not rows:
        raise SystemExit(f"--source '{source}': no products.csv rows with a photo under images/")
    return rows[:limit] if limit else rows


def embed_products(rows: list[dict], encoder_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Image embeddings of every photo, text embeddings of the display names and of the
    templated texts, and the encoder's identity (photos that fail to decode are an error)."""
    from agentcir.registry import ENCODERS

    enc = ENCODERS.build(encoder_name, {})
    skipped: list = []
    img = enc.encode_images([r["image"] for r in rows], skipped=skipped, progress=False)
    if skipped:
        raise SystemExit(f"{len(skipped)} photo(s) could not be decoded, e.g. {skipped[0]}")
    names = enc.encode_texts([r["productDisplayName"] for r in rows], progress=False)
    tmpl = enc.encode_texts([f"a photo of {r['articleType']} in {r['baseColour']}" for r in rows], progress=False)
    return img.astype(np.float32), names.astype(np.float32), tmpl.astype(np.float32), enc.identity


def knn_similarity(q: np.ndarray, G: np.ndarray, ks=(1, 10), self_rows: np.ndarray | None = None) -> dict:
    """Median / p10 / p90 similarity of each query's k-th nearest gallery row (its own row excluded)."""
    from agentcir import kernels as K

    top = K.cosine_topk(q, G, max(ks), exclude=self_rows, backend="numba")
    s = np.asarray(top.scores)
    return {
        f"nn{k}": {
            p: round(float(np.percentile(s[:, k - 1], v)), 4) for p, v in (("p10", 10), ("median", 50), ("p90", 90))
        }
        for k in ks
    }


def noise_scale(real: np.ndarray, sample: int, seed: int) -> tuple[float, dict]:
    """``sigma`` giving noisy copies the real rows' median 10-NN similarity (module docstring)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(real), size=min(sample, len(real)), replace=False))
    stats = knn_similarity(real[rows], real, self_rows=rows.astype(np.int64))
    s10 = stats["nn10"]["median"]
    return math.sqrt(max(1.0 / s10 - 1.0, 0.0)), stats


def expand(real: np.ndarray, n: int, sigma: float, seed: int, out: Path) -> np.ndarray:
    """``[n, d]`` float32 gallery file ``out``: the real rows, then noisy copies of random ones.
    Returns each row's base (its real row)."""
    n_real, d = real.shape
    G = np.lib.format.open_memmap(out.with_name(out.name + ".tmp.npy"), mode="w+", dtype=np.float32, shape=(n, d))
    base = np.arange(n, dtype=np.int64) % n_real
    rng = np.random.default_rng(seed)
    base[n_real:] = rng.integers(0, n_real, size=max(n - n_real, 0))
    m = min(n, n_real)
    G[:m] = real[:m]
    step = 65536
    for s in range(m, n, step):
        e = min(n, s + step)
        r = np.random.default_rng([seed, s])
        x = real[base[s:e]] + np.float32(sigma / math.sqrt(d)) * r.standard_normal((e - s, d), dtype=np.float32)
        G[s:e] = normalize(x)
    G.flush()
    del G
    os.replace(out.with_name(out.name + ".tmp.npy"), out)
    return base


def exact_topk(q: np.ndarray, G: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    from agentcir import kernels as K

    ids, scores = [], []
    for s in range(0, len(q), 256):
        t = K.cosine_topk(q[s : s + 256], G, k, backend="numba")
        ids.append(np.asarray(t.ids))
        scores.append(np.asarray(t.scores))
    return np.concatenate(ids), np.concatenate(scores)


def build_set(args, out: Path) -> tuple[Path, dict]:
    """The set's folder (embeddings, gallery, queries, ground truth), built or reused."""
    if args.embeddings:
        z = np.load(args.embeddings)
        img, names, tmpl = (np.asarray(z[k], np.float32) for k in ("image", "names", "templates"))
        enc_id, src = f"file:{hashlib.sha256(Path(args.embeddings).read_bytes()).hexdigest()[:16]}", args.embeddings
    else:
        rows = read_products(Path(args.source), args.photos)
        src = [r["image"] for r in rows]
        emb_dir = out / f"emb-{key_of(args.encoder, src, code_of(embed_products))}"
        emb_dir.mkdir(parents=True, exist_ok=True)
        if not (emb_dir / "emb.npz").is_file():
            log(f"embedding {len(rows)} photos and {2 * len(rows)} texts with encoder={args.encoder}")
            img, names, tmpl, enc_id = embed_products(rows, args.encoder)
            tmp = emb_dir / "emb.tmp.npz"
            np.savez(tmp, image=img, names=names, templates=tmpl, identity=np.array(enc_id))
            os.replace(tmp, emb_dir / "emb.npz")
        z = np.load(emb_dir / "emb.npz")
        img, names, tmpl, enc_id = z["image"], z["names"], z["templates"], str(z["identity"])
    key = key_of(
        enc_id, src, args.n, args.text_queries, args.image_queries, args.seed,
        code_of(noise_scale, expand, exact_topk, knn_similarity, build_set),
    )  # fmt: skip
    d = out / f"set-{key}"
    d.mkdir(parents=True, exist_ok=True)
    meta_f = d / "data.json"
    if meta_f.is_file():
        return d, json.loads(meta_f.read_text())
    rng = np.random.default_rng(args.seed)
    n_photos = len(img)
    held = np.sort(rng.choice(n_photos, size=min(args.image_queries, n_photos // 2), replace=False))
    real = img[np.setdiff1d(np.arange(n_photos), held)]
    t_rows = rng.choice(n_photos, size=min(args.text_queries, 2 * n_photos), replace=args.text_queries > n_photos)
    half = len(t_rows) // 2
    q_text = np.concatenate([names[t_rows[:half]], tmpl[t_rows[half:]]]).astype(np.float32)
    q_img = img[held].astype(np.float32)
    if not (d / "sigma.json").is_file():
        log(f"noise scale from {len(real)} real rows' neighbours")
        sigma, real_nn = noise_scale(real, 2000, args.seed)
        save_json(d / "sigma.json", {"sigma": sigma, "real": real_nn})
    s = json.loads((d / "sigma.json").read_text())
    sigma = s["sigma"]
    if not (d / "base.npy").is_file():
        log(f"expanding {len(real)} real rows to {args.n} (sigma={sigma:.4f})")
        base = expand(real, args.n, sigma, args.seed, d / "gallery.npy")
        save_npy(d / "base.npy", base)
    G = np.load(d / "gallery.npy", mmap_mode="r")
    G = np.ascontiguousarray(G)
    syn_nn = None
    if args.n > len(real):
        srows = np.sort(rng.choice(np.arange(len(real), args.n), size=min(500, args.n - len(real)), replace=False))
        syn_nn = knn_similarity(G[srows], G, self_rows=srows.astype(np.int64))
    for name, q in (("text", q_text), ("image", q_img)):
        if not (d / f"gt_{name}.npz").is_file():
            log(f"exact top-{GT_K} of {len(q)} {name} queries over {len(G)} rows")
            t0 = time.perf_counter()
            ids, scores = exact_topk(q, G, min(GT_K, len(G)))
            tmp = d / f"gt_{name}.tmp.npz"
            np.savez(tmp, queries=q, ids=ids, scores=scores, seconds=time.perf_counter() - t0)
            os.replace(tmp, d / f"gt_{name}.npz")
    meta = {
        "encoder": enc_id,
        "photos": n_photos,
        "real_rows": len(real),
        "n": args.n,
        "dim": int(G.shape[1]),
        "sigma": sigma,
        "noise": "row = norm(base + sigma * g), g ~ N(0, I/d); sigma = sqrt(1/s10 - 1), s10 = median 10-NN similarity of the real rows",
        "neighbours": {"real": s["real"], "synthetic": syn_nn},
        "text_queries": len(q_text),
        "image_queries": len(q_img),
        "query_similarity_top1_median": {
            name: round(float(np.median(np.load(d / f"gt_{name}.npz")["scores"][:, 0])), 4)
            for name in ("text", "image")
        },
    }
    save_json(meta_f, meta)
    return d, meta


# -- 2. the indexes ------------------------------------------------------------------------
class Faiss:
    knob = "nprobe"

    def __init__(self, path: Path, kind: str):
        from agentcir.framework.scale.ann import load_index

        self.index = load_index(path, 1, 16)
        self.kind = kind
        self.knob = "ef" if kind == "hnsw" else "nprobe"

    def set(self, v: int) -> None:
        if self.kind == "hnsw":
            self.index.hnsw.efSearch = v
        else:
            self.index.nprobe = v

    def search(self, q, k):
        return self.index.search(q, k)[1]

    def knobs(self, k):
        if self.kind == "hnsw":
            return EF10 if k <= 10 else EF100
        return tuple(v for v in NPROBE if v <= self.index.nlist)


class Hnswlib:
    knob = "ef"

    def __init__(self, path: Path, dim: int, n: int):
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=dim)
        self.index.load_index(str(path), max_elements=n)
        self.index.set_num_threads(1)

    def set(self, v):
        self.index.set_ef(v)

    def search(self, q, k):
        try:
            return self.index.knn_query(q, k=k, num_threads=1)[0]
        except RuntimeError:  # a query reaching fewer than k rows fails the batch: one by one, -1 padded
            out = np.full((len(q), k), -1, np.int64)
            for i in range(len(q)):
                try:
                    out[i] = self.index.knn_query(q[i : i + 1], k=k, num_threads=1)[0][0]
                except RuntimeError:
                    pass
            return out

    def knobs(self, k):
        return EF10 if k <= 10 else EF100


class Usearch:
    knob = "ef"

    def __init__(self, path: Path, dim: int):
        from usearch.index import Index

        self.index = Index.restore(str(path))

    def set(self, v):
        self.index.expansion_search = v

    def search(self, q, k):
        return self.index.search(q, k, threads=1).keys.reshape(len(q), -1)

    def knobs(self, k):
        return EF10 if k <= 10 else EF100


def build(name: str, G: np.ndarray, folder: Path, threads: int, nlist: int = 0) -> dict:
    """Index ``name`` over ``G`` in ``folder`` (reused when built); its build record."""
    lib, cfg = INDEXES[name]
    rec_f = folder / f"{name}.build.json"
    if rec_f.is_file():
        return json.loads(rec_f.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    r0, t0 = rss_bytes(), time.perf_counter()
    n, d = G.shape
    if lib == "faiss":
        import faiss

        from agentcir.framework.scale import scale_settings
        from agentcir.framework.scale.ann import build_index, nlist_for

        faiss.omp_set_num_threads(threads)
        scale = scale_settings({"search": cfg["kind"], "nlist": nlist, **{k: v for k, v in cfg.items() if k != "kind"}})
        path = folder / f"{name}.faiss"
        build_index(G, cfg["kind"], scale, path)
        settings = {k: scale[k] for k in ("nlist", "sq", "hnsw_m")}
        if cfg["kind"] != "hnsw":
            settings["nlist"] = nlist_for(n, scale["nlist"])
        else:
            settings["ef_construction"] = faiss.IndexHNSWFlat(d, scale["hnsw_m"]).hnsw.efConstruction
    elif lib == "hnswlib":
        import hnswlib

        idx = hnswlib.Index(space="ip", dim=d)
        idx.init_index(max_elements=n, M=cfg["M"], ef_construction=cfg["ef_construction"], random_seed=0)
        idx.set_num_threads(threads)
        for s in range(0, n, 262144):
            idx.add_items(np.ascontiguousarray(G[s : s + 262144]), np.arange(s, min(n, s + 262144)))
        path = folder / f"{name}.hnswlib"
        idx.save_index(str(path))
        settings = dict(cfg)
        del idx
    else:
        from usearch.index import Index

        idx = Index(
            ndim=d, metric="ip", dtype="f32", connectivity=cfg["connectivity"], expansion_add=cfg["expansion_add"]
        )
        for s in range(0, n, 262144):
            idx.add(np.arange(s, min(n, s + 262144)), np.ascontiguousarray(G[s : s + 262144]), threads=threads)
        path = folder / f"{name}.usearch"
        idx.save(str(path))
        settings = {**cfg, "dtype": "f32"}
        del idx
    build_s = time.perf_counter() - t0
    gc.collect()
    rec = {
        "name": name,
        "library": lib,
        "settings": settings,
        "build_s": round(build_s, 2),
        "build_threads": threads,
        "build_rss_growth": rss_bytes() - r0,
        "file": str(path),
        "bytes": path.stat().st_size,
    }
    save_json(rec_f, rec)
    return rec


def open_index(rec: dict, dim: int, n: int):
    lib, path = rec["library"], Path(rec["file"])
    if lib == "faiss":
        return Faiss(path, INDEXES[rec["name"]][1]["kind"])
    if lib == "hnswlib":
        return Hnswlib(path, dim, n)
    return Usearch(path, dim)


def recall(found: np.ndarray, gt: np.ndarray, k: int) -> float:
    hit = [len(set(a[:k].tolist()) & set(b[:k].tolist())) for a, b in zip(found, gt)]
    return float(np.sum(hit) / (k * len(gt)))


def sweep(index, q: np.ndarray, gt: np.ndarray, k: int, target: float, knobs=None, reps: int = 1) -> dict:
    """Raise the knob until recall@k reaches ``target``: every point tried, and the first reaching it."""
    points = []
    for v in knobs or index.knobs(k):
        index.set(v)
        index.search(q[: min(len(q), 32)], k)  # warm the pages and caches it reads
        best, wall = math.inf, math.inf
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.thread_time()
            ids = index.search(q, k)
            best, wall = min(best, time.thread_time() - c0), min(wall, time.perf_counter() - t0)
        r = recall(np.asarray(ids, np.int64), gt, k)
        qps = {"qps": round(len(q) / max(best, 1e-9), 1), "qps_wall": round(len(q) / wall, 1)}
        points.append({index.knob: int(v), "recall": round(r, 4), **qps})
        if r >= target:
            break
    hit = next((p for p in points if p["recall"] >= target), None)
    return {"k": k, "target": target, "points": points, "reached": hit}


def run_indexes(args, d: Path, meta: dict) -> dict:
    import faiss

    faiss.omp_set_num_threads(1)
    G = np.load(d / "gallery.npy", mmap_mode="r")
    n, dim = G.shape
    gts = {name: np.load(d / f"gt_{name}.npz") for name in ("text", "image")}
    names = list(args.indexes or (QUICK if args.quick else INDEXES))
    folder = d / f"indexes-nlist{args.nlist}"
    results = {}
    Gm = None
    for name in names:
        res_f = folder / f"{name}.result-{key_of(args.target, args.quick, code_of(sweep, recall))}.json"
        if res_f.is_file():
            results[name] = json.loads(res_f.read_text())
            log(f"{name}: reused")
            continue
        if not (folder / f"{name}.build.json").is_file():
            if Gm is None:
                Gm = np.ascontiguousarray(G)  # one copy in memory for every build
            log(f"{name}: building over {n} rows")
        rec = build(name, Gm if Gm is not None else G, folder, args.build_threads, args.nlist)
        log(f"{name}: built in {rec['build_s']} s, {rec['bytes'] / 2**20:.0f} MiB")
        faiss.omp_set_num_threads(1)
        r0 = rss_bytes()
        idx = open_index(rec, dim, n)
        out = {"build": rec, "load_rss_growth": None}
        for qname, z in gts.items():
            q = np.ascontiguousarray(z["queries"])
            for k in (10, 100):
                knobs = None
                if args.quick:
                    knobs = idx.knobs(k)[2:3] or idx.knobs(k)[:1]
                out[f"{qname}@{k}"] = s = sweep(idx, q, z["ids"][:, :k], k, args.target, knobs, args.reps)
                hit = s["reached"]
                log(
                    f"{name} {qname}@{k}: "
                    + (f"{idx.knob}={hit[idx.knob]} recall {hit['recall']} {hit['qps']} q/s" if hit else "not reached")
                    + f" (last: {s['points'][-1]})"
                )
        out["load_rss_growth"] = rss_bytes() - r0
        del idx
        gc.collect()
        save_json(res_f, out)
        results[name] = out
    del Gm
    gc.collect()
    return results


# -- 3. fused OCTOPUS on ANN candidates ----------------------------------------------------
def octopus_inputs(args, out: Path) -> dict:
    """The retrieve stage's inputs of OCTOPUS on fashion_cir (offline components), its gallery's
    ids, image and caption embeddings, and the lam / tau of the recipe."""
    import subprocess

    from agentcir import api
    from agentcir.framework.methods.common import caption_embeddings
    from agentcir.registry import ENCODERS

    bench = out / "fashion-cir"
    if not (bench / "queries.jsonl").is_file():
        src = Path(args.source)
        subprocess.run(
            [sys.executable, "-m", "agentcir.cli", "build-benchmark", "--csv", str(src / "products.csv"),
             "--images", str(src / "images"), "--out", str(bench)],
            check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    recipe = api.compose(
        [
            "method=octopus",
            "dataset=fashion_cir",
            f"dataset.root={bench}",
            f"dataset.limit={args.octopus_queries}",
            f"encoder={args.encoder}",
            "method.verification=false",
            f"run.root={out / 'runs'}",
            "run.progress=false",
        ]
    )
    ran = api.run(recipe, progress=False)
    res = ran.result
    st = res.state
    enc = ENCODERS.build(args.encoder, {})
    m = recipe["method"]
    return {
        "ids": list(res.gallery.ids),
        "images": np.asarray(res.gallery.image_emb, np.float32),
        "captions": np.asarray(caption_embeddings(st, enc), np.float32),
        "reference": st.arrays["reference"],
        "proxies": st.arrays["proxies"],
        "target": st.arrays["target"],
        "visual": st.arrays["visual"],
        "ref_rows": np.array([res.gallery.index_of(q.reference_id) for q in st.queries], np.int64),
        "targets": [q.targets for q in st.queries],
        "refs": [q.reference_id for q in st.queries],
        "lam": float(m["lam"]),
        "tau": float(m["tau"]),
        "metrics": {k: v for k, v in ran.metrics.items() if isinstance(v, (int, float))},
    }


def text_query(x: dict, I: np.ndarray) -> np.ndarray:
    """OCTOPUS's text-to-vision query ``(e + q_t) / 2``, its proxy weights a scan of the whole gallery."""
    from agentcir import kernels as K

    w = np.asarray(K.octopus_weights(x["reference"], x["proxies"], I, tau=x["tau"], backend="numba"))
    e = normalize((w[..., None] * x["proxies"]).sum(axis=1))
    return ((e + x["target"]) / 2).astype(np.float32)


def fused_candidates(x: dict, I: np.ndarray, C: np.ndarray, t: np.ndarray, cands: list[np.ndarray], k: int):
    """OCTOPUS's fused score (exact) over each query's candidate rows; the top ``k`` rows per query,
    the reference masked to -10 as the method does."""
    out = []
    for qi, rows in enumerate(cands):
        rows = np.unique(rows[rows >= 0])
        st = I[rows] @ t[qi]
        sv = C[rows] @ x["visual"][qi]
        s = x["lam"] * st + (1 - x["lam"]) * (sv * st)
        s[rows == x["ref_rows"][qi]] = -10.0
        order = np.lexsort((rows, -s))[:k]
        out.append(rows[order])
    return out


def run_octopus(args, out: Path, meta: dict, results: dict) -> dict:
    from agentcir import kernels as K
    from agentcir.framework.datasets.composed import KS, MAP_KS
    from agentcir.framework.eval.metrics import map_at_k, recall_at_k, remove_ids

    x = octopus_inputs(args, out)
    sigma, n = meta["sigma"], args.octopus_n
    d = out / f"octopus-{key_of(meta['encoder'], x['ids'], n, sigma, args.seed, code_of(expand))}"
    d.mkdir(parents=True, exist_ok=True)
    for name, arr in (("images", x["images"]), ("captions", x["captions"])):
        if not (d / f"{name}.npy").is_file():
            expand(arr, n, sigma, args.seed + (name == "captions"), d / f"{name}.npy")
    I = np.ascontiguousarray(np.load(d / "images.npy", mmap_mode="r"))
    C = np.ascontiguousarray(np.load(d / "captions.npy", mmap_mode="r"))
    ids = x["ids"] + [f"synthetic-{i}" for i in range(len(x["ids"]), n)]
    depth = max(MAP_KS) + 1

    def metrics(rows) -> dict:
        rankings = [remove_ids([ids[r] for r in rr], [ref]) for rr, ref in zip(rows, x["refs"])]
        return {**map_at_k(rankings, x["targets"], MAP_KS), **recall_at_k(rankings, x["targets"], KS)}

    t0 = time.perf_counter()
    exact = K.octopus_topk(
        x["reference"], x["proxies"], x["target"], I, depth, visual=x["visual"], captions=C,
        lam=x["lam"], tau=x["tau"], exclude=x["ref_rows"], exclude_score=-10.0, backend="numba",
    )  # fmt: skip
    exact_rows = np.asarray(exact.ids)
    report = {
        "gallery": n,
        "benchmark_gallery": len(x["ids"]),
        "queries": len(x["refs"]),
        "candidates_per_vector": args.octopus_candidates,
        "run_metrics_retrieve": x["metrics"],
        "exact": {"metrics": metrics(exact_rows), "seconds": round(time.perf_counter() - t0, 2)},
        "ann": {},
    }
    log(f"octopus exact over {n} rows: {report['exact']['metrics']}")
    folder = d / f"indexes-nlist{args.nlist}"
    t = text_query(x, I)
    # the candidate path's fused score over every row reproduces the kernel's ranking (first queries)
    few = min(3, len(x["refs"]))
    every = fused_candidates(x, I, C, t[:few], [np.arange(n)] * few, 10)
    report["candidate_path_matches_kernel_top10"] = float(
        np.mean([len(set(a.tolist()) & set(b[:10].tolist())) / 10 for a, b in zip(every, exact_rows)])
    )
    import faiss

    def overlap(rows) -> float:
        hits = [len(set(a[:10].tolist()) & set(b[:10].tolist())) / 10 for a, b in zip(rows, exact_rows)]
        return round(float(np.mean(hits)), 4)

    # the same candidates found exactly: what the candidate path loses before any index does
    vt = normalize(t.copy())
    ct, _ = exact_topk(vt, I, args.octopus_candidates)
    cv, _ = exact_topk(np.ascontiguousarray(x["visual"], np.float32), I, args.octopus_candidates)
    rows = fused_candidates(x, I, C, t, [np.concatenate([a, b]) for a, b in zip(ct, cv)], depth)
    report["exact_candidates"] = {"metrics": metrics(rows), "top10_overlap_with_exact": overlap(rows)}
    log(f"octopus exact candidates: {report['exact_candidates']}")
    for name, res in results.items():
        hit = res["text@100"]["reached"] or res["text@100"]["points"][-1]
        rec = build(name, I, folder, args.build_threads, args.nlist)
        faiss.omp_set_num_threads(1)
        idx = open_index(rec, I.shape[1], n)
        knob = hit["ef"] if "ef" in hit else hit["nprobe"]
        idx.set(knob)
        t1 = time.perf_counter()
        ct = np.asarray(idx.search(np.ascontiguousarray(vt), args.octopus_candidates), np.int64)
        cv = np.asarray(idx.search(np.ascontiguousarray(x["visual"], np.float32), args.octopus_candidates), np.int64)
        search_s = time.perf_counter() - t1
        rows = fused_candidates(x, I, C, t, [np.concatenate([a, b]) for a, b in zip(ct, cv)], depth)
        report["ann"][name] = {
            "knob": {idx.knob: knob},
            "metrics": metrics(rows),
            "top10_overlap_with_exact": overlap(rows),
            "search_s": round(search_s, 3),
        }
        log(f"octopus {name}: {report['ann'][name]}")
        del idx
    return report


# -- the report ----------------------------------------------------------------------------
def table(results: dict) -> str:
    lines = [
        "| index | build s | MiB | query | recall@10>=t: knob, q/s/core | recall@100>=t: knob, q/s/core |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        b = r["build"]
        for qn in ("text", "image"):
            cells = []
            for k in (10, 100):
                s = r[f"{qn}@{k}"]
                h = s["reached"]
                knob = next(iter(k_ for k_ in s["points"][0] if k_ not in ("recall", "qps")))
                cells.append(
                    f"{knob}={h[knob]}, {h['qps']:,.0f} (r={h['recall']})"
                    if h
                    else f"not reached (max {knob}={s['points'][-1][knob]}: r={s['points'][-1]['recall']})"
                )
            lines.append(f"| {name} | {b['build_s']} | {b['bytes'] / 2**20:.0f} | {qn} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="gallery rows (real rows + noisy copies)")
    p.add_argument("--out", default=str(ROOT / "runs" / "_bench" / "ann-crossmodal"), help="cache folder")
    p.add_argument("--source", default=str(SOURCE), help="fashion-products folder (products.csv + images/)")
    p.add_argument("--photos", type=int, default=0, help="use the first N photos (0: all)")
    p.add_argument("--encoder", default="catalog", help="encoder registry key")
    p.add_argument("--embeddings", help="npz of precomputed 'image', 'names', 'templates' embeddings (no encoder)")
    p.add_argument("--text-queries", type=int, default=1000)
    p.add_argument("--image-queries", type=int, default=1000)
    p.add_argument("--target", type=float, default=0.95, help="recall to reach")
    p.add_argument("--indexes", nargs="*", choices=list(INDEXES), help="indexes to compare (default: all)")
    p.add_argument("--quick", action="store_true", help="one knob value per index and k (a smoke run)")
    p.add_argument("--reps", type=int, default=1, help="timed repetitions per knob value (best kept)")
    p.add_argument("--nlist", type=int, default=0, help="IVF lists (0: the project's default, about 4*sqrt(n))")
    p.add_argument("--build-threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--octopus-n", type=int, default=200_000, help="fused-OCTOPUS gallery rows (0: skip part 3)")
    p.add_argument("--octopus-queries", type=int, default=0, help="fashion_cir queries (0: all)")
    p.add_argument("--octopus-candidates", type=int, default=100, help="ANN candidates per query vector")
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args(argv)
    if args.n < 2:
        p.error(f"--n must be >= 2, got {args.n}")
    if not 0 < args.target <= 1:
        p.error(f"--target must be in (0, 1], got {args.target}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    d, meta = build_set(args, out)
    log(f"set: {json.dumps(meta)}")
    results = run_indexes(args, d, meta)
    print(table(results))
    octo = run_octopus(args, out, meta, results) if args.octopus_n else None
    from _data import cpu_summary

    report = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "cpu": cpu_summary(),
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
        "set": meta,
        "set_dir": str(d),
        "indexes": results,
        "octopus": octo,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        save_json(Path(args.json), report)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
