"""Stable timings: the numba scan right after a BLAS call vs on a quiet pool.

    python benchmarks/bench_stable_timings.py            # about a minute

Runs two fresh interpreters, one with the thread policy of ``agentcir/_threads.py`` (agentcir
imported first: OpenBLAS idle threads sleep after ~0.4 ms) and one without it
(``AGENTCIR_THREAD_POLICY=off``: OpenBLAS's default, threads spin ~0.1 s after each call).
In each, rounds alternate, side by side: the cosine scan (Q=1, N=500k, d=512, float32 and
bfloat16) after 0.2 s of idling; right after a numpy matmul (OpenBLAS); right after a torch
matmul; right after the Q=64 blocked kernel. Prints medians and each case's ratio to the
idle scan; the target is every ratio within 1.10 with the policy.

Not a pytest-benchmark suite (two processes are needed); ``make bench`` collects nothing here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
N, D, ROUNDS = 500_000, 512, 15
CASES = ("idle", "after-numpy-matmul", "after-torch-matmul", "after-blocked-Q64")


def child() -> None:
    import agentcir  # noqa: F401  (first: the thread policy must precede numpy)

    sys.path.insert(0, str(HERE))
    import numpy as np
    import torch
    from _data import as_kind, gallery, unit

    from agentcir import _threads
    from agentcir import kernels as K

    G = gallery(N, D)
    Gb = as_kind(G, "bfloat16")
    q1 = unit(np.random.default_rng(5), 1, D)
    q64 = unit(np.random.default_rng(6), 64, D)
    A = np.random.default_rng(7).standard_normal((768, 768), dtype=np.float32)
    tA = torch.from_numpy(A)
    before = {
        "idle": lambda: time.sleep(0.2),
        "after-numpy-matmul": lambda: A @ A,
        "after-torch-matmul": lambda: tA @ tA,
        "after-blocked-Q64": lambda: K.cosine_topk(q64, G[:50_000], 10, backend="numba"),
    }
    for g in (G, Gb):
        K.cosine_topk(q1, g, 10, backend="numba")
    before["after-blocked-Q64"]()
    times = {f"{kind} {case}": [] for kind in ("f32", "bf16") for case in CASES}
    for _ in range(ROUNDS):
        for kind, g in (("f32", G), ("bf16", Gb)):
            for case in CASES:
                time.sleep(0.2)
                before[case]()
                t = time.perf_counter()
                K.cosine_topk(q1, g, 10, backend="numba")
                times[f"{kind} {case}"].append(time.perf_counter() - t)
    print(
        json.dumps(
            {
                "policy": _threads.applied(),
                "env": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
                "median_ms": {k: float(np.median(v) * 1e3) for k, v in times.items()},
            }
        )
    )


def main() -> int:
    sys.path.insert(0, str(HERE))
    from _data import cpu_summary

    print(f"CPU: {cpu_summary()}; scan Q=1 N={N} d={D}, medians of {ROUNDS} rounds")
    results = {}
    for name, extra in (("policy", {}), ("no policy", {"AGENTCIR_THREAD_POLICY": "off"})):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "AGENTCIR_THREAD_POLICY")}
        env.update(extra, PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
        out = subprocess.run(
            [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=1200
        )
        if out.returncode != 0:
            print(out.stderr[-2000:])
            return 1
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'case':30s} " + " ".join(f"{n + ' ms':>12s} {'vs idle':>8s}" for n in results))
    worst = 0.0
    for kind in ("f32", "bf16"):
        for case in CASES:
            key = f"{kind} {case}"
            cells = []
            for name, r in results.items():
                m, idle = r["median_ms"][key], r["median_ms"][f"{kind} idle"]
                cells.append(f"{m:12.1f} {m / idle:8.2f}")
                if name == "policy":
                    worst = max(worst, m / idle)
            print(f"{key:30s} " + " ".join(cells))
    print(
        f"[{'PASS' if worst <= 1.10 else 'MISS'}] with the policy every scan within 1.10x of the idle scan "
        f"(worst {worst:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
        sys.exit(0)
    sys.exit(main())
