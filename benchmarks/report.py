"""Print the kernel benchmarks of pytest-benchmark JSON runs side by side, and check the targets.

    python benchmarks/report.py benchmarks/results/latest.json [another-isa.json ...]

Each file is one run (one ISA: native, or forced lower by ``NUMBA_CPU_NAME`` / ``OPENBLAS_CORETYPE`` /
``ATEN_CPU_CAPABILITY``; the run records which, and the report prints it next to the CPU).

One table per group (``<op> <size>``): median time, time relative to the group's
baseline (``x base``: below 1 is faster), speed-up over it, peak extra memory (measured
in a subprocess, see memory.py) and top-k agreement with the float32 result; the CPU of the
run (model, AVX-512, AVX512-BF16, AMX: from the run's saved machine info) heads every table.
Then the performance targets, each with its measured ratio and PASS / MISS. Only
ratios within one run mean anything on a shared machine.
"""

from __future__ import annotations

import json
from pathlib import Path
import statistics
import sys
from collections import defaultdict


def load(path: str) -> tuple[dict, dict[str, dict[str, dict]]]:
    """group -> provider -> {median (over the round-robin rounds), rounds, extra_info of round 0...}."""
    data = json.loads(open(path, encoding="utf-8").read())
    groups: dict[str, dict[str, dict]] = defaultdict(dict)
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        group = b["group"] or Path(b["fullname"].split("::")[0]).stem  # suites without groups (bench_encoders)
        entry = groups[group].setdefault(info.get("provider", b["name"]), {"times": []})
        entry["times"].extend(
            [b["stats"]["median"]] * b["stats"]["rounds"] if b["stats"]["rounds"] == 1 else [b["stats"]["median"]]
        )
        entry.update({k: v for k, v in info.items() if k != "round"})
    for rows in groups.values():
        for entry in rows.values():
            entry["median"] = statistics.median(entry["times"])
            entry["rounds"] = len(entry["times"])
    return data, groups


def _fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def cpu_line(data: dict) -> str:
    """The run's CPU (pytest-benchmark's ``machine_info``), as :func:`_data.cpu_summary` words it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _data import cpu_summary

    cpu = data.get("machine_info", {}).get("cpu", {})
    if not cpu:
        return "CPU of the run not recorded; this machine: " + cpu_summary()
    return cpu_summary(set(cpu.get("flags", [])), cpu.get("brand_raw", "?"), cpu.get("count"))


def print_tables(groups: dict[str, dict[str, dict]], cpu: str = "") -> None:
    for group, rows in groups.items():
        base = next(iter(rows.values())).get("baseline")
        bmed = rows[base]["median"] if base in rows else None
        print(f"\n## {group}   (baseline: {base})")
        if cpu:
            print(f"CPU: {cpu}")
        print(
            f"{'provider':24s} {'median ms':>10s} {'rounds':>6s} {'x base':>7s} {'speed-up':>8s} {'peak MB':>8s} "
            f"{'agree':>6s}"
        )
        for name, r in sorted(rows.items(), key=lambda kv: kv[1]["median"]):
            ratio = r["median"] / bmed if bmed else None
            print(
                f"{name:24s} {r['median'] * 1e3:10.2f} {r['rounds']:6d} {_fmt(ratio):>7s} "
                f"{_fmt(1 / ratio if ratio else None):>8s} {_fmt(r.get('memory_peak_extra_mb'), '.1f'):>8s} "
                f"{_fmt(r.get('agree_topk_vs_fp32'), '.3f'):>6s}"
            )


def _get(groups, op_prefix: str, provider: str) -> dict | None:
    for group, rows in groups.items():
        if group.startswith(op_prefix) and provider in rows:
            return rows[provider]
    return None


def _med(groups, op_prefix, provider):
    r = _get(groups, op_prefix, provider)
    return None if r is None else r["median"]


def _quartile(times: list[float], q: float) -> float:
    xs = sorted(times)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def slower_beyond_spread(base: dict, other: dict) -> bool:
    """Whether ``other`` is slower than ``base`` beyond the run-to-run spread of the round-robin rounds:
    its first quartile is above ``base``'s third quartile (the two interquartile ranges do not overlap).
    Without per-round times (one round) the medians decide."""
    a = base.get("times") or [base["median"]]
    b = other.get("times") or [other["median"]]
    return _quartile(b, 0.25) > _quartile(a, 0.75)


def _half_vs_f32(groups, prefixes: tuple[str, ...]) -> list[tuple[str, float, bool]]:
    """``(group, f32 / half median, slower beyond the spread)`` for every half provider of the groups."""
    out = []
    for group in [g for g in groups if g.startswith(prefixes)]:
        base = groups[group].get("numba-f32")
        for h in ("numba-f16", "numba-bf16"):
            half = groups[group].get(h)
            if base and half:
                out.append((f"{group} {h}", base["median"] / half["median"], slower_beyond_spread(base, half)))
    return out


def _half_line(ratios: list[tuple[str, float, bool]], short) -> str:
    slower = [f"{short(g)} {r:.2f}x" for g, r, s in ratios if s]
    within = [f"{short(g)} {r:.2f}x" for g, r, s in ratios if r < 1.0 and not s]
    return (
        "slower beyond the spread: "
        + (", ".join(slower) or "none")
        + "; medians below 1.00x within the spread: "
        + (", ".join(within) or "none")
        + f"; range {min(r for _, r, _ in ratios):.2f}-{max(r for _, r, _ in ratios):.2f}x"
    )


def targets(groups) -> list[tuple[str, bool | None, str]]:
    """(target, passed or None when not measured, measured ratios) per issue-#4 target."""
    out = []
    oc = "octopus_topk Q64-K10-N100k-d512"
    base, f32 = _get(groups, oc, "torch-naive-f32"), _get(groups, oc, "numba-f32")
    if base and f32:
        speed = base["median"] / f32["median"]
        mb, mf = base.get("memory_peak_extra_mb"), f32.get("memory_peak_extra_mb")
        mem = mb / mf if mb and mf else None
        out.append(
            (
                "octopus fp32 no slower than straightforward torch",
                speed >= 1.0,
                f"torch-naive / numba-f32 time = {speed:.2f}x",
            )
        )
        out.append(
            (
                "octopus fp32 peak extra memory >= 10x smaller",
                mem is not None and mem >= 10,
                f"torch-naive {_fmt(mb, '.1f')} MB / numba-f32 {_fmt(mf, '.1f')} MB = {_fmt(mem, '.1f')}x",
            )
        )
        halves = []
        for half in ("numba-bf16", "numba-f16"):
            r = _get(groups, oc, half)
            if r:
                halves.append((half, base["median"] / r["median"], r.get("agree_topk_vs_fp32") or 0.0))
        if halves:
            ok = any(sp >= 1.5 and ag >= 0.99 for _, sp, ag in halves)
            out.append(
                (
                    "octopus half gallery >= 1.5x faster than fp32 torch, top-10 agree >= 99%",
                    ok,
                    "; ".join(f"{h}: {sp:.2f}x faster, agreement {ag:.3f}" for h, sp, ag in halves),
                )
            )
    c1 = "cosine_topk Q1-N1M-d512"
    f32, bound, gemv = (
        _med(groups, c1, "numba-f32"),
        _med(groups, c1, "numpy-sum-read"),
        _med(groups, c1, "numpy-gemv-read"),
    )
    if f32 and bound:
        out.append(
            (
                "cosine Q=1 N=1M within 1.3x of numpy reading the gallery (plain sum)",
                f32 / bound <= 1.3,
                f"numba-f32 / numpy-sum = {f32 / bound:.2f}"
                + (f"; vs the faster BLAS gemv read: {f32 / gemv:.2f}" if gemv else ""),
            )
        )
        halves = [(h, _med(groups, c1, h)) for h in ("numba-bf16", "numba-f16")]
        halves = [(h, m) for h, m in halves if m]
        if halves:
            h, m = min(halves, key=lambda hm: hm[1])
            out.append(
                (
                    "cosine Q=1 half gallery >= 1.5x faster than fp32",
                    f32 / m >= 1.5,
                    f"numba-f32 / {h} = {f32 / m:.2f}x (" + ", ".join(f"{n}: {f32 / v:.2f}x" for n, v in halves) + ")",
                )
            )
    c64 = "cosine_topk Q64-N100k-d512"
    f32 = _med(groups, c64, "numba-f32")
    rivals = {p: _med(groups, c64, p) for p in ("torch-naive-f32", "faiss-flatip-blas-f32", "faiss-flatip-f32")}
    rivals = {p: m for p, m in rivals.items() if m}
    if f32 and rivals:
        best_p, best_m = min(rivals.items(), key=lambda pm: pm[1])
        out.append(
            (
                "cosine Q=64 N=100k at least as fast as best of torch and faiss (tuned)",
                f32 <= best_m,
                f"best rival {best_p}: {best_m * 1e3:.1f} ms, numba-f32: {f32 * 1e3:.1f} ms "
                f"({best_m / f32:.2f}x); " + ", ".join(f"{p} {m * 1e3:.1f} ms" for p, m in rivals.items()),
            )
        )
    out += targets_14(groups)
    for group in [g for g in groups if g.startswith("rrf ")]:
        ref, nb = _med(groups, group, "reference"), _med(groups, group, "numba")
        if ref and nb:
            out.append(
                (
                    f"rrf over 64 queries >= 2x faster than the numpy reference ({group[4:]})",
                    ref / nb >= 2,
                    f"reference / numba = {ref / nb:.2f}x",
                )
            )
    return out


def targets_14(groups) -> list[tuple[str, bool | None, str]]:
    """The targets of the scoring core (ahead of every peer), from the same run."""
    out = []
    c64 = "cosine_topk Q64-N100k-d512"
    f32 = _med(groups, c64, "numba-f32")
    if f32:
        rivals = {
            p: _med(groups, c64, p)
            for p in (
                "faiss-flatip-blas-f32",
                "torch-naive-f32",
                "usearch-exact-f32",
                "hnswlib-bf-f32",
                "faiss-flatip-f32",
            )
        }
        rivals = {p: m for p, m in rivals.items() if m}
        key = [p for p in ("faiss-flatip-blas-f32", "torch-naive-f32") if p in rivals]
        if key:
            out.append(
                (
                    "cosine Q=64 N=100k fp32 >= 1.2x faster than tuned faiss and than torch",
                    all(rivals[p] / f32 >= 1.2 for p in key),
                    ", ".join(f"{p} {rivals[p] * 1e3:.1f} ms ({rivals[p] / f32:.2f}x)" for p in rivals)
                    + f"; numba-f32 {f32 * 1e3:.1f} ms",
                )
            )
    oc = "octopus_topk Q64-K10-N100k-d512"
    base, nf = _med(groups, oc, "torch-naive-f32"), _med(groups, oc, "numba-f32")
    if base and nf:
        out.append(
            (
                "fused OCTOPUS fp32 >= 2x faster than the straightforward torch",
                base / nf >= 2.0,
                f"torch-naive / numba-f32 = {base / nf:.2f}x",
            )
        )
    c1 = "cosine_topk Q1-N1M-d512"
    f32 = _med(groups, c1, "numba-f32")
    halves = {h: _med(groups, c1, h) for h in ("numba-f16", "numba-bf16")}
    if f32 and all(halves.values()):
        out.append(
            (
                "cosine Q=1 half galleries >= 1.8x faster than fp32",
                all(f32 / m >= 1.8 for m in halves.values()),
                ", ".join(f"numba-f32 / {h} = {f32 / m:.2f}x" for h, m in halves.items()),
            )
        )
    halves = _half_vs_f32(groups, ("cosine_topk", "octopus_topk"))
    if halves:
        out.append(
            (
                "half galleries never slower than fp32 beyond the run-to-run spread (every cosine / octopus size)",
                not any(s for _, _, s in halves),
                _half_line(halves, lambda g: g),
            )
        )
    o1 = "octopus_topk Q1-K10-N200k-d512"
    nb, bound = _med(groups, o1, "numba-f32"), _med(groups, o1, "numpy-sum-read-2pass")
    if nb and bound:
        once = _med(groups, o1, "numpy-sum-read")
        out.append(
            (
                "octopus_topk Q=1 within 1.5x of the read bound of its two passes",
                nb / bound <= 1.5,
                f"numba-f32 / numpy sum over images twice + captions = {nb / bound:.2f}"
                + (f"; vs images + captions once: {nb / once:.2f}" if once else ""),
            )
        )
    return out


def isa_line(data: dict) -> str:
    """``native`` or the variables that forced a lower ISA in the run (conftest's ``isa_forcing``)."""
    forced = data.get("machine_info", {}).get("isa_forcing") or {}
    shown = {k: v for k, v in forced.items() if not k.startswith("AGENTCIR_")}
    return ("forced: " + " ".join(f"{k}={v}" for k, v in shown.items())) if shown else "native (nothing forced)"


def _sweep(groups) -> dict[int, dict[str, float]]:
    """Q -> provider -> median seconds of the batch sweep (``cosine_sweep Q<n>-...`` groups)."""
    out: dict[int, dict[str, float]] = {}
    for group, rows in groups.items():
        if group.startswith("cosine_sweep Q"):
            q = int(group.split()[1].split("-")[0][1:])
            out[q] = {p: r["median"] for p, r in rows.items()}
    return dict(sorted(out.items()))


def crossover(sweep: dict[int, dict[str, float]], a: str, b: str) -> str:
    """Where ``a`` is faster than ``b`` along the sweep, e.g. ``a faster from Q=64`` (the Q values at which it leads)."""
    lead = [q for q, t in sweep.items() if a in t and b in t and t[a] < t[b]]
    seen = [q for q, t in sweep.items() if a in t and b in t]
    if not seen:
        return "not measured"
    if not lead:
        return f"{a} never faster"
    if lead == seen:
        return f"{a} faster at every Q"
    first = lead[0]
    if lead == [q for q in seen if q >= first]:
        return f"{a} faster from Q={first}"
    return f"{a} faster at Q={','.join(map(str, lead))}"


def print_sweep(groups) -> None:
    sweep = _sweep(groups)
    if not sweep:
        return
    provs = sorted({p for t in sweep.values() for p in t})
    print("\n## batch sweep (cosine_topk, N=20k d=512): median ms per Q")
    print(f"{'Q':>6s} " + " ".join(f"{p:>21s}" for p in provs))
    for q, t in sweep.items():
        print(f"{q:6d} " + " ".join(f"{t[p] * 1e3:21.2f}" if p in t else f"{'-':>21s}" for p in provs))
    print("crossovers:")
    for a, b in (
        ("numba-f32", "faiss-flatip-blas-f32"),
        ("numba-f32", "torch-naive-f32"),
        ("numba-blas-f32", "numba-loop-f32"),
        ("numba-bf16", "numba-f32"),
        ("numba-f16", "numba-f32"),
    ):
        print(f"  {a} vs {b}: {crossover(sweep, a, b)}")


def targets_portable(groups) -> list[tuple[str, bool | None, str]]:
    """The targets that must hold on every ISA (one run per ISA, ``isa_line`` says which)."""
    out = []
    c64 = "cosine_topk Q64-N100k-d512"
    f32 = _med(groups, c64, "numba-f32")
    faiss = [m for m in (_med(groups, c64, p) for p in ("faiss-flatip-blas-f32", "faiss-flatip-f32")) if m]
    torch = _med(groups, c64, "torch-naive-f32")
    if f32 and (faiss or torch):
        best = min(faiss + ([torch] if torch else []))
        out.append(
            (
                "cosine Q=64 N=100k fp32 >= 1.2x the best of tuned faiss and torch",
                best / f32 >= 1.2,
                f"best rival {best * 1e3:.1f} ms / numba-f32 {f32 * 1e3:.1f} ms = {best / f32:.2f}x"
                + (f" (faiss {min(faiss) * 1e3:.1f} ms" if faiss else " (")
                + (f", torch {torch * 1e3:.1f} ms)" if torch else ")"),
            )
        )
    oc = "octopus_topk Q64-K10-N100k-d512"
    nf, tb, tn = _med(groups, oc, "numba-f32"), _med(groups, oc, "torch-f32"), _med(groups, oc, "torch-naive-f32")
    if nf and tb:
        out.append(
            (
                "fused OCTOPUS Q=64 fp32 >= 1.5x the torch backend",
                tb / nf >= 1.5,
                f"torch-f32 {tb * 1e3:.0f} ms / numba-f32 {nf * 1e3:.0f} ms = {tb / nf:.2f}x",
            )
        )
    if nf and tn:
        out.append(
            (
                "fused OCTOPUS Q=64 fp32 >= 2x the naive torch",
                tn / nf >= 2.0,
                f"torch-naive-f32 {tn * 1e3:.0f} ms / numba-f32 {nf * 1e3:.0f} ms = {tn / nf:.2f}x",
            )
        )
    ratios = _half_vs_f32(groups, ("cosine_topk", "octopus_topk", "cosine_sweep"))
    if ratios:
        out.append(
            (
                "half galleries never slower than fp32 beyond the run-to-run spread (every size and Q)",
                not any(s for _, _, s in ratios),
                _half_line(
                    ratios,
                    lambda g: f"{g.split()[0].replace('cosine_', '')} {g.split()[1].split('-')[0]} {g.split()[-1][6:]}",
                ),
            )
        )
    c1 = "cosine_topk Q1-N1M-d512"
    f32 = _med(groups, c1, "numba-f32")
    reads = {p: _med(groups, c1, p) for p in ("numpy-sum-read", "numpy-gemv-read")}
    reads = {p: m for p, m in reads.items() if m}
    if f32 and reads:
        p, m = min(reads.items(), key=lambda pm: pm[1])
        out.append(
            (
                "cosine Q=1 N=1M fp32 within 1.15x of the best read of the same bytes",
                f32 / m <= 1.15,
                f"numba-f32 {f32 * 1e3:.1f} ms / {p} {m * 1e3:.1f} ms = {f32 / m:.2f}",
            )
        )
    i8 = _get(groups, c1, "numba-int8-rerank")
    if f32 and i8:
        scan = _get(groups, c1, "numba-int8")
        agree = i8.get("agree_topk_vs_fp32")
        out.append(
            (
                "int8 Q=1 N=1M >= 3x fp32 (scan + exact fp32 re-rank)",
                f32 / i8["median"] >= 3.0,
                f"numba-f32 {f32 * 1e3:.1f} ms / numba-int8-rerank {i8['median'] * 1e3:.1f} ms = "
                f"{f32 / i8['median']:.2f}x"
                + (f"; scan alone {f32 / scan['median']:.2f}x" if scan else "")
                + (f"; top-k agreement with fp32 {agree:.3f}" if agree is not None else ""),
            )
        )
    return out


def main(paths: list[str]) -> int:
    for path in paths:
        data, groups = load(path)
        cpu, isa = cpu_line(data), isa_line(data)
        print(f"# kernel benchmarks: {path}")
        print(
            f"run: {data.get('datetime', '?')}, commit {data.get('commit_info', {}).get('id', '?')[:10]}, "
            f"cpu {cpu}; ISA {isa}"
        )
        print_tables(groups, f"{cpu}; ISA {isa}")
        print_sweep(groups)
        print(f"\n## targets   CPU: {cpu}; ISA {isa}")
        for name, ok, detail in targets(groups):
            print(f"[{'PASS' if ok else 'MISS'}] {name}: {detail}")
        print(f"\n## portable targets (every ISA)   CPU: {cpu}; ISA {isa}")
        for name, ok, detail in targets_portable(groups):
            print(f"[{'PASS' if ok else 'MISS'}] {name}: {detail}")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["benchmarks/results/latest.json"]))
