"""One dispatch for the scoring core: explicit setting > env var > capability probe > reference.

* ``backend="numba"`` (or ``torch``, ``triton``, ``reference``): that backend, or
  :class:`BackendUnavailableError` naming why it cannot run and how to fix it.
* ``backend="auto"``: the ``AGENTCIR_KERNELS`` environment variable when set (an explicit
  choice: it raises the same way when it cannot run), else the capability probe:
  ``triton`` (the GPU backend: cuBLAS tiles by default, the Triton kernels on request) when
  a CUDA device and triton are present, else ``numba``, else ``torch``, else ``reference``. Each automatic fallback is logged once per process. On Linux a machine
  without a GPU device node (:func:`gpu_device_nodes`) has no CUDA device, so the probe does
  not import torch (about a second of CPU) to ask.

The probe result is memoised per process; the environment variable is read on every
call, so it can be changed at run time.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import logging
import os
import sys
from functools import cache
from types import ModuleType

from ..errors import AgentcirError
from ._inputs import KernelInputError

log = logging.getLogger(__name__)

#: every accepted value of ``backend=`` / recipe ``kernels.backend`` / ``$AGENTCIR_KERNELS``
BACKENDS = ("auto", "numba", "torch", "triton", "reference")
ENV_VAR = "AGENTCIR_KERNELS"
#: the order the capability probe tries
PROBE_ORDER = ("triton", "numba", "torch", "reference")
_EXTRA = {"numba": "core install (numba is a base dependency)", "torch": "gpu", "triton": "gpu"}
_logged: set[str] = set()


class BackendUnavailableError(AgentcirError, RuntimeError):
    """An explicitly chosen kernel backend cannot run here; the message says why and how to fix it."""


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


#: the device nodes of a GPU that torch can use as a CUDA device: NVIDIA's, ROCm's, and WSL's
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def gpu_device_nodes() -> list[str] | None:
    """The GPU device nodes present (Linux), or None where device nodes do not tell (other systems)."""
    if not sys.platform.startswith("linux"):
        return None
    return [path for pattern in GPU_DEVICE_NODES for path in glob.glob(pattern)]


def why_unavailable(name: str, *, probing: bool = False) -> str | None:
    """``None`` when backend ``name`` can run in this process, else the reason (one line).

    With ``probing`` (the automatic choice) Triton needs a real CUDA device; an explicit
    ``triton`` also accepts the interpreter (``TRITON_INTERPRET=1``, for tests).
    """
    if name == "reference":
        return None
    if name == "numba":
        if not _has("numba"):
            return "the package 'numba' is not installed (pip install numba)"
        return None
    if name == "torch":
        if not _has("torch"):
            return "the package 'torch' is not installed (pip install 'agentcir[gpu]', or torch alone)"
        return None
    if name == "triton":
        if not _has("triton") or not _has("torch"):
            return "the packages 'triton' and 'torch' are needed (pip install 'agentcir[gpu]')"
        if os.environ.get("TRITON_INTERPRET") == "1" and not probing:
            return None
        if gpu_device_nodes() == []:
            return f"no GPU device ({', '.join(GPU_DEVICE_NODES)} absent)"
        import torch

        if not torch.cuda.is_available():
            return "no CUDA device is visible (TRITON_INTERPRET=1 runs the kernels in the slow interpreter)"
        return None
    raise KernelInputError(f"backend: unknown kernel backend '{name}'; choose one of {', '.join(BACKENDS)}")


def check_name(name: str, where: str = "backend") -> str:
    """Validate a backend name without importing any backend (used at recipe compose time)."""
    if name not in BACKENDS:
        raise KernelInputError(f"{where}: unknown kernel backend '{name}'; choose one of {', '.join(BACKENDS)}")
    return name


@cache
def _probe() -> str:
    skipped = []
    for name in PROBE_ORDER:
        reason = why_unavailable(name, probing=True)
        if reason is None:
            if skipped:
                _log_once(f"kernels: auto -> {name} ({'; '.join(skipped)})")
            return name
        skipped.append(f"{name}: {reason}")
    return "reference"  # pragma: no cover - reference is always available


def _log_once(msg: str) -> None:
    if msg not in _logged:
        _logged.add(msg)
        log.info(msg)


def _resolve(backend: str) -> tuple[str, bool]:
    check_name(backend)
    source = "backend"
    if backend == "auto":
        env = os.environ.get(ENV_VAR, "").strip()
        if env and env != "auto":
            check_name(env, where=f"${ENV_VAR}")
            backend, source = env, f"${ENV_VAR}"
        else:
            return _probe(), False
    reason = why_unavailable(backend)
    if reason is not None:
        raise BackendUnavailableError(f"kernel backend '{backend}' (from {source}) cannot run: {reason}")
    return backend, True


def resolve(backend: str = "auto") -> str:
    """The concrete backend name for ``backend`` (see the module docstring for the order)."""
    return _resolve(backend)[0]


def load(name: str) -> ModuleType:
    """Import a concrete backend's module (``agentcir.kernels.<name>``)."""
    return importlib.import_module(f"{__package__}.{name}")


def backend_module(backend: str = "auto") -> ModuleType:
    """Resolve ``backend`` and import it.

    An explicit choice that fails to import raises :class:`BackendUnavailableError`; an
    automatic one falls back to the next backend of the probe order (logged once).
    """
    name, explicit = _resolve(backend)
    try:
        return load(name)
    except ImportError as e:
        if explicit:
            raise BackendUnavailableError(f"kernel backend '{name}' failed to import: {e}") from e
        for other in PROBE_ORDER[PROBE_ORDER.index(name) + 1 :]:
            if why_unavailable(other, probing=True) is None:
                try:
                    mod = load(other)
                except ImportError:
                    continue
                _log_once(f"kernels: auto -> {other} ({name} failed to import: {e})")
                return mod
        raise  # pragma: no cover - the reference always imports
