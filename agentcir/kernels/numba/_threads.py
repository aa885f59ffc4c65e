"""Thread policy of the numba backend: one threading layer, dynamically scheduled chunks.

The numba kernels use no BLAS or torch thread pool for their gallery products (the
microkernels of :mod:`._gemm`, or the BLAS called from numba's threads and set to one thread
meanwhile, :mod:`._sgemm`), so a call runs on numba's pool alone. ``balanced()`` switches the
``prange`` loops of a call to dynamic scheduling (one chunk at a time, numba's
``set_parallel_chunksize``): when another thread holds a core (a BLAS pool still spinning
after the caller's last numpy call, another process), the free thread takes the
remaining chunks instead of waiting for a static half of the work.
The process-wide part of the policy (idle BLAS threads that sleep instead of spinning) is
:mod:`agentcir._threads`, applied when ``agentcir`` is imported.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numba


@contextlib.contextmanager
def balanced() -> Iterator[None]:
    """Run the parallel kernels called inside with dynamic scheduling (chunk size 1)."""
    old = numba.set_parallel_chunksize(1)
    try:
        yield
    finally:
        numba.set_parallel_chunksize(old)
