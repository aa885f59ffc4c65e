"""Content-addressed cache of model calls (sqlite, safe across threads and processes).

A key is the sha256 of (component identity, operation, inputs), where the identity
already covers the backend, model/weights, config and prompt-file hashes
(:attr:`agentcir.framework.component.Component.identity`). Values are JSON with
numpy arrays embedded, so text replies, parsed JSON and embeddings all fit.

Every completed call is committed at once (WAL journal), so a run killed at any
moment keeps every call that finished: the restarted run finds them here.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from .files import storage_errors

MISSING = object()


def _default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return {"__nd__": base64.b64encode(np.ascontiguousarray(o).tobytes()).decode(),
                "dtype": str(o.dtype), "shape": list(o.shape)}
    if isinstance(o, (np.integer, np.floating, np.bool_)):
        return o.item()
    if isinstance(o, Path):
        return {"__path__": str(o)}
    if hasattr(o, "to_json"):
        return o.to_json()
    raise TypeError(f"cannot store a value of type {type(o).__name__} in the call cache")


def _hook(d: dict) -> Any:
    if "__nd__" in d:
        return np.frombuffer(base64.b64decode(d["__nd__"]), dtype=d["dtype"]).reshape(d["shape"]).copy()
    if "__path__" in d and len(d) == 1:
        return Path(d["__path__"])
    return d


def encode_value(value: Any) -> bytes:
    return json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":")).encode()


def decode_value(blob: bytes) -> Any:
    return json.loads(blob, object_hook=_hook)


class CallCache:
    """A persistent key -> value store for model calls.

    Args:
        path: sqlite file (created with its folder); ``":memory:"`` for a throwaway cache.
    """

    def __init__(self, path: str | os.PathLike = ":memory:"):
        self.path = str(path)
        if self.path != ":memory:":
            with storage_errors(self.path, "the call cache"):
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._memory_conn = None
        self.hits = 0
        self.misses = 0
        with storage_errors(self.path, "the call cache"), self._conn() as c:
            c.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, component TEXT, op TEXT, "
                      "value BLOB NOT NULL, created REAL NOT NULL)")

    def _conn(self) -> sqlite3.Connection:
        if self.path == ":memory:":
            if self._memory_conn is None:
                self._memory_conn = sqlite3.connect(":memory:", check_same_thread=False)
            return self._memory_conn
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Any:
        """The stored value, or :data:`MISSING`."""
        with self._lock:
            row = self._conn().execute("SELECT value FROM calls WHERE key=?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return MISSING
        self.hits += 1
        return decode_value(row[0])

    def put(self, key: str, value: Any, *, component: str = "", op: str = "") -> None:
        blob = encode_value(value)
        with self._lock, storage_errors(self.path, "the call cache"):
            conn = self._conn()
            try:
                conn.execute("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?)", (key, component, op, blob, time.time()))
                conn.commit()
            except sqlite3.Error:
                conn.rollback()  # nothing half-written stays; the calls committed before are intact
                raise

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._conn().execute("SELECT 1 FROM calls WHERE key=?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return self._conn().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def count_by_component(self) -> dict[str, int]:
        with self._lock:
            rows = self._conn().execute("SELECT component, COUNT(*) FROM calls GROUP BY component").fetchall()
        return dict(rows)


def open_call_cache(pool: Any, run: dict) -> CallCache:
    """The run's call cache: ``run.cache`` if set, else the recipe's call_cache memory."""
    default = Path(run["root"]) / "cache.sqlite"
    if run.get("cache"):
        return CallCache(Path(run["cache"]).expanduser())
    if pool.has("memory") and pool.recipe["memory"]["name"] == "call_cache":
        return pool.get("memory").open(default)
    return CallCache(Path(os.environ.get("AGENTCIR_CACHE") or default))
