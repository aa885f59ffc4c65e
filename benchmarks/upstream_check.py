"""The OCTOPUS uncertainty gate beside the authors' released function, on random score rows.

    python benchmarks/upstream_check.py --octopus PATH/TO/OCTOPUS   # a checkout of zbzzbzzbz/OCTOPUS

Loads ``compute_uncertainty`` from the checkout's ``src/compute_results.py`` (only that function,
without importing the file's other dependencies), runs it and :func:`agentcir.kernels.uncertainty`
on the same rows (2-40 queries x 5-3000 candidates, positive, mixed and negative scores), and
prints the largest difference per backend and how many gate decisions (u >= 0.8) differ.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import numpy as np


def released_uncertainty(checkout: Path):
    import torch
    import torch.nn.functional as F

    path = checkout / "src" / "compute_results.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_uncertainty"), None)
    if fn is None:
        raise SystemExit(f"{path}: no function compute_uncertainty")
    ns = {"torch": torch, "F": F}
    exec(compile(ast.Module([fn], []), str(path), "exec"), ns)
    return lambda S, tau: ns["compute_uncertainty"](S, "cpu", tau=tau)["uncertainty"].numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--octopus", type=Path, required=True, help="a checkout of the OCTOPUS repository")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--gate", type=float, default=0.8)
    args = ap.parse_args()
    import agentcir.kernels as K

    up = released_uncertainty(args.octopus)
    rng = np.random.default_rng(0)
    worst = {b: 0.0 for b in ("reference", "numba", "torch")}
    flips = dict.fromkeys(worst, 0)
    for _ in range(args.trials):
        Q, N = int(rng.integers(2, 40)), int(rng.integers(5, 3000))
        S = (rng.standard_normal((Q, N)) * rng.choice([0.05, 0.3])).astype(np.float32) + np.float32(
            rng.choice([0, 0.3, -0.3])
        )
        u_up = up(S, 0.02)
        for b in worst:
            u = K.uncertainty(S, tau=0.02, backend=b)
            worst[b] = max(worst[b], float(np.abs(u_up - u).max()))
            flips[b] += int(((u_up >= args.gate) != (u >= args.gate)).sum())
    print("backend | max |u_released - u| | gate decisions that differ")
    for b in worst:
        print(f"{b} | {worst[b]:.2e} | {flips[b]}")


if __name__ == "__main__":
    main()
