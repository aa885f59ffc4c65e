"""pytest-benchmark setup of the kernel benchmarks (``make bench``).

* collects ``bench_*.py`` files (one per op; ``bench_encoders.py`` may sit beside them);
* every bench file runs its providers round-robin (``round_robin``: round 0 of every
  provider, then round 1, ..., each round in a shuffled order), so that on a shared machine a
  change of load hits all providers alike; each test times one call and ``report.py`` takes the median per provider;
* ``run_provider`` times one provider on one size, in the group ``<op> <size>``, and records
  in ``extra_info`` the op, size, baseline, round, and in round 0 the top-k agreement with
  the float32 result and, where asked, the peak extra memory measured in a fresh
  subprocess (:mod:`memory`);
* before each timed call the machine settles (``_data.quiet``: under 0.3 busy cores, at most
  3 s; ``AGENTCIR_BENCH_SETTLE=0`` turns it off): a BLAS or OpenMP pool spins on for up to
  ~0.2 s after its call, and would otherwise slow down whichever provider comes next;
* a provider whose warm-up call took under ``WARM_BELOW`` (0.1 s) is then called once more,
  untimed, right before its timed call: the call is timed as one of a stream of queries, with
  its own thread pool awake. A single call after the settling pause pays for waking the
  pool's sleeping threads (on a virtual machine, waking a halted vCPU), which measured 1-6 ms
  at random (a 1.7 ms scan read 7 ms): noise as large as the call itself; its round then times a
  stream of calls (``STREAM_S``, 0.05 s of them, at most ``STREAM_CALLS``) and records the mean per
  call (``extra_info["calls"]``);
* ``benchmarks/report.py`` turns the saved JSON into ratio tables and target checks.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench files import _data and sizes (pytest runs in importlib mode)

from _data import quiet  # noqa: E402


def pytest_collect_file(file_path, parent):
    # a file named on the command line is collected by pytest itself; do not collect it twice
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_configure(config):
    os.environ.setdefault("AGENTCIR_KERNELS", "numba")  # never the Triton interpreter by accident


#: environment variables that force a lower ISA's code generation (recorded with every run)
ISA_FORCING = (
    "NUMBA_CPU_NAME",
    "NUMBA_CPU_FEATURES",
    "OPENBLAS_CORETYPE",
    "ATEN_CPU_CAPABILITY",
    "FAISS_OPT_LEVEL",
    "AGENTCIR_KERNELS_PRODUCT",
    "AGENTCIR_KERNELS_AUTOTUNE",
)


def pytest_benchmark_update_machine_info(config, machine_info):
    """The run's forced ISA (``report.py`` prints it next to the CPU: forced figures are marked)."""
    machine_info["isa_forcing"] = {k: os.environ[k] for k in ISA_FORCING if os.environ.get(k)}


def memory_in_subprocess(bench_file: str, size: str, provider: str) -> dict:
    """Peak extra bytes of one call, measured by ``memory.py`` in a fresh interpreter."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    out = subprocess.run(
        [sys.executable, str(HERE / "memory.py"), bench_file, size, provider],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


def round_robin(providers, rounds: int) -> list:
    """``(provider, round)`` parameters in round-robin order (ids ``<provider>-r<round>``), the
    providers of each round in a shuffled order (seeded, the same in every run): with one fixed
    order a provider always follows the same one, and on a host whose memory speed changes
    within a second that alone moved the ratios of side-by-side probes by 10-20%."""
    n_rounds = int(os.environ.get("AGENTCIR_BENCH_ROUNDS") or rounds)  # fewer on a busy machine
    rng = random.Random(len(providers) * 1000 + n_rounds)
    order = []
    for r in range(n_rounds):
        ps = list(providers)
        rng.shuffle(ps)
        order += [pytest.param(p, r, id=f"{p}-r{r}") for p in ps]
    return order


#: providers faster than this (seconds, their warm-up call) get an untimed call before each timed one
WARM_BELOW = 0.1
#: and such a provider's round times a stream of calls of about this many seconds (at most
#: ``STREAM_CALLS`` calls): its per-call mean, so that one late wake-up of a thread does not decide it
STREAM_S, STREAM_CALLS = 0.05, 50
#: warm-up seconds per (op, size, provider), from round 0
_warm_up_s: dict[tuple[str, str, str], float] = {}


def run_provider(
    benchmark, module, size: dict, provider: str, inputs: dict, round_: int, *, memory: bool = False
) -> None:
    """Time one call of ``module.PROVIDERS[provider](inputs)``; round 0 warms up and measures extras."""
    fn = module.PROVIDERS[provider]
    benchmark.group = f"{module.OP} {size['name']}"
    info = benchmark.extra_info
    info.update(
        op=module.OP,
        size=size["name"],
        provider=provider,
        baseline=module.BASELINE,
        round=round_,
        params={k: v for k, v in size.items() if k != "name"},
    )
    key = (module.OP, size["name"], provider)
    if round_ == 0:
        out = fn(inputs)  # warm-up: numba compile / cache load, torch and faiss initialisation
        t0 = time.perf_counter()
        out = fn(inputs)
        _warm_up_s[key] = time.perf_counter() - t0
        ids = getattr(module, "result_ids", lambda o: None)(out)
        if ids is not None and inputs.get("ref_ids") is not None:
            from _data import topk_agreement

            info["agree_topk_vs_fp32"] = topk_agreement(ids, inputs["ref_ids"])
        if memory:
            info.update(
                {
                    f"memory_{k}": v
                    for k, v in memory_in_subprocess(Path(module.__file__).name, size["name"], provider).items()
                }
            )
    settle = os.environ.get("AGENTCIR_BENCH_SETTLE", "1").strip().lower() not in ("0", "false", "no", "off")

    def setup():
        # the previous provider's thread pools (OpenBLAS, MKL / OpenMP) keep spinning for up to
        # ~0.2 s after its call: timed now, they would take cores from this one
        if settle:
            info["settle_s"] = max(info.get("settle_s", 0.0), quiet(below=0.3, limit=3.0))
        if _warm_up_s.get(key, float("inf")) < WARM_BELOW:
            info["warm_call"] = True
            fn(inputs)
        return (inputs,), {}

    warm = _warm_up_s.get(key, float("inf"))
    calls = max(1, min(STREAM_CALLS, int(STREAM_S / max(warm, 1e-6)))) if warm < WARM_BELOW else 1
    info["calls"] = calls
    if calls == 1:
        benchmark.pedantic(fn, setup=setup, rounds=1, iterations=1, warmup_rounds=0)
    else:  # pytest-benchmark takes no setup with several iterations: settle first, then time the stream
        setup()
        benchmark.pedantic(fn, args=(inputs,), rounds=1, iterations=calls, warmup_rounds=0)


def as_numpy_ids(out) -> np.ndarray:
    """ids of a provider's output: (scores, ids) tuples, TopK, torch topk results."""
    ids = out[1] if isinstance(out, tuple) else getattr(out, "ids", None)
    if ids is None:
        ids = out.indices
    return ids.numpy() if hasattr(ids, "numpy") else np.asarray(ids)
