"""Compile every Triton kernel for a CUDA GPU, on a machine that has none.

``python -m agentcir.kernels.triton.aot --arch 90 --arch 80`` runs each Triton op on small
CPU tensors with the kernel launches replaced by Triton's ``warmup`` (compile, do not launch)
under a compile-only driver for the chosen compute capability. The kernels therefore go
through the exact specialisation, constexpr values and options of a real launch, down to
PTX and cubin (Triton ships ``ptxas``), so type errors, unsupported operations and shared
memory beyond the device limit show up without a GPU. What it cannot show is the numbers:
those are checked by the interpreter tests and, on a GPU, by ``benchmarks/gpu_check.py``.

Prints one JSON object: per architecture, the compiled kernels with their constexpr
values, shared memory and PTX size; exits 1 when a kernel needs more shared memory than the
device allows (limits known for sm_80/86/89/90). Must run without ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

#: shared memory one block may use, per compute capability (CUDA C programming guide, table
#: "technical specifications per compute capability": 163 KB on 8.0, 99 KB on 8.6/8.9, 227 KB on 9.0)
SHARED_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}


class CompileOnlyDriver:
    """The part of Triton's active driver a ``warmup`` call asks for, for a fixed target."""

    def __init__(self, arch: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        return self.target


class CompileOnlyKernel:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args)`` compiles (``warmup``)
    instead of launching, and records the result."""

    def __init__(self, fn, name: str, log: list[dict[str, Any]]):
        self.fn, self.name, self.log = fn, name, log

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            k = self.fn.warmup(*args, grid=grid, **kwargs)
            self.log.append(
                {
                    "kernel": self.name,
                    "target": f"{k.metadata.target.backend}:{k.metadata.target.arch}",
                    "constexprs": {n: v for n, v in kwargs.items()},
                    "shared_bytes": int(k.metadata.shared),
                    "num_warps": int(k.metadata.num_warps),
                    "ptx_chars": len(k.asm["ptx"]),
                    "cubin_bytes": len(k.asm["cubin"]),
                }
            )

        return launch


#: (module, kernel attribute) of every Triton kernel of the backend
KERNELS = (
    ("cosine", "_cosine_kernel"),
    ("proxy", "_proxy_kernel"),
    ("octopus", "_octopus_kernel"),
    ("weights", "_gap_kernel"),
)
KINDS = ("float32", "float16", "bfloat16")


def _launches(kinds: tuple[str, ...] = KINDS) -> None:
    """Each op in the configurations the framework uses: every gallery dtype of ``kinds``, with
    and without an exclude list, a small and the largest device k, every aggregation, OCTOPUS
    with and without the caption channel; on the Triton kernels' product path (``loop``)."""
    from .. import tune

    with tune.path_forced("loop"):
        _launch_each(kinds)


def _launch_each(kinds: tuple[str, ...]) -> None:
    import numpy as np
    import torch

    from .. import triton as T
    from .._inputs import to_backend_gallery
    from ._common import MAX_DEVICE_K

    rng = np.random.default_rng(0)
    Q, K, N, D = 4, 3, 300, 384
    f = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    excl = torch.zeros((Q, 1), dtype=torch.int32)
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    for kind in kinds:
        dt = dtypes[kind]
        g = to_backend_gallery(f(N, D).to(dt), "torch")
        for ex in (None, excl):
            T.cosine_topk(f(Q, D), g, 10, ex, None)
            for agg in ("mean", "max", "logsumexp"):
                T.proxy_scores_topk(f(Q, K, D), g, 10, agg, 0.04, None, ex, None)
            T.octopus_topk(f(Q, D), f(Q, K, D), f(Q, D), f(Q, D), g, g, 10, 0.5, 0.04, 1.0, ex, -10.0)
        T.octopus_topk(f(Q, D), f(Q, K, D), f(Q, D), None, g, None, 10, 0.5, 0.04, 1.0, excl, -10.0)
        T.proxy_scores_topk(f(Q, K, D), g, 10, "octopus", 0.04, f(Q, D), None, None)
    g = to_backend_gallery(f(N, D), "torch")
    big = MAX_DEVICE_K  # the largest k done on the device (a power of two: KP = k)
    T.cosine_topk(f(Q, D), g, big, excl, None)
    T.proxy_scores_topk(f(Q, K, D), g, big, "mean", 0.04, None, excl, None)
    T.octopus_topk(f(Q, D), f(Q, K, D), f(Q, D), f(Q, D), g, g, big, 0.5, 0.04, 1.0, excl, -10.0)


def compile_all(archs: list[int], kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    """Compile every kernel launch of :func:`_launches` for each compute capability."""
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"aot: unknown gallery dtype(s) {bad}; choose from {list(KINDS)}")
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("agentcir.kernels.triton.aot compiles real kernels: unset TRITON_INTERPRET")
    import importlib

    from triton.runtime.driver import driver

    mods = {m: importlib.import_module(f"{__package__}.{m}") for m, _ in KERNELS}
    saved = {(m, a): getattr(mods[m], a) for m, a in KERNELS}
    saved_on_device = {m: mod.on_device for m, mod in mods.items()}
    out: dict[str, Any] = {}
    previous = driver._active  # None until something asked for the real driver
    try:
        for mod in mods.values():  # tensors stay on the CPU: nothing is launched
            mod.on_device = lambda g: g
        for arch in archs:
            log: list[dict[str, Any]] = []
            driver.set_active(CompileOnlyDriver(arch))
            for (m, a), fn in saved.items():
                fn.device_caches.clear()  # compiled kernels are cached per device, not per target
                setattr(mods[m], a, CompileOnlyKernel(fn, a, log))
            _launches(tuple(kinds))
            unique = {json.dumps(r, sort_keys=True): r for r in log}
            out[f"sm_{arch}"] = {"kernels": list(unique.values()), "shared_limit": SHARED_LIMIT.get(arch)}
    finally:
        for (m, a), fn in saved.items():
            setattr(mods[m], a, fn)
        for m, fn in saved_on_device.items():
            mods[m].on_device = fn
        driver.set_active(previous)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, action="append", help="compute capability x10, e.g. 90 (H100/H200), 80 (A100)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="gallery dtypes, comma-separated (default: all)")
    args = ap.parse_args(argv)
    try:
        res = compile_all(args.arch or [90], tuple(k for k in args.kinds.split(",") if k))
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    json.dump(res, sys.stdout, indent=1)
    print()
    over = [
        (a, r["kernel"], r["constexprs"], r["shared_bytes"])
        for a, v in res.items()
        for r in v["kernels"]
        if v["shared_limit"] and r["shared_bytes"] > v["shared_limit"]
    ]
    for a, name, const, used in over:
        print(
            f"error: {a} {name} {const} needs {used} bytes of shared memory, over the device's "
            f"{res[a]['shared_limit']}",
            file=sys.stderr,
        )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
