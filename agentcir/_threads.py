"""Process-wide thread policy, applied when ``agentcir`` is imported.

Cause (measured on 2 cores): after a numpy BLAS call, OpenBLAS's worker threads
busy-wait for new work for ``2**28`` cycles (about 0.1 s) before they sleep. A numba kernel
started in that window shares its cores with the spinning threads, and the memory-bound
gallery scan ran 1.3-2x slower right after a BLAS call or inside a round-robin benchmark.

Policy: ``OPENBLAS_THREAD_TIMEOUT`` defaults to ``THREAD_TIMEOUT_LOG2`` = 20, i.e. ``2**20``
cycles (~0.4 ms): back-to-back BLAS calls still find their threads awake; a kernel started
later does not share the cores with them. The scoring core starts no BLAS pool of its own: its
products are numba's microkernels (``kernels/numba/_gemm.py``) or the BLAS called from numba's
threads with the BLAS set to one thread (``kernels/numba/_sgemm.py``), and it runs on the one
OpenMP runtime numba and torch share.

OpenBLAS reads the variable when it loads. When numpy (so its OpenBLAS) was imported before
``agentcir``, every OpenBLAS already loaded in the process (found in ``/proc/self/maps``) is
told to read its environment again (``openblas_read_env``) and its idle thread pool is shut
down (``blas_thread_shutdown_``, what OpenBLAS itself does before a fork); its next call
starts the pool again with the new timeout (this runs at import, before the caller's own
threads run BLAS). A value the user set is kept and nothing is
re-read; ``AGENTCIR_THREAD_POLICY=off`` disables the policy. ``applied()`` says whether it
is in effect.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: OpenBLAS idle threads sleep after 2**THREAD_TIMEOUT_LOG2 cycles of waiting (OpenBLAS default: 28)
THREAD_TIMEOUT_LOG2 = 20
_state = {"applied": False}


def loaded_openblas() -> list[str]:
    """Paths of the OpenBLAS libraries mapped into this process (Linux; elsewhere none)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if "openblas" in line.lower() and ".so" in line}
    except (OSError, IndexError):
        return []
    return sorted(p for p in paths if os.path.isfile(p))


def _reload_timeout(path: str) -> bool:
    """Make the OpenBLAS at ``path`` (already loaded) adopt the environment's thread timeout."""
    try:
        lib = ctypes.CDLL(path)
        read_env, shutdown, timeout = lib.openblas_read_env, lib.blas_thread_shutdown_, lib.openblas_thread_timeout
    except (OSError, AttributeError):  # another build (OpenMP threading, no such symbols): leave it
        return False
    read_env()
    shutdown()
    return timeout() == int(os.environ["OPENBLAS_THREAD_TIMEOUT"])


def apply() -> bool:
    """Set the policy unless disabled or set by the user; True when it is in effect."""
    if os.environ.get("AGENTCIR_THREAD_POLICY", "").strip().lower() in ("off", "0", "false", "no"):
        return False
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:  # the user's value, read by OpenBLAS itself
        _state["applied"] = True
        return True
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(THREAD_TIMEOUT_LOG2)
    late = "numpy" in sys.modules
    _state["applied"] = all([_reload_timeout(p) for p in loaded_openblas()]) if late else True
    return _state["applied"]


def applied() -> bool:
    """Whether the policy is in effect in this process."""
    return _state["applied"]
