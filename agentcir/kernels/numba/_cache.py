"""numba's on-disk cache for this package's kernels, invalidated by an edit to any of them.

numba stamps a cached compilation with the content of its own source file only. A kernel that
calls a function of another module (every fused kernel calls :mod:`._gemm`'s ``sweep`` and the
helpers of :mod:`._common`) has that function's code compiled into it, so after an edit to
``_gemm.py`` the cached ``cosine._blocked_kernel`` would still run the old product, while the
Python code around it (``pack_rows``) is the new one. :class:`KernelSourcesLocator` puts the
kernels of this folder where numba would (``NUMBA_CACHE_DIR``, the ``__pycache__`` beside the
file, or the user-wide cache) and stamps each with the digest of every ``*.py`` file of the folder
(:func:`agentcir.kernels.tune.kernel_sources_digest`): an edit anywhere recompiles them all.

Processes sharing that cache (scale workers started together, the pytest-xdist workers, a server and
a command) would each compile a kernel missing from it at the same time: tens of seconds of CPU per
kernel, per process. :func:`compile_once` makes a kernel compile a signature in one process at a
time (an exclusive ``flock`` on a lock file beside its cache entries): the others wait, then load
what it saved. Locks are taken along the call graph (a kernel, then the kernels it calls), which
has no cycle, so two processes cannot wait on each other; a process that dies releases its locks,
and one stopped while it compiles is waited for ``WAIT_S`` seconds at most.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Iterator

from numba.core import caching, sigutils
from numba.core.compiler_lock import global_compiler_lock

try:
    import fcntl
except ImportError:  # not POSIX: kernels compile without the lock
    fcntl = None

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


#: lock files this process holds (a kernel compiled again inside its own compilation does not wait on itself)
_HELD: set[str] = set()
#: seconds a process waits for another one's compilation before it compiles the kernel itself
WAIT_S = 600.0


def _lock(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive ``flock``; -1 where it cannot be taken (not
    POSIX, an unwritable folder) or was not free within ``WAIT_S`` (a process stopped while compiling)."""
    if fcntl is None:
        return -1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        log.debug("kernel compiled without the lock %s: %s", path, e)
        return -1
    end, pause = time.monotonic() + WAIT_S, 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:  # another process compiles this kernel
            if time.monotonic() >= end:
                log.warning("another process held %s for %.0f s: compiling the kernel here too", path, WAIT_S)
                break
        except OSError as e:  # e.g. a file system without locks
            log.debug("kernel compiled without the lock %s: %s", path, e)
            break
        time.sleep(pause)
        pause = min(0.1, pause * 2)
    os.close(fd)
    return -1


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` against other processes (``flock``: released when the process
    ends too); without it where it cannot be taken (:func:`_lock`)."""
    key = str(path)
    fd = _lock(path) if key not in _HELD else -1
    if fd < 0:
        yield
        return
    _HELD.add(key)
    try:
        yield
    finally:
        _HELD.discard(key)
        os.close(fd)  # releases the lock


def compile_once(dispatcher) -> bool:
    """Make ``dispatcher`` (a ``cache=True`` kernel of this folder) compile a signature in one process at a
    time: a signature missing from memory is compiled, or loaded from the cache, under the kernel's lock
    file. The lock is taken inside numba's compiler lock, so this process's threads meet there first.
    Returns True for a kernel of this folder (now or already so), False for any other dispatcher (or a
    plain function under ``NUMBA_DISABLE_JIT``)."""
    impl = getattr(getattr(dispatcher, "_cache", None), "_impl", None)
    locator = getattr(impl, "locator", None)
    if not isinstance(locator, KernelSourcesLocator) or "compile" in vars(dispatcher):
        return isinstance(locator, KernelSourcesLocator)
    name = re.sub(r"[^\w.-]", "_", f"{dispatcher.py_func.__module__}.{dispatcher.py_func.__qualname__}")
    lock = Path(locator.get_cache_path()) / f"{name}.lock"
    compile_here = dispatcher.compile

    def compile(sig):
        with global_compiler_lock:
            args, _ = sigutils.normalize_signature(sig)
            if tuple(args) in dispatcher.overloads:
                return compile_here(sig)
            with _exclusive(lock):
                return compile_here(sig)

    dispatcher.compile = compile
    return True


def compile_each_once(package: str) -> int:
    """:func:`compile_once` for every kernel defined in the imported modules of ``package`` (both
    variants of a :class:`._common.DualKernel`); returns how many."""
    from numba.core.registry import CPUDispatcher

    from ._common import DualKernel

    done: set[int] = set()
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        for obj in vars(mod).values():
            for k in (obj.parallel, obj.serial) if isinstance(obj, DualKernel) else (obj,):
                if isinstance(k, CPUDispatcher) and k.py_func.__module__ == name and compile_once(k):
                    done.add(id(k))
    return len(done)
