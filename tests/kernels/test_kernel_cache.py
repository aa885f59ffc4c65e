"""numba's disk cache of the kernels follows edits across modules (``numba/_cache.py``): a fused kernel
compiled with another module's function is compiled again when that module changes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]

#: the blocked cosine top-k (cosine.py) over the float32 product of _gemm.py; prints the best score
CALL = (
    "import numpy as np\n"
    "from agentcir import kernels as K\n"
    "rng = np.random.default_rng(0)\n"
    "G = rng.standard_normal((50, 8)).astype(np.float32)\n"
    "X = rng.standard_normal((5, 8)).astype(np.float32)\n"
    "print(float(K.cosine_topk(X, G, 1, backend='numba').scores.max()))\n"
)


def _run(package_root: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "NUMBA_DISABLE_JIT")}
    env.update(PYTHONPATH=str(package_root), AGENTCIR_KERNELS_PRODUCT="loop", AGENTCIR_KERNELS_AUTOTUNE="0")
    out = subprocess.run(
        [sys.executable, "-c", CALL], env=env, cwd=package_root, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return float(out.stdout.split()[-1])


def test_an_edit_to_the_product_recompiles_the_kernels_that_call_it(tmp_path):
    shutil.copytree(ROOT / "agentcir", tmp_path / "agentcir", ignore=shutil.ignore_patterns("__pycache__"))
    before = _run(tmp_path)
    assert any((tmp_path / "agentcir/kernels/numba/__pycache__").glob("cosine._blocked_kernel-*.nbi"))
    gemm = tmp_path / "agentcir/kernels/numba/_gemm.py"
    source = gemm.read_text()
    old = "            _panels(Xp, F, f, f + e - b, S[:, b - lo :], G, a0, max(0, min(per, lines)))\n"
    assert old in source
    gemm.write_text(source.replace(old, old + "            S[0, 0] += np.float32(100.0)\n"))
    after = _run(tmp_path)  # cosine.py is unchanged; its cached kernel holds the old product
    assert before < 10 and after > 90, (before, after)


def test_every_compiled_kernel_has_its_own_name():
    """numba names a compiled function (its symbol and its cache entry) by its qualified name and
    argument types: two kernels made by one factory under one name, with the same argument types,
    made a cached caller link one in place of the other (a width-16 sweep ran as a width-8 one)."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import agentcir.kernels.numba as pkg

    seen: dict[str, object] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == mod.__name__:
                name = f"{obj.py_func.__module__}.{obj.py_func.__qualname__}"
                assert seen.setdefault(name, obj) is obj, f"two kernels named {name}"
                assert "compile" in vars(obj), f"{name} compiles without the lock of _cache.compile_once"
    assert "agentcir.kernels.numba._gemm.sweep16" in seen and "agentcir.kernels.numba._common.dot_bf16" in seen


def test_a_kernel_numba_cannot_cache_gets_numbas_warning_not_a_crash():
    """numba declines to cache a compilation that holds dynamic globals (e.g. under ``NUMBA_OPT=0``)
    and warns, naming the source file it reads from the locator: the folder's locator answers it."""
    import types
    import warnings

    from numba.core import caching
    from numba.core.errors import NumbaWarning

    from agentcir.kernels.numba import _cache, cosine

    py_func = cosine._blocked_kernel.py_func
    impl = caching.CompileResultCacheImpl(py_func)
    assert isinstance(impl.locator, _cache.KernelSourcesLocator)
    uncachable = types.SimpleNamespace(
        lifted=(), library=types.SimpleNamespace(has_dynamic_globals=True), fndesc=types.SimpleNamespace(qualname="k")
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert impl.check_cachable(uncachable) is False
    assert any(issubclass(w.category, NumbaWarning) and "Cannot cache" in str(w.message) for w in caught)
    assert impl.locator._py_file == py_func.__code__.co_filename


#: waits for the file ``go``, then runs the numba gate (its serial kernel) and prints that kernel's
#: cache misses and hits
RACE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "import numpy as np\n"
    "from agentcir import kernels as K\n"
    "from agentcir.kernels.numba import gate\n"
    "print('ready', flush=True)\n"
    "while not Path(sys.argv[1]).exists():\n"
    "    time.sleep(0.005)\n"
    "u = K.uncertainty(np.array([[3.0, 2.0, 1.0], [1.0, 1.0, -np.inf]], np.float32), backend='numba')\n"
    "k = gate._gate_rows.serial.stats\n"
    "print(sum(k.cache_misses.values()), sum(k.cache_hits.values()), u.tolist(), flush=True)\n"
)


def test_processes_sharing_the_cache_compile_a_kernel_once(tmp_path):
    """Two processes that need the same uncompiled kernel at the same moment: one compiles it, the
    other waits for it and loads it from the cache (``_cache.compile_once``)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    env.update(PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=str(tmp_path / "cache"), AGENTCIR_KERNELS_AUTOTUNE="0")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(go)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
        go.touch()
        outs = [p.communicate(timeout=300)[0].split(maxsplit=2) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs)
    assert sorted((int(m), int(h)) for m, h, _ in outs) == [(0, 1), (1, 0)], outs
    assert outs[0][2] == outs[1][2]


def test_a_killed_compiling_process_releases_its_lock(tmp_path, monkeypatch, caplog):
    """A process that holds a kernel's lock past ``WAIT_S`` (stopped while compiling) does not hold the
    others forever: they compile the kernel themselves, with a warning; a killed holder frees the lock."""
    import fcntl
    import logging
    import signal
    import time

    from agentcir.kernels.numba import _cache

    lock = tmp_path / "k.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom agentcir.kernels.numba._cache import _exclusive\n"
            "with _exclusive(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(120)\n",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(_cache, "WAIT_S", 0.3)
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger=_cache.__name__), _cache._exclusive(lock):
            waited = time.monotonic() - t0
        assert 0.3 <= waited < 5 and "held" in caplog.text and str(lock) in caplog.text
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
        finally:
            os.close(fd)
    finally:
        holder.kill()
