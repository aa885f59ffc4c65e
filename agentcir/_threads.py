"""Process-wide thread policy, applied when ``agentcir`` is imported (before numpy loads BLAS).

Cause (issue #14, measured on 2 cores): after a numpy BLAS call, OpenBLAS's worker threads
busy-wait for new work for ``2**28`` cycles (about 0.1 s) before they sleep. A numba kernel
started in that window shares its cores with the spinning threads, and the memory-bound
gallery scan ran 1.5-2x slower right after a BLAS call or inside a round-robin benchmark.

Policy: ``OPENBLAS_THREAD_TIMEOUT`` (OpenBLAS reads it once, when it loads) defaults to
``THREAD_TIMEOUT_LOG2`` = 20, i.e. ``2**20`` cycles (~0.4 ms): back-to-back BLAS calls
still find their threads awake; a kernel started later does not share the cores with
them. The scoring core itself makes no BLAS calls (``kernels/numba/_gemm.py``) and runs
on the one OpenMP runtime numba and torch share. A value the user set is kept;
``AGENTCIR_THREAD_POLICY=off`` disables the policy. It has no effect when numpy was
imported before ``agentcir`` (``applied()`` says whether it took effect).
"""

from __future__ import annotations

import os
import sys

#: OpenBLAS idle threads sleep after 2**THREAD_TIMEOUT_LOG2 cycles of waiting (OpenBLAS default: 28)
THREAD_TIMEOUT_LOG2 = 20
_state = {"applied": False}


def apply() -> bool:
    """Set the defaults above unless disabled or too late (numpy already imported); True when set."""
    if os.environ.get("AGENTCIR_THREAD_POLICY", "").strip().lower() in ("off", "0", "false", "no"):
        return False
    if "numpy" in sys.modules:
        return False
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", str(THREAD_TIMEOUT_LOG2))
    _state["applied"] = True
    return True


def applied() -> bool:
    """Whether :func:`apply` set the policy in this process."""
    return _state["applied"]
