"""numba's on-disk cache for this package's kernels, invalidated by an edit to any of them.

numba stamps a cached compilation with the content of its own source file only. A kernel that
calls a function of another module (every fused kernel calls :mod:`._gemm`'s ``sweep`` and the
helpers of :mod:`._common`) has that function's code compiled into it, so after an edit to
``_gemm.py`` the cached ``cosine._blocked_kernel`` would still run the old product, while the
Python code around it (``pack_rows``) is the new one. :class:`KernelSourcesLocator` puts the
kernels of this folder where numba would (``NUMBA_CACHE_DIR``, the ``__pycache__`` beside the
file, or the user-wide cache) and stamps each with the digest of every ``*.py`` file of the folder
(:func:`agentcir.kernels.tune.kernel_sources_digest`): an edit anywhere recompiles them all.
"""

from __future__ import annotations

import logging
from pathlib import Path

from numba.core import caching

from .. import tune

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
#: the folder's digest as this process imported it (a file edited while the process runs must not stamp
#: what the process compiles from the code it imported before)
DIGEST = tune.kernel_sources_digest(HERE)


class KernelSourcesLocator(caching._CacheLocator):
    """The locator of numba's own chain that applies to the file, with the folder's digest as the
    source stamp (for files of this folder only; other files get numba's own locators)."""

    def __init__(self, inner: caching._CacheLocator):
        self._inner = inner

    def __getattr__(self, name):
        # what numba reads of a locator beyond the methods below (``_py_file``, in its warning that a
        # function cannot be cached) is the inner locator's
        if name == "_inner":  # not set yet (an instance made without __init__)
            raise AttributeError(name)
        return getattr(self._inner, name)

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return DIGEST

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            if Path(py_file).resolve().parent != HERE:
                return None
        except OSError:
            return None
        for other in _chain() or ():
            if other is cls:
                continue
            inner = other.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None


def _chain() -> list | None:
    """numba's list of locator classes (``CacheImpl._locator_classes``; ``_CacheImpl`` before 0.61)."""
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    chain = getattr(impl, "_locator_classes", None)
    return chain if isinstance(chain, list) else None


def install() -> None:
    """Put :class:`KernelSourcesLocator` first in numba's locator chain (once; before any kernel of
    this folder is decorated). Without numba's private chain (another numba version) the kernels
    keep numba's per-file stamps, and a warning says so."""
    chain = _chain()
    if chain is None:
        import numba

        log.warning(
            "numba %s has no cache locator chain: an edit to one kernel module may leave cached kernels "
            "of other modules stale (delete agentcir/kernels/numba/__pycache__ after editing)",
            numba.__version__,
        )
        return
    if KernelSourcesLocator not in chain:
        chain.insert(0, KernelSourcesLocator)
