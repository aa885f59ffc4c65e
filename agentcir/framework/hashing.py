"""Stable content hashes used by caches and run directories."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

_FILE_HASHES: dict[tuple[str, int, int], str] = {}
_LOCK = threading.Lock()


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, memoised per (path, size, mtime)."""
    p = os.fspath(path)
    st = os.stat(p)
    key = (os.path.abspath(p), st.st_size, st.st_mtime_ns)
    with _LOCK:
        hit = _FILE_HASHES.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with _LOCK:
        _FILE_HASHES[key] = digest
    return digest


def canonical(obj: Any) -> Any:
    """A JSON-able canonical form: files (``Path``) by content, arrays by bytes, PIL images by pixels."""
    if isinstance(obj, Path):
        return {"__file__": file_digest(obj)} if obj.is_file() else {"__path__": str(obj)}
    if isinstance(obj, np.ndarray):
        return {
            "__array__": hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest(),
            "dtype": str(obj.dtype),
            "shape": list(obj.shape),
        }
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return canonical(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    if hasattr(obj, "tobytes") and hasattr(obj, "size") and hasattr(obj, "mode"):  # PIL.Image
        return {"__image__": hashlib.sha256(obj.tobytes()).hexdigest(), "size": list(obj.size), "mode": obj.mode}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"cannot hash a value of type {type(obj).__name__} for a cache key")


def stable_hash(*parts: Any, n: int | None = None) -> str:
    """sha256 hex of the canonical JSON of ``parts`` (first ``n`` chars if given)."""
    blob = json.dumps(canonical(list(parts)), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    h = hashlib.sha256(blob.encode()).hexdigest()
    return h[:n] if n else h
