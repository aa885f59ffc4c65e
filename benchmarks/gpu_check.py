"""Run the GPU backend natively on a CUDA GPU: correctness against the reference, then timings.

    python benchmarks/gpu_check.py                 # on a machine with CUDA, torch and triton
    TRITON_INTERPRET=1 python benchmarks/gpu_check.py --smoke   # the same script on a CPU (tiny)

Correctness: every gallery op of the ``triton`` backend, on each of its product paths (``blas``: the
torch backend's op on the device, cuBLAS tile products; ``loop``: the Triton kernels), against the
numpy reference on odd shapes (ids exact outside near-ties, scores within 2e-5), on CUDA tensors.
Timings (CUDA events, medians): ``auto`` (what ``backend="auto"`` runs on a CUDA machine), the
Triton kernels (``triton-loop``) and straightforward torch for cosine_topk (Q=1, N=1M; Q=64,
N=100k; Q=1024, N=1M; d=512) and octopus_topk (Q=64, K=10, N=100k, d=512), float32 and float16
galleries; faiss's exact GPU index on the cosine shapes when a faiss build with GPUs is installed.
Prints one line per check; exits 1 if a correctness check fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "kernels"))

from agentcir import kernels as K  # noqa: E402
from agentcir.kernels import tune  # noqa: E402


def check_correctness(device: str, smoke: bool) -> bool:
    import torch
    from kernel_checks import check_topk, unit_rows

    rng = np.random.default_rng(0)
    shapes = [(1, 5, 3, 8), (17, 130, 5, 4)] if smoke else [(1, 5, 3, 8), (3, 1000, 37, 10), (70, 5001, 100, 64)]
    ok = True
    for Q, N, d, k in shapes:
        for kind in ("float32", "float16"):
            G, X, T, P = (
                unit_rows(rng, N, d).astype(kind),
                unit_rows(rng, Q, d),
                unit_rows(rng, Q, d),
                unit_rows(rng, Q, 4, d),
            )
            ex = rng.integers(-1, N, size=(Q, 2))
            tG, tX, tT, tP = (torch.from_numpy(a).to(device) for a in (G, X, T, P))
            n = max(k, N)
            checks = [
                (
                    "cosine_topk",
                    K.cosine_topk(X, G, n, exclude=ex, backend="reference"),
                    lambda: K.cosine_topk(tX, tG, k, exclude=ex, backend="triton"),
                ),
                (
                    "proxy logsumexp",
                    K.proxy_scores_topk(P, G, n, agg="logsumexp", tau=0.1, backend="reference"),
                    lambda: K.proxy_scores_topk(tP, tG, k, agg="logsumexp", tau=0.1, backend="triton"),
                ),
                (
                    "octopus_topk",
                    K.octopus_topk(X, P, T, G, n, exclude=ex, backend="reference")[:2],
                    lambda: K.octopus_topk(tX, tP, tT, tG, k, exclude=ex, backend="triton")[:2],
                ),
            ]
            for name, ref, run in checks:
                for path in tune.PATHS:
                    with tune.path_forced(path):
                        got = run()
                    try:
                        check_topk((got[0].cpu().numpy(), got[1].cpu().numpy()), ref, k, 2e-5)
                        status = "ok"
                    except AssertionError as e:
                        ok, status = False, f"FAIL {str(e).strip().splitlines()[0]}"
                    print(f"correctness {name:15s} {path:4s} Q={Q} N={N} d={d} k={k} {kind}: {status}")
    return ok


def cuda_median_ms(fn, rounds: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def timings() -> None:
    import torch
    from _data import torch_octopus

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def unit(*shape):
        x = torch.randn(*shape, device=dev, generator=g)
        return x / x.norm(dim=-1, keepdim=True)

    def loop_ms(op, rounds):
        with tune.path_forced("loop"):
            return cuda_median_ms(op, rounds)

    def providers(op, rounds=20):
        """``auto`` (the default path) and ``triton-loop`` (the Triton kernels) of one op."""
        return {
            "auto": cuda_median_ms(op, rounds),
            "triton-loop": loop_ms(op, rounds),
        }

    print(f"auto -> {K.resolve('auto')}, product path {tune.forced() or 'blas (default)'}")
    for Q, N in ((1, 1_000_000), (64, 100_000), (1024, 1_000_000)):
        G, X = unit(N, 512), unit(Q, 512)
        for kind, Gk in (("f32", G), ("f16", G.half())):
            row = providers(lambda: K.cosine_topk(X, Gk, 10))
            row["torch-naive"] = cuda_median_ms(lambda: torch.topk(X @ Gk.float().T, 10))
            print(f"cosine_topk Q={Q} N={N} {kind}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in row.items()))
    Q, Kp, N = 64, 10, 100_000
    I, C = unit(N, 512), unit(N, 512)
    ref, P, qt, qv = unit(Q, 512), unit(Q, Kp, 512), unit(Q, 512), unit(Q, 512)
    ex = torch.randint(0, N, (Q,), device=dev)
    for kind, (Ik, Ck) in (("f32", (I, C)), ("f16", (I.half(), C.half()))):
        row = providers(lambda: K.octopus_topk(ref, P, qt, Ik, 10, visual=qv, captions=Ck, exclude=ex), rounds=10)
        row["torch-naive"] = cuda_median_ms(
            lambda: torch_octopus(ref, P, qt, qv, Ik.float(), Ck.float(), ex, 10), rounds=10
        )
        print(f"octopus_topk Q={Q} K={Kp} N={N} {kind}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in row.items()))
    faiss_gpu(unit)


def faiss_gpu(unit) -> None:
    """faiss's exact GPU index (``GpuIndexFlatIP``) on the cosine shapes, when a faiss build with GPUs is
    installed (the ``faiss-gpu`` wheels); otherwise one line saying why not."""
    try:
        import faiss
    except ImportError:
        print("faiss-gpu: faiss is not installed")
        return
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        print(f"faiss-gpu: faiss {faiss.__version__} has no GPU support here (a CPU build, or no GPU it can use)")
        return
    res = faiss.StandardGpuResources()
    for Q, N in ((1, 1_000_000), (64, 100_000)):
        G, X = unit(N, 512).cpu().numpy(), unit(Q, 512).cpu().numpy()
        index = faiss.GpuIndexFlatIP(res, 512)
        index.add(G)
        index.search(X, 10)
        times = []
        for _ in range(20):
            t = time.perf_counter()
            index.search(X, 10)  # host queries in, host results out: synchronous
            times.append((time.perf_counter() - t) * 1e3)
        print(f"faiss-gpu GpuIndexFlatIP Q={Q} N={N} f32: {statistics.median(times):.2f} ms (host to host)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny correctness shapes only (interpreter on a CPU)")
    args = ap.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("no CUDA device: run with TRITON_INTERPRET=1 and --smoke for the CPU interpreter")
        return 2
    ok = check_correctness(device, args.smoke)
    if device == "cuda" and not args.smoke:
        timings()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
