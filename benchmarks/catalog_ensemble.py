"""Validation figures of two catalog image towers averaged (they share the locked MiniLM text
space, so their image embeddings can be mixed): the measurement behind CARD.md's ensemble line.

    agentcir train-encoder data=../shared/data/fashion-products full_weight=1 out=runs/train-full
    python benchmarks/catalog_ensemble.py runs/train-full/catalog.pt            # + the bundled tower
    python benchmarks/catalog_ensemble.py A.pt B.pt --weights 0 0.5 1 --data DIR

Prints, per weight w of the second tower, R@1/5/10 and zero-shot type / colour top-1 of
``(1 - w) * A + w * B`` on the held-out val photos (``evaluate_encoder``'s protocol).
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    from agentcir.components.encoders import catalog_train as T
    from agentcir.framework.datasets.builder import split_of
    from agentcir.registry import ENCODERS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+", help="B, or A B (A defaults to the bundled checkpoint)")
    ap.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.3, 0.5, 0.7, 1.0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "fashion-products"))
    a = ap.parse_args(argv)
    if len(a.checkpoints) > 2:
        ap.error("give one or two checkpoints")
    paths_ab = ([""] + a.checkpoints)[-2:]
    cfg = T.TrainConfig(data=a.data)
    products, paths = T.read_products(cfg)
    products = [p for p in products if split_of(p.id) == "val"]
    encoders = [ENCODERS.build("catalog", {"checkpoint": c}) for c in paths_ab]
    embs = [e.encode_images([paths[p.id] for p in products]) for e in encoders]
    print(f"A = {paths_ab[0] or 'bundled'}, B = {paths_ab[1]}, {len(products)} val photos")
    for w in a.weights:
        m = T.retrieval_metrics((1 - w) * embs[0] + w * embs[1], products,
                                lambda t: encoders[0].encode_texts(t, progress=False))
        print(f"w={w:.2f}  R@1 {m['R@1']:.3f}  R@5 {m['R@5']:.3f}  R@10 {m['R@10']:.3f}  "
              f"type {m['type_top1'] * 100:.1f}%  colour {m['colour_top1'] * 100:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
