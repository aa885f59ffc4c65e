"""Checksums of stored artefacts, checked whenever a later run reads them.

Every file a later run trusts carries a blake2b digest (128 bits) of its bytes, written with it
and checked on read:

- call-cache values: a ``digest`` column of ``calls`` in the sqlite file (:mod:`.cache`);
- a run directory's ``recipe.yaml``, ``inputs.json`` and ``metrics.json``, a sweep's
  ``manifest.json``, a gallery's ``gallery.json``, ``image_emb.npy``, ``items.jsonl`` (with its
  row count), captions and caption embeddings, the chunks of an unfinished build, the shards of a
  sharded gallery (each a gallery) and the per-shard ANN indexes: a *sidecar* file
  ``<name>.b2`` beside the file (:func:`write_sidecar`, :func:`check_sidecar`);
- a stage's arrays and candidates (``stages/<stage>.*.npz``): their digests are recorded in the
  stage's ``.done`` marker, which carries a digest of its own content (:func:`seal`, :func:`unseal`);
- a stage trace (``stages/<stage>.jsonl``): each line ends with the digest of the line before it
  (:func:`seal_line`, :func:`open_line`).

What a mismatch means is decided by the reader: an artefact that can be recomputed (a cached
value, a stage, a caption file, a build chunk) is a cache miss, recomputed with one warning
naming the file; one that cannot (a gallery opened by ``agentcir search`` or ``serve``) is an
:class:`IntegrityError` naming the file and the command that rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from .errors import AgentcirError

log = logging.getLogger(__name__)

ALGO = "blake2b"
DIGEST_BYTES = 16
SIDECAR_SUFFIX = ".b2"

_VERIFIED: dict[tuple, str] = {}
_LOCK = threading.Lock()


class IntegrityError(AgentcirError):
    """A stored file failed its checksum (or could not be read) and cannot be recomputed here; the
    message names the file and the command that rebuilds it."""


class Damaged(Exception):
    """Internal: a file failed its check (``why`` says how); readers turn it into a recompute or an
    :class:`IntegrityError`."""

    def __init__(self, path: str | os.PathLike, why: str):
        super().__init__(f"'{path}' {why}")
        self.path = Path(path)
        self.why = why


def digest_bytes(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def digest_file(path: str | os.PathLike) -> str:
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def sidecar(path: str | os.PathLike) -> Path:
    """The sidecar of ``path``: ``<name>.b2`` in the same folder."""
    p = Path(path)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def file_record(path: str | os.PathLike, **extra: Any) -> dict[str, Any]:
    """``{"blake2b": digest, "size": bytes, **extra}`` of a file."""
    return {ALGO: digest_file(path), "size": os.path.getsize(path), **extra}


def write_sidecar(path: str | os.PathLike, **extra: Any) -> dict[str, Any]:
    """Write the sidecar of ``path`` (its digest, size and ``extra``, e.g. ``rows``), atomically."""
    from .files import atomic_write_text

    rec = file_record(path, **extra)
    atomic_write_text(sidecar(path), json.dumps(rec))
    _remember(path, rec[ALGO])
    return rec


def _stat_key(path: str | os.PathLike) -> tuple:
    st = os.stat(path)
    return (os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _remember(path: str | os.PathLike, digest: str) -> None:
    try:
        key = _stat_key(path)
    except OSError:
        return
    with _LOCK:
        _VERIFIED[key] = digest


def check_record(path: str | os.PathLike, rec: dict[str, Any], *, memo: bool = True) -> None:
    """Check ``path`` against a record of :func:`file_record`; :class:`Damaged` when it differs.

    A file already verified in this process, unchanged since (same inode, size and times), is not
    read again (a large gallery is hashed once per process)."""
    p = Path(path)
    if not p.is_file():
        raise Damaged(p, "is missing")
    size = p.stat().st_size
    if "size" in rec and size != rec["size"]:
        raise Damaged(p, f"has {size} bytes, {rec['size']} were written (truncated or overwritten)")
    want = rec.get(ALGO)
    if not isinstance(want, str):
        raise Damaged(p, "has a checksum record without a digest")
    key = _stat_key(p)
    if memo:
        with _LOCK:
            if _VERIFIED.get(key) == want:
                return
    got = digest_file(p)
    if got != want:
        raise Damaged(p, f"fails its {ALGO} checksum (damaged on disk)")
    with _LOCK:
        _VERIFIED[key] = got


def read_sidecar(path: str | os.PathLike) -> dict[str, Any] | None:
    """The sidecar record of ``path``; ``None`` when there is none (a file written before checksums
    existed); :class:`Damaged` when the sidecar itself is unreadable."""
    sc = sidecar(path)
    if not sc.is_file():
        return None
    try:
        rec = json.loads(sc.read_bytes())
    except (ValueError, UnicodeDecodeError):
        raise Damaged(sc, "is not a readable checksum record") from None
    if not isinstance(rec, dict) or not isinstance(rec.get(ALGO), str):
        raise Damaged(sc, "is not a readable checksum record")
    return rec


def check_sidecar(path: str | os.PathLike, *, required: bool = False) -> dict[str, Any] | None:
    """Check ``path`` against its sidecar; returns the record (``None``: no sidecar, and not
    ``required``). :class:`Damaged` on a mismatch, a damaged sidecar, or a missing required one."""
    rec = read_sidecar(path)
    if rec is None:
        if required:
            raise Damaged(path, f"has no checksum ({sidecar(path).name} is missing)")
        return None
    check_record(path, rec)
    return rec


def remove_with_sidecar(path: str | os.PathLike) -> None:
    for p in (Path(path), sidecar(path)):
        try:
            p.unlink(missing_ok=True)
        except OSError:
            pass


def read_json_checked(path: str | os.PathLike, *, required: bool = False) -> Any:
    """A JSON file checked against its sidecar (when it has one) and parsed; :class:`Damaged`
    when either fails."""
    check_sidecar(path, required=required)
    try:
        return json.loads(Path(path).read_bytes())
    except (ValueError, UnicodeDecodeError) as e:
        raise Damaged(path, f"is not valid JSON ({e})") from None


def write_text_checked(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` atomically, then its sidecar."""
    from .files import atomic_write_text

    atomic_write_text(Path(path), text)
    write_sidecar(path)


# -- self-checked JSON records (.done markers) ------------------------------------------------
def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seal(obj: dict[str, Any]) -> str:
    """JSON text of ``obj`` with its own digest under ``"b2"`` (checked by :func:`unseal`)."""
    body = {k: v for k, v in obj.items() if k != "b2"}
    return json.dumps({**body, "b2": digest_bytes(_canonical(body))})


def unseal(path: str | os.PathLike, text: bytes | str, *, legacy_ok: bool = True) -> dict[str, Any]:
    """The record :func:`seal` wrote; :class:`Damaged` when it is not JSON, not an object, or its
    digest differs (a record without one, written before checksums existed, is accepted when
    ``legacy_ok``)."""
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise Damaged(path, "is not valid JSON") from None
    if not isinstance(obj, dict):
        raise Damaged(path, "is not a JSON object")
    want = obj.pop("b2", None)
    if want is None:
        if legacy_ok:
            return obj
        raise Damaged(path, "has no checksum")
    if digest_bytes(_canonical(obj)) != want:
        raise Damaged(path, f"fails its {ALGO} checksum (damaged on disk)")
    return obj


# -- self-checked JSONL lines (stage traces) ----------------------------------------------------
_LINE_TAIL = ',"b2":"'


def seal_line(payload: str) -> str:
    """``payload`` (a JSON object's text) with ``"b2": <digest of payload>`` appended inside it."""
    if not payload.endswith("}"):
        raise ValueError("a sealed line must be a JSON object")
    return payload[:-1] + _LINE_TAIL + digest_bytes(payload.encode()) + '"}'


def open_line(line: bytes) -> tuple[bytes, bool | None]:
    """``(payload, ok)`` of a line written by :func:`seal_line`: ``ok`` is True when its digest
    matches, False when it does not, None when the line has none (written before checksums)."""
    tail_len = len(_LINE_TAIL) + 2 * DIGEST_BYTES + 2
    if len(line) > tail_len and line[-tail_len:].startswith(_LINE_TAIL.encode()) and line.endswith(b'"}'):
        payload = line[:-tail_len] + b"}"
        want = line[-tail_len + len(_LINE_TAIL) : -2].decode("ascii", "replace")
        return payload, digest_bytes(payload) == want
    return line, None


# -- warnings ------------------------------------------------------------------------------
_WARNED: set[str] = set()


def warn_once(key: str, msg: str, *args: Any) -> None:
    """Log ``msg`` at warning level once per ``key`` in this process."""
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    log.warning(msg, *args)


def recompute_warning(damage: Damaged, what: str) -> None:
    """The one warning of a damaged, recomputable artefact: names the file and says it is recomputed."""
    warn_once(f"{damage.path}:{damage.why}", "%s %s; %s", damage.path, damage.why, what)
