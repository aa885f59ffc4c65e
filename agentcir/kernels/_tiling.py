"""The gallery tile size shared by every streamed backend (numpy only)."""

from __future__ import annotations

#: bytes of a score tile (rows x tile float32) and of a widened gallery tile
SCORE_TILE_BYTES = 8 << 20
GALLERY_TILE_BYTES = 16 << 20
MIN_TILE, MAX_TILE = 256, 16384
#: tests set this to force many small tiles on tiny galleries
TILE_OVERRIDE: int | None = None
#: score-block bytes and tile cap of the numba backend, whose products widen no gallery tile:
#: larger tiles mean fewer parallel launches (each costs a scheduler tick on a loaded machine)
FUSED_SCORE_TILE_BYTES, FUSED_MAX_TILE = 16 << 20, 1 << 17
#: on a CUDA device each tile costs a few kernel launches (tens of microseconds) and the BLAS wants
#: large products: a score block of up to 64 MiB (the streamed entropy's float64 temporaries are
#: about ten times that) and a widened gallery block of up to 512 MiB, with no row cap
GPU_SCORE_TILE_BYTES, GPU_GALLERY_TILE_BYTES = 64 << 20, 512 << 20


def tile_rows(n_scored: int, d: int, N: int, *, gpu: bool = False) -> int:
    """Gallery rows per tile when ``n_scored`` query rows of dimension ``d`` are scored at once.

    The ``[n_scored, tile]`` float32 score block stays within ``SCORE_TILE_BYTES`` and a
    widened ``[tile, d]`` gallery block within ``GALLERY_TILE_BYTES`` (a multiple of 256
    rows between 256 and 16384), so extra memory is O(rows x tile), never O(rows x N).
    With ``gpu`` the budgets are ``GPU_SCORE_TILE_BYTES`` and ``GPU_GALLERY_TILE_BYTES``
    (a multiple of 256 rows, at least 256).
    """
    if TILE_OVERRIDE:
        return max(1, min(TILE_OVERRIDE, N))
    if gpu:
        t = min(GPU_SCORE_TILE_BYTES // (4 * max(n_scored, 1)), GPU_GALLERY_TILE_BYTES // (4 * d))
        t = max(MIN_TILE, t) // MIN_TILE * MIN_TILE
    else:
        t = min(SCORE_TILE_BYTES // (4 * max(n_scored, 1)), GALLERY_TILE_BYTES // (4 * d))
        t = max(MIN_TILE, min(MAX_TILE, t)) // MIN_TILE * MIN_TILE
    return max(1, min(t, N))


def score_tile_rows(n_scored: int, N: int) -> int:
    """Gallery rows per tile when only the ``[n_scored, tile]`` float32 score block is held
    (the numba backend's BLAS-free tiles: a sub-tile is widened into an L2-sized buffer at most):
    within ``FUSED_SCORE_TILE_BYTES``, a multiple of 256 rows between 256 and ``FUSED_MAX_TILE``."""
    if TILE_OVERRIDE:
        return max(1, min(TILE_OVERRIDE, N))
    t = FUSED_SCORE_TILE_BYTES // (4 * max(n_scored, 1))
    t = max(MIN_TILE, min(FUSED_MAX_TILE, t)) // MIN_TILE * MIN_TILE
    return max(1, min(t, N))
