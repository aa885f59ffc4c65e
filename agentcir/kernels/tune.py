"""Which product a numba kernel uses, per (CPU and ISA, gallery dtype, shape class): measured once, cached.

The numba backend has two ways to compute a gallery tile's scores ``X @ float32(G_tile).T``:

* ``loop``: the register-tiled numba microkernels (:mod:`.numba._gemm`; for at most 4 query
  rows the memory-bound direct scan of :mod:`.numba.cosine`), a half block widened once into
  an L1-resident float32 buffer;
* ``blas``: the BLAS ``sgemm`` of the process (numpy's OpenBLAS / MKL, tuned per ISA at run
  time) called from each numba thread on its own sub-tile (:mod:`.numba._sgemm`), a half
  sub-tile first widened into a float32 buffer; the selection, aggregation and fusion stay
  in the same fused parallel kernels. Where numba threads cannot call the library
  (Accelerate, BLIS), numpy's ``matmul`` on whole tiles, each folded in serially.

Both multiply in float32, so both give the reference's results within the same tolerances and
tie rules. Which one is faster depends on the CPU (16 vs 32 vector registers, AMX, the BLAS
build), the dtype and the number of product rows, so the choice is **measured** the first time
a (dtype, shape class) is met: both paths run a synthetic top-k at the class's middle row count
(:func:`class_rows`; 5 interleaved rounds, from under a second to about three seconds for the
largest class on two cores) and the faster median wins (``blas`` only by at least :data:`BLAS_MARGIN`).

A float16, bfloat16 or int8 gallery runs float32's product once its rows are widened, and the
``loop`` path widens them most cheaply (a block at a time, in L1, the gallery read at its own
bytes): so in a class where float32 takes ``loop`` these dtypes take it too, unmeasured, and a
near tie can never put a half gallery on a slower path than float32's. Where float32 takes
``blas`` they are measured, and keep ``blas`` unless ``loop`` is faster.

Choices are kept in a JSON file (:func:`cache_path`: ``$AGENTCIR_KERNELS_TUNE_FILE``, else ``$XDG_CACHE_HOME/agentcir/kernels-tune.json``,
else ``~/.cache/agentcir/kernels-tune.json``), valid for one machine identity
(:func:`machine_identity`: CPU model, ISA flags, numba code-generation target, BLAS build and
forced core type, package versions, the numba backend's source files); another identity re-tunes. A file that cannot be read
is refused with a warning naming it and what is wrong, then re-tuned and rewritten. A choice made while
the calling thread runs numba on fewer threads than the process has (``numba.set_num_threads``) is
measured and kept for that thread count (:func:`choice_key`: ``float32/r17-64@4``).

Overrides (read on every call):

* ``AGENTCIR_KERNELS_PRODUCT=loop|blas``: that path everywhere (no tuning); the GPU backend's
  two paths (the Triton kernels, cuBLAS tiles) follow it too (:func:`agentcir.kernels.triton._common.product`);
* ``AGENTCIR_KERNELS_AUTOTUNE=0``: no measurement; the fixed :data:`FALLBACK` table (also used
  when timing fails). The kernel tests run this way (deterministic).

Inspect or reset: ``agentcir kernels tune --show`` / ``--reset`` / ``--run``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

log = logging.getLogger(__name__)

PATHS = ("loop", "blas")
FORMAT = 1
ENV_FILE, ENV_AUTOTUNE, ENV_PRODUCT = (
    "AGENTCIR_KERNELS_TUNE_FILE",
    "AGENTCIR_KERNELS_AUTOTUNE",
    "AGENTCIR_KERNELS_PRODUCT",
)
#: shape classes by the number of product rows (query rows, or Q*K proxy rows): (upper bound, label)
CLASSES = (
    (1, "r1"),
    (4, "r2-4"),
    (16, "r5-16"),
    (64, "r17-64"),
    (256, "r65-256"),
    (1024, "r257-1024"),
    (1 << 62, "r1025+"),
)
#: the fixed choice without measurement: the numba loops (for up to 4 rows the memory-bound scan
#: that reads every gallery row once, half rows at half the bytes) up to 1024 rows, the BLAS tile
#: product above, where it was measured ahead on AVX-512 and forced AVX2
#: (benchmarks/results/2026-12-03-portable-speed.md)
FALLBACK = {label: "loop" for _, label in CLASSES[:-1]}
FALLBACK_DEFAULT = "blas"
#: ``blas`` must beat ``loop`` by this factor to be chosen: a near tie goes to ``loop``, which the half
#: galleries then follow unmeasured; and where ``blas`` runs numpy's own BLAS pool (no library callable
#: from numba's threads), a pool waiting on a preempted thread can lose several times over
BLAS_MARGIN = 1.10
#: the gallery dtype the others follow where it takes ``loop`` (see the module docstring)
BASE_KIND = "float32"
#: tests force a path here (None: environment, then the tuned choice)
PATH_OVERRIDE: str | None = None

_lock = threading.Lock()
_memo: dict | None = None
#: kind, rows -> {path: seconds}; set by the numba backend (it owns the kernels that are timed)
_measure: Callable[[str, int], dict[str, float]] | None = None


class TuneCacheError(ValueError):
    """The tune cache file is unreadable or malformed (the message names the file and the problem)."""


def shape_class(rows: int) -> str:
    """The label of the shape class of ``rows`` product rows."""
    for hi, label in CLASSES:
        if rows <= hi:
            return label
    return CLASSES[-1][1]  # pragma: no cover


def class_rows(label: str) -> int:
    """The row count a class is measured at: the geometric middle of its bounds (2048 for the open class),
    so that a class's choice is not the one of its largest member alone."""
    lo = 1
    for hi, lbl in CLASSES:
        if lbl == label:
            return 2048 if hi == CLASSES[-1][0] else round((lo * hi) ** 0.5)
        lo = hi + 1
    raise KeyError(label)


def cache_path() -> Path:
    """Where the choices are kept (see the module docstring)."""
    env = os.environ.get(ENV_FILE, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "agentcir" / "kernels-tune.json"


def _cpu_model_and_flags() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = val.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = val.split()
    except OSError:
        pass
    keep = (
        "avx2",
        "fma",
        "avx512f",
        "avx512_bf16",
        "avx512_fp16",
        "amx_tile",
        "amx_bf16",
        "neon",
        "asimd",
        "sve",
        "f16c",
    )
    return model, sorted(f for f in set(flags) if f in keep)


def kernel_sources_digest(folder: Path | None = None) -> str:
    """sha256 (16 hex digits) of the numba backend's source files (``folder``, default the installed
    ``numba/``): an edited kernel makes its earlier measurements invalid."""
    h = hashlib.sha256()
    for path in sorted((folder or Path(__file__).parent / "numba").glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def machine_identity() -> dict:
    """What a choice is valid for: CPU model and ISA flags, the code generation numba and the BLAS
    are forced to (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, ``OPENBLAS_CORETYPE``), package versions,
    the kernels' source (:func:`kernel_sources_digest`)."""
    from .. import __version__ as agentcir_version

    model, flags = _cpu_model_and_flags()
    ident = {
        "cpu": model,
        "isa": flags,
        "machine": platform.machine(),
        "numpy": np.__version__,
        "agentcir": agentcir_version,
        "kernels": kernel_sources_digest(),
        "threads": os.cpu_count(),
        "NUMBA_CPU_NAME": os.environ.get("NUMBA_CPU_NAME", ""),
        "NUMBA_CPU_FEATURES": os.environ.get("NUMBA_CPU_FEATURES", ""),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
    }
    try:
        import numba

        ident["numba"] = numba.__version__
        ident["numba_threads"] = numba.config.NUMBA_NUM_THREADS
    except ImportError:  # pragma: no cover - numba is a base dependency
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        ident["blas"] = f"{blas.get('name', '?')} {blas.get('version', '?')}"
    except Exception:  # pragma: no cover - numpy < 1.26 has no dicts mode
        ident["blas"] = "?"
    return ident


def read_cache(path: Path | None = None) -> dict:
    """The cache file's content (``{}`` when there is none); :class:`TuneCacheError` when unreadable."""
    path = path or cache_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TuneCacheError(f"kernel tune cache {path}: not readable JSON ({e})") from e
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("choices"), dict)
        or not isinstance(data.get("machine"), dict)
    ):
        raise TuneCacheError(
            f"kernel tune cache {path}: expected {{'format': {FORMAT}, 'machine': {{...}}, "
            f"'choices': {{...}}}}, got {str(data)[:120]}"
        )
    for key, entry in data["choices"].items():
        if not isinstance(entry, dict) or entry.get("path") not in PATHS:
            raise TuneCacheError(
                f"kernel tune cache {path}: entry '{key}' has no valid path (one of {', '.join(PATHS)}): {entry!r}"
            )
    return data


def _write(data: dict, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # a read-only home still runs: the choices stay in memory
        log.warning("kernels: cannot write the tune cache %s (%s); choices are kept for this process only", path, e)


def _load() -> dict:
    """The process's view of the cache for this machine identity (read once, refused when corrupt)."""
    global _memo
    path = cache_path()
    if _memo is not None and _memo.get("_path") == str(path):
        return _memo
    ident = machine_identity()
    try:
        data = read_cache(path)
    except TuneCacheError as e:
        log.warning("%s; refused: re-tuning and rewriting it", e)
        data = {}
    if data and data.get("machine") != ident:
        log.info("kernels: tune cache %s was measured on another machine identity; re-tuning", path)
        data = {}
    _memo = {"format": FORMAT, "machine": ident, "choices": dict(data.get("choices", {})), "_path": str(path)}
    return _memo


def reset() -> Path:
    """Delete the cache file and forget this process's choices; returns the path."""
    global _memo
    path = cache_path()
    with _lock:
        _memo = None
        if path.exists():
            path.unlink()
    return path


def autotune_enabled() -> bool:
    return os.environ.get(ENV_AUTOTUNE, "1").strip().lower() not in ("0", "false", "no", "off")


def fallback(kind: str, rows: int) -> str:
    """The fixed choice (no measurement)."""
    return FALLBACK.get(shape_class(rows), FALLBACK_DEFAULT)


def forced() -> str | None:
    """The path forced by :data:`PATH_OVERRIDE` or ``$AGENTCIR_KERNELS_PRODUCT`` (checked), else None."""
    if PATH_OVERRIDE is not None:
        return PATH_OVERRIDE
    env = os.environ.get(ENV_PRODUCT, "").strip()
    if env and env != "auto":
        if env not in PATHS:
            from ._inputs import KernelInputError

            raise KernelInputError(
                f"${ENV_PRODUCT}: unknown product path '{env}'; choose one of {', '.join(PATHS)} or auto"
            )
        return env
    return None


@contextlib.contextmanager
def path_forced(path: str) -> Iterator[None]:
    """Inside: :func:`forced` returns ``path`` (``loop`` or ``blas``) in this process, whatever the
    environment says; the previous override comes back on exit."""
    global PATH_OVERRIDE
    if path not in PATHS:
        raise ValueError(f"unknown product path '{path}'; choose one of {', '.join(PATHS)}")
    old, PATH_OVERRIDE = PATH_OVERRIDE, path
    try:
        yield
    finally:
        PATH_OVERRIDE = old


def choice_key(kind: str, rows: int) -> str:
    """``dtype/class`` of a choice, with ``@n`` when the calling thread runs numba's kernels on ``n``
    threads, fewer than the process has (``numba.set_num_threads``, e.g. a scale worker's share of the
    cores): the ``loop`` path runs on those ``n`` threads, the BLAS on its own pool, so the faster path
    depends on ``n`` and is measured for it."""
    key = f"{kind}/{shape_class(rows)}"
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a base dependency
        return key
    n = numba.get_num_threads()
    return key if n >= numba.config.NUMBA_NUM_THREADS else f"{key}@{n}"


def tune(kind: str, rows: int) -> dict:
    """Measure both paths for (``kind``, the class of ``rows``) now, store and return the entry."""
    label = shape_class(rows)
    with _lock:
        data = _load()
        if _measure is None:
            raise RuntimeError("no kernel registered a measurement (import agentcir.kernels.numba)")
        times = _measure(kind, class_rows(label))
        margin = BLAS_MARGIN if kind == BASE_KIND else 1.0  # measured only where float32 took blas
        best = "blas" if times["blas"] * margin < times["loop"] else "loop"
        entry = {
            "path": best,
            "ms": {p: round(t * 1e3, 3) for p, t in times.items()},
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        data["choices"][choice_key(kind, rows)] = entry
        _write({k: v for k, v in data.items() if k != "_path"}, Path(data["_path"]))
    log.info(
        "kernels: tuned %s %s: %s (%s)", kind, label, best, ", ".join(f"{p} {t * 1e3:.1f} ms" for p, t in times.items())
    )
    return entry


def choose(kind: str, rows: int) -> str:
    """The product path for a ``kind`` gallery (``float32`` / ``float16`` / ``bfloat16`` / ``int8``) and
    ``rows`` product rows: forced > float32's ``loop`` (:func:`follows_base`) > cached choice > measured
    now > :data:`FALLBACK`."""
    path = forced()
    if path:
        return path
    if not autotune_enabled():
        return fallback(kind, rows)
    return "loop" if follows_base(kind, rows) else _tuned(kind, rows)


def follows_base(kind: str, rows: int) -> bool:
    """Whether ``kind`` takes float32's ``loop`` for ``rows`` rows without a measurement of its own
    (float32's choice is measured first if need be)."""
    return kind != BASE_KIND and _tuned(BASE_KIND, rows) == "loop"


def _tuned(kind: str, rows: int) -> str:
    """The cached choice, else measured now, else :data:`FALLBACK`."""
    entry = _load()["choices"].get(choice_key(kind, rows))
    if entry is not None:
        return entry["path"]
    try:
        return tune(kind, rows)["path"]
    except Exception as e:  # timing impossible (no memory, interrupted pool...): the fixed table
        log.warning("kernels: could not tune %s %s (%s); using the fixed choice", kind, shape_class(rows), e)
        return fallback(kind, rows)


def show() -> str:
    """A human-readable view of the cache file (or why it cannot be read)."""
    path = cache_path()
    lines = [f"kernel tune cache: {path}"]
    lines.append(
        f"autotune: {'on' if autotune_enabled() else f'off (${ENV_AUTOTUNE}=0): fixed choices'}"
        + (f"; forced path: {forced()}" if forced() else "")
    )
    try:
        data = read_cache(path)
    except TuneCacheError as e:
        return "\n".join(lines + [f"refused: {e}", "it is re-tuned on first use, or reset it with --reset"])
    if not data:
        return "\n".join(lines + ["no choices yet (they are measured on first use, or with --run)"])
    ident = machine_identity()
    lines.append("machine: " + ", ".join(f"{k}={v}" for k, v in data["machine"].items()))
    if data["machine"] != ident:
        lines.append("(measured on another machine identity: re-tuned on first use)")
    lines.append(f"{'dtype/class':24s} {'path':6s} {'loop ms':>9s} {'blas ms':>9s}  measured")
    base = {k.split("/")[1]: e["path"] for k, e in data["choices"].items() if k.startswith(BASE_KIND + "/")}
    for key in sorted(data["choices"]):
        e = data["choices"][key]
        ms = e.get("ms", {})
        kind, label = key.split("/")
        follows = kind != BASE_KIND and base.get(label) == "loop"
        lines.append(
            f"{key:24s} {'loop' if follows else e['path']:6s} {ms.get('loop', float('nan')):9.2f} "
            f"{ms.get('blas', float('nan')):9.2f}  {e.get('at', '?')}" + (f" (follows {BASE_KIND})" if follows else "")
        )
    lines.append(f"other dtypes take {BASE_KIND}'s loop in its loop classes, unmeasured")
    if any("@" in key for key in data["choices"]):
        lines.append("@n: measured while numba ran on n threads, fewer than the process has (numba.set_num_threads)")
    return "\n".join(lines)
