"""benchmarks/report.py's per-ISA parts on hand-made groups: the ISA line, the batch-sweep
crossovers and the portable targets' PASS / MISS (the benchmark runs themselves are not tests)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("bench_report", Path(__file__).parents[2] / "benchmarks" / "report.py")
report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(report)


def _groups(rows: dict[str, dict[str, float]]) -> dict:
    return {g: {p: {"median": m} for p, m in provs.items()} for g, provs in rows.items()}


def test_isa_line_names_what_was_forced():
    assert report.isa_line({"machine_info": {}}) == "native (nothing forced)"
    line = report.isa_line(
        {"machine_info": {"isa_forcing": {"NUMBA_CPU_NAME": "haswell", "AGENTCIR_KERNELS_PRODUCT": "blas"}}}
    )
    assert line == "forced: NUMBA_CPU_NAME=haswell"


def test_sweep_crossovers():
    g = _groups(
        {
            f"cosine_sweep Q{q}-N20k-d512": {"numba-f32": a, "faiss-flatip-blas-f32": b}
            for q, a, b in ((1, 1.0, 2.0), (64, 3.0, 2.0), (4096, 5.0, 4.0))
        }
    )
    sweep = report._sweep(g)
    assert list(sweep) == [1, 64, 4096]
    assert report.crossover(sweep, "numba-f32", "faiss-flatip-blas-f32") == "numba-f32 faster at Q=1"
    assert report.crossover(sweep, "faiss-flatip-blas-f32", "numba-f32") == "faiss-flatip-blas-f32 faster from Q=64"
    assert report.crossover(sweep, "numba-f32", "torch-naive-f32") == "not measured"


def test_portable_targets_pass_and_miss():
    g = _groups(
        {
            "cosine_topk Q64-N100k-d512": {"numba-f32": 0.10, "faiss-flatip-blas-f32": 0.13, "torch-naive-f32": 0.5},
            "octopus_topk Q64-K10-N100k-d512": {
                "numba-f32": 1.0,
                "torch-f32": 1.6,
                "torch-naive-f32": 1.9,
                "numba-bf16": 0.9,
            },
            "cosine_topk Q1-N1M-d512": {
                "numba-f32": 0.050,
                "numpy-sum-read": 0.060,
                "numpy-gemv-read": 0.040,
                "numba-f16": 0.051,
            },
        }
    )
    got = {name: ok for name, ok, _ in report.targets_portable(g)}
    assert got == {
        "cosine Q=64 N=100k fp32 >= 1.2x the best of tuned faiss and torch": True,
        "fused OCTOPUS Q=64 fp32 >= 1.5x the torch backend": True,
        "fused OCTOPUS Q=64 fp32 >= 2x the naive torch": False,
        "half galleries never slower than fp32 beyond the run-to-run spread (every size and Q)": False,
        "cosine Q=1 N=1M fp32 within 1.15x of the best read of the same bytes": False,
    }


def test_int8_target_pass_and_miss():
    def target(f32, int8):
        g = _groups({"cosine_topk Q1-N1M-d512": {"numba-f32": f32, "numba-int8": int8 / 2, "numba-int8-rerank": int8}})
        g["cosine_topk Q1-N1M-d512"]["numba-int8-rerank"]["agree_topk_vs_fp32"] = 1.0
        (hit,) = [t for t in report.targets_portable(g) if t[0].startswith("int8 Q=1 N=1M")]
        return hit

    ok, detail = target(0.045, 0.012)[1:]
    assert ok and "3.75x" in detail and "scan alone 7.50x" in detail and "agreement with fp32 1.000" in detail
    assert target(0.045, 0.020)[1] is False
    assert not [t for t in report.targets_portable(_groups({"cosine_topk Q1-N1M-d512": {"numba-f32": 1.0}}))]


def test_half_slower_only_beyond_the_spread_of_the_rounds():
    """A half median a little above fp32's inside overlapping spreads is a tie; disjoint spreads are slower."""

    def verdict(f32_times, half_times):
        g = {
            "cosine_sweep Q64-N20k-d512": {
                "numba-f32": {"median": sorted(f32_times)[len(f32_times) // 2], "times": f32_times},
                "numba-f16": {"median": sorted(half_times)[len(half_times) // 2], "times": half_times},
            }
        }
        (hit,) = [t for t in report.targets_portable(g) if t[0].startswith("half galleries")]
        return hit[1:]

    ok, detail = verdict([1.00, 0.97, 1.03, 0.99, 1.05], [1.02, 0.98, 1.04, 1.01, 1.06])
    assert ok and "slower beyond the spread: none" in detail and "sweep Q64 f16 0.98x" in detail
    ok, detail = verdict([1.00, 0.99, 1.01, 1.00, 1.02], [1.10, 1.12, 1.09, 1.11, 1.13])
    assert not ok and "slower beyond the spread: sweep Q64 f16 0.90x" in detail
    assert report.slower_beyond_spread({"median": 1.0}, {"median": 1.01})  # one round: the medians decide
