"""Fixtures of the scoring-core tests: the backends to test, gallery dtypes, small tiles.

Triton kernels run natively when CUDA is visible, else under ``TRITON_INTERPRET=1`` (set by
the root ``tests/conftest.py``, before anything imports triton) on tiny shapes only.
"""

from __future__ import annotations

import os
import sys

import pytest


sys.path.insert(0, os.path.dirname(__file__))  # the tests import kernel_checks (pytest runs in importlib mode)

from kernel_checks import BACKENDS, KINDS  # noqa: E402

from agentcir.kernels import _tiling  # noqa: E402
from agentcir.kernels.dispatch import why_unavailable  # noqa: E402


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


@pytest.fixture(autouse=True)
def fixed_product_paths(monkeypatch):
    """No autotune measurement in the tests: the fixed product-path table (deterministic); the
    tests of every path force each one (test_product_paths.py)."""
    monkeypatch.setenv("AGENTCIR_KERNELS_AUTOTUNE", "0")
    monkeypatch.delenv("AGENTCIR_KERNELS_PRODUCT", raising=False)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    """Stream tiny galleries in many odd-sized tiles (37 rows; direct-kernel chunks of 16)."""
    monkeypatch.setattr(_tiling, "TILE_OVERRIDE", 37)
    if why_unavailable("numba") is None:
        from agentcir.kernels.numba import cosine

        monkeypatch.setattr(cosine, "DIRECT_CHUNK_ROWS", 16)
