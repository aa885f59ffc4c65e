"""int8 galleries with the exact float32 re-rank on real embeddings: is the top-k the float32 top-k?

Encodes a photo folder with the catalog encoder (image embeddings; the bundled demo gallery
``agentcir/data/demo`` and ``../shared/data/fashion-products`` when present), quantises it
(:func:`agentcir.kernels.quantize_int8`) and compares, for image->image queries (every photo
against the others, itself excluded) and text->image queries (the product names of the catalogue
CSV), ``cosine_topk(int8, rerank=float32)`` at the default shortlist ``max(4k, k + 64)`` with the exact
ranking of the float32 rows (the reference backend: float64 products, lower id on ties), next to
the float32 scan itself (float32 sums: equal or nearly equal rows, e.g. duplicate photos, may
swap). Also prints, per k, the smallest shortlist that would have sufficed (the
worst int8 rank of a float32 top-k member) and how often the int8 scan alone already gives the
float32 top-k.

    python benchmarks/int8_agreement.py [--cache DIR] [--limit N]

Embeddings are cached in ``DIR`` (default ``~/.cache/agentcir/int8-agreement``) by folder and
encoder identity. Encoding the 6,726 fashion photos takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
from pathlib import Path

import numpy as np

from agentcir.kernels import cosine_topk, default_shortlist, quantize_int8

ROOT = Path(__file__).resolve().parents[1]
SETS = {
    "demo": (ROOT / "agentcir/data/demo/images", ROOT / "agentcir/data/demo/gallery.csv"),
    "fashion-products": (
        ROOT.parent / "shared/data/fashion-products/images",
        ROOT.parent / "shared/data/fashion-products/products.csv",
    ),
}
KS = (1, 10, 50, 100)


def _names(csv_path: Path, limit: int) -> list[str]:
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = sorted({r["productDisplayName"].strip() for r in rows if r.get("productDisplayName", "").strip()})
    rng = np.random.default_rng(0)
    return [names[i] for i in sorted(rng.choice(len(names), size=min(limit, len(names)), replace=False))]


def embeddings(name: str, cache: Path, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    folder, csv_path = SETS[name]
    if not folder.is_dir():
        print(f"{name}: {folder} is missing, skipped")
        return None
    from agentcir.registry import ENCODERS

    enc = ENCODERS.build("catalog", {})
    paths = sorted(str(p) for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    texts = _names(csv_path, limit)
    key = hashlib.sha256(("\n".join([enc.identity, *paths, *texts])).encode()).hexdigest()[:16]
    f = cache / f"{name}-{key}.npz"
    if f.exists():
        z = np.load(f)
        return z["images"], z["texts"]
    img = enc.encode_images(paths)
    txt = enc.encode_texts(texts)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(f, images=img, texts=txt)
    return img, txt


def compare(label: str, X: np.ndarray, G: np.ndarray, exclude: np.ndarray | None) -> bool:
    g8 = quantize_int8(G)
    N = G.shape[0]
    ok_all = True
    for k in KS:
        if k >= N:
            continue
        L = default_shortlist(k)
        ref = cosine_topk(X, G, k, exclude=exclude, backend="reference")  # the exact float32-row ranking
        f32 = cosine_topk(X, G, k, exclude=exclude)  # the float32 scan (float32 sums)
        got = cosine_topk(X, g8, k, exclude=exclude, rerank=G)
        scan = cosine_topk(X, g8, k, exclude=exclude)
        need = 0  # the int8 rank of the worst-placed float32 top-k member, + 1
        D = g8.dequantize()
        for a in range(0, X.shape[0], 1024):
            S8 = X[a : a + 1024] @ D.T
            if exclude is not None:
                S8[np.arange(S8.shape[0]), exclude[a : a + 1024]] = -np.inf
            worst = np.take_along_axis(S8, ref.ids[a : a + 1024].astype(np.int64), axis=1).min(axis=1)
            need = max(need, int((S8 > worst[:, None]).sum(axis=1).max()) + 1)
        same = bool((got.ids == ref.ids).all())
        ok_all &= same
        print(
            f"{label:42s} k={k:3d} shortlist={L:4d}: top-k identical to fp32: {same} "
            f"({int((got.ids == ref.ids).all(axis=1).sum())}/{X.shape[0]} queries); "
            f"int8 scan alone identical {int((scan.ids == ref.ids).all(axis=1).sum())}/{X.shape[0]}; "
            f"float32 scan identical {int((f32.ids == ref.ids).all(axis=1).sum())}/{X.shape[0]}; "
            f"smallest sufficient shortlist {need}"
        )
    return ok_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/agentcir/int8-agreement")
    ap.add_argument("--limit", type=int, default=1000, help="text queries per set (product names)")
    args = ap.parse_args(argv)
    ok = True
    for name in SETS:
        e = embeddings(name, args.cache, args.limit)
        if e is None:
            continue
        img, txt = e
        print(f"{name}: {img.shape[0]} images x {img.shape[1]} d, {txt.shape[0]} text queries")
        ok &= compare(f"{name} image->image (itself excluded)", img, img, np.arange(img.shape[0]))
        ok &= compare(f"{name} text->image", txt, img, None)
    print("ALL IDENTICAL" if ok else "SOME DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
