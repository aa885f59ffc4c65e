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
import binascii
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from .files import storage_error, storage_errors
from .integrity import digest_bytes, warn_once

log = logging.getLogger(__name__)

MISSING = object()


def _default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return {
            "__nd__": base64.b64encode(np.ascontiguousarray(o).tobytes()).decode(),
            "dtype": str(o.dtype),
            "shape": list(o.shape),
        }
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

    Every value is stored with its blake2b digest (the ``digest`` column) and checked when read:
    a value that fails it, or whose JSON no longer decodes, is a miss (recomputed and stored
    again), with one warning naming the file. A file sqlite cannot read (truncated, overwritten,
    a malformed page) is moved aside (``<name>.damaged-<time>``) and rebuilt from every value
    that could still be read and passes its checksum. A cache file or folder that cannot be
    written is used read-only: stored values are served, new ones are not stored (one warning).
    A cache from before the digest column gets it, filled for the values stored, on first open.

    Args:
        path: sqlite file (created with its folder); ``":memory:"`` for a throwaway cache.
    """

    def __init__(self, path: str | os.PathLike = ":memory:"):
        self.path = str(path)
        self._local = threading.local()
        self._lock = threading.RLock()
        self._memory_conn = None
        self._generation = 0
        self._conns: list[sqlite3.Connection] = []
        self.read_only = False
        self.hits = 0
        self.misses = 0
        self.damaged = 0
        if self.path != ":memory:":
            self._choose_mode()
        with self._lock:
            self._guard(self._setup)

    # -- opening ------------------------------------------------------------------------
    def _choose_mode(self) -> None:
        """Read-only when the file, or the folder that would hold it (and its journal), is not writable."""
        p = Path(self.path)
        why = None
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            err = storage_error(e, p.parent, "the call cache")
            if err is None:
                raise
            why = str(e.strerror or e)
        if why is None and p.is_file():
            try:
                with open(p, "r+b"):
                    pass
            except OSError as e:
                if storage_error(e, p, "the call cache") is None:
                    raise
                why = str(e.strerror or e)
        if why is None and p.parent.is_dir() and not os.access(p.parent, os.W_OK):
            why = "its folder is not writable"
        if why is not None:
            self._go_read_only(why)

    def _go_read_only(self, why: str) -> None:
        self.read_only = True
        if not Path(self.path).is_file():
            log.warning("call cache '%s' cannot be created (%s): model calls are made and not stored", self.path, why)
        else:
            log.warning(
                "call cache '%s' is read-only (%s): stored values are used, new ones are not stored", self.path, why
            )
        self._reconnect()

    def _setup(self) -> None:
        c = self._conn()
        if self.read_only:
            if Path(self.path).is_file():
                cols = [r[1] for r in c.execute("PRAGMA table_info(calls)").fetchall()]
                self._has_digest = "digest" in cols
            else:
                self._has_digest = True
            return
        c.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, component TEXT, op TEXT, "
            "value BLOB NOT NULL, created REAL NOT NULL, digest TEXT)"
        )
        c.commit()
        cols = [r[1] for r in c.execute("PRAGMA table_info(calls)").fetchall()]
        if "digest" not in cols:  # a cache written before values carried checksums: add them now
            try:
                c.execute("ALTER TABLE calls ADD COLUMN digest TEXT")
            except sqlite3.OperationalError as e:
                if "duplicate column" not in str(e).lower():
                    raise
            c.create_function("agentcir_b2", 1, _value_digest, deterministic=True)
            n = c.execute("UPDATE calls SET digest = agentcir_b2(value) WHERE digest IS NULL").rowcount
            c.commit()
            if n:
                log.info(
                    "call cache '%s': checksums written for the %d value(s) stored before they existed", self.path, n
                )
        self._has_digest = True

    def _reconnect(self) -> None:
        with self._lock:
            for conn in self._conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._conns.clear()
            self._memory_conn = None
            self._generation += 1

    def _conn(self) -> sqlite3.Connection:
        if self.path == ":memory:" or (self.read_only and not Path(self.path).is_file()):
            if self._memory_conn is None:
                self._memory_conn = sqlite3.connect(":memory:", check_same_thread=False)
                self._memory_conn.execute(
                    "CREATE TABLE calls (key TEXT PRIMARY KEY, component TEXT, op TEXT, "
                    "value BLOB NOT NULL, created REAL NOT NULL, digest TEXT)"
                )
            return self._memory_conn
        held = getattr(self._local, "conn", None)
        if held is not None and held[0] == self._generation:
            return held[1]
        if self.read_only:
            folder_ok = os.access(Path(self.path).parent, os.W_OK)
            uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro" + ("" if folder_ok else "&immutable=1")
            conn = sqlite3.connect(uri, uri=True, timeout=60, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        with self._lock:
            self._conns.append(conn)
            self._local.conn = (self._generation, conn)
        return conn

    def _guard(self, fn, *args):
        """``fn(*args)``; a damaged file is moved aside and rebuilt, then ``fn`` runs once more; a
        write refused because the file turned out read-only switches to read-only mode."""
        try:
            with storage_errors(self.path, "the call cache"):
                return fn(*args)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) or self.path == ":memory:":
                raise
            self._recover(e)
        with storage_errors(self.path, "the call cache"):
            return fn(*args)

    def _recover(self, err: BaseException) -> None:
        """Move the damaged file aside, rebuild it with every value that can still be read."""
        from .locks import hold_lock

        with self._lock:
            self._reconnect()
            if self.read_only:
                self._go_read_only_empty(err)
                return
            p = Path(self.path)
            with hold_lock(p.with_name(f".{p.name}.recover.lock"), f"recovery of call cache '{p}'", wait=True):
                if _readable(p):  # another process recovered it meanwhile
                    return
                aside = p.with_name(f"{p.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
                os.replace(p, aside)
                for suffix in ("-wal", "-shm"):
                    extra = Path(str(p) + suffix)
                    if extra.exists():
                        os.replace(extra, Path(str(aside) + suffix))
                rows = _salvage(aside)
                conn = sqlite3.connect(self.path, timeout=60)
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, component TEXT, op TEXT, "
                        "value BLOB NOT NULL, created REAL NOT NULL, digest TEXT)"
                    )
                    conn.executemany("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?)", rows)
                    conn.commit()
                finally:
                    conn.close()
            self._has_digest = True
            log.warning(
                "call cache '%s' is damaged (sqlite: %s): moved aside to '%s' and rebuilt with the %d "
                "value(s) that could be read; the others are recomputed",
                self.path,
                err,
                aside.name,
                len(rows),
            )

    def _go_read_only_empty(self, err: BaseException) -> None:
        log.warning(
            "call cache '%s' is damaged (sqlite: %s) and read-only: it is not used, model calls are "
            "made and not stored",
            self.path,
            err,
        )
        self._memory_conn = None
        self.path = ":memory:"

    # -- values ---------------------------------------------------------------------------
    def _select(self, key: str):
        q = (
            "SELECT value, digest FROM calls WHERE key=?"
            if self._has_digest
            else "SELECT value, NULL FROM calls WHERE key=?"
        )
        return self._conn().execute(q, (key,)).fetchone()

    def get(self, key: str) -> Any:
        """The stored value, or :data:`MISSING` (also when the stored value fails its checksum)."""
        with self._lock:
            row = self._guard(self._select, key)
        if row is not None:
            value = _checked_value(row[0], row[1])
            if value is not MISSING:
                self.hits += 1
                return value
            self.damaged += 1
            warn_once(
                f"cache:{self.path}",
                "call cache '%s': a stored value fails its checksum (damaged on "
                "disk); it is recomputed (and so is any other such value)",
                self.path,
            )
            if not self.read_only:
                with self._lock:
                    self._guard(self._delete, key)
        self.misses += 1
        return MISSING

    def _delete(self, key: str) -> None:
        conn = self._conn()
        conn.execute("DELETE FROM calls WHERE key=?", (key,))
        conn.commit()

    def _insert(self, key: str, blob: bytes, component: str, op: str) -> None:
        conn = self._conn()
        try:
            conn.execute(
                "INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?)",
                (key, component, op, blob, time.time(), digest_bytes(blob)),
            )
            conn.commit()
        except sqlite3.Error:
            conn.rollback()  # nothing half-written stays; the calls committed before are intact
            raise

    def put(self, key: str, value: Any, *, component: str = "", op: str = "") -> None:
        blob = encode_value(value)
        if self.read_only:
            return
        with self._lock:
            self._guard(self._insert, key, blob, component, op)

    def close(self) -> None:
        """Close this cache's connections (the last one to close folds the journal into the file)."""
        self._reconnect()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return (
                self._guard(lambda: self._conn().execute("SELECT 1 FROM calls WHERE key=?", (key,)).fetchone())
                is not None
            )

    def __len__(self) -> int:
        with self._lock:
            return self._guard(lambda: self._conn().execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def count_by_component(self) -> dict[str, int]:
        with self._lock:
            rows = self._guard(
                lambda: self._conn().execute("SELECT component, COUNT(*) FROM calls GROUP BY component").fetchall()
            )
        return dict(rows)


def _value_digest(value: Any) -> str:
    return digest_bytes(value if isinstance(value, bytes) else str(value).encode())


def _checked_value(blob: Any, digest: str | None) -> Any:
    """The decoded value, or :data:`MISSING` when it fails its digest or does not decode."""
    if digest is not None and _value_digest(blob) != digest:
        return MISSING
    try:
        return decode_value(blob)
    except (ValueError, TypeError, KeyError, binascii.Error):
        return MISSING


def _readable(path: Path) -> bool:
    """Whether sqlite reads ``path`` as a sound database (its integrity quick check passes)."""
    if not path.is_file():
        return False
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True, timeout=60)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()
            conn.execute("SELECT COUNT(*) FROM calls").fetchone()
            return ok is not None and ok[0] == "ok"
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False


def _salvage(path: Path) -> list[tuple]:
    """Every row of a damaged cache file sqlite can still read whose value passes its checksum (or,
    without one, decodes): read from a copy (a truncated file padded back to the size its header
    records, or sqlite reads nothing of it) in rowid order from both ends, so one bad page loses only
    its rows. The damaged file itself is left as it is."""
    import shutil

    work = path.with_name(f".{path.name}.salvage")
    try:
        shutil.copyfile(path, work)
        if Path(str(path) + "-wal").is_file():
            shutil.copyfile(str(path) + "-wal", str(work) + "-wal")
        with open(work, "r+b") as f:
            head = f.read(100)
            if len(head) == 100 and head.startswith(b"SQLite format 3\x00"):
                page = int.from_bytes(head[16:18], "big")
                page = 65536 if page == 1 else page
                want = page * int.from_bytes(head[28:32], "big")
                if os.path.getsize(work) < want:
                    f.truncate(want)
        return _salvage_rows(work)
    except OSError:
        return _salvage_rows(path)
    finally:
        for suffix in ("", "-wal", "-shm"):
            try:
                Path(str(work) + suffix).unlink(missing_ok=True)
            except OSError:
                pass


def _salvage_rows(path: Path) -> list[tuple]:
    found: dict[str, tuple] = {}
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True, timeout=60)
    except sqlite3.DatabaseError:
        return []
    try:
        try:
            cols = [r[1] for r in conn.execute("PRAGMA table_info(calls)").fetchall()]
        except sqlite3.DatabaseError:
            return []
        digest = "digest" if "digest" in cols else "NULL"
        for order in ("ASC", "DESC"):
            try:
                for key, comp, op, value, created, dig in conn.execute(
                    f"SELECT key, component, op, value, created, {digest} FROM calls ORDER BY rowid {order}"
                ):
                    if key in found:
                        continue
                    if _checked_value(value, dig) is MISSING:
                        continue
                    found[key] = (key, comp, op, value, created, _value_digest(value))
            except sqlite3.DatabaseError:
                continue
    finally:
        conn.close()
    return list(found.values())


def open_call_cache(pool: Any, run: dict) -> CallCache:
    """The run's call cache: ``run.cache`` if set, else the recipe's call_cache memory."""
    default = Path(run["root"]) / "cache.sqlite"
    if run.get("cache"):
        return CallCache(Path(run["cache"]).expanduser())
    if pool.has("memory") and pool.recipe["memory"]["name"] == "call_cache":
        return pool.get("memory").open(default)
    return CallCache(Path(os.environ.get("AGENTCIR_CACHE") or default))
