"""A result set taken away: CSV or JSON of the hits (paths and photo metadata), a zip of the
photos (with both tables inside), or copies of the photos in an album folder.

The client names hits by gallery row only (with the rank, score and group it was shown); ids,
paths and metadata come from the gallery, and every file is resolved by
:meth:`~agentcir.serve.files.GalleryFiles.path` (inside the gallery folder, symlinks
resolved) — the same rule as ``/image`` and ``/thumb``. A hit whose file is missing or
outside the folder is listed under ``missing`` and left out of the zip and the album.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import tempfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

#: metadata columns first in the CSV (others follow, sorted)
META_ORDER = (
    "taken_time",
    "city",
    "region",
    "country",
    "continent",
    "latitude",
    "longitude",
    "capturedevice",
    "people",
    "album",
    "keywords",
    "title",
    "description",
)
#: an album folder name: letters, digits, spaces and . , ( ) - _ ; no leading dot
ALBUM_NAME = re.compile(r"^[\w (),-][\w .(),-]{0,99}$")


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return "; ".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, ensure_ascii=False, default=str)
    return str(v)


def rows_of(st, hits: Iterable) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records of the hits whose file is servable, records of those whose file is not)."""
    g = st.gallery
    out, missing = [], []
    for i, h in enumerate(hits):
        row = int(h.row)
        if not 0 <= row < len(g):
            raise LookupError(f"no gallery row {row} (the gallery has {len(g)} items)")
        rec = {
            "rank": h.rank if h.rank is not None else i + 1,
            "id": g.ids[row],
            "row": row,
            "score": h.score,
            "verified": bool(h.verified),
            "group": h.group,
            "meta": dict(g.items[row].meta) if hasattr(g, "items") else {},
        }
        try:
            rec["path"] = str(st.files.path(row))
            out.append(rec)
        except LookupError as e:
            rec["path"], rec["why"] = str(g.paths[row]), str(e)
            missing.append(rec)
    return out, missing


def to_csv(records: list[dict[str, Any]]) -> bytes:
    keys = {k for r in records for k, v in r["meta"].items() if v not in (None, "", [], {})}
    meta_cols = [k for k in META_ORDER if k in keys] + sorted(keys - set(META_ORDER))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["rank", "id", "path", "score", "verified", "group", *meta_cols])
    for r in records:
        w.writerow(
            [
                r["rank"],
                r["id"],
                r["path"],
                "" if r["score"] is None else r["score"],
                int(r["verified"]),
                "" if r["group"] is None else r["group"],
                *(_cell(r["meta"].get(k)) for k in meta_cols),
            ]
        )
    return buf.getvalue().encode("utf-8")


def to_json(st, records, missing, query: dict[str, Any]) -> bytes:
    doc = {
        "gallery": str(st.gallery.root),
        "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "query": query,
        "hits": [{k: v for k, v in r.items() if k != "why"} for r in records],
        "missing": [{"rank": r["rank"], "id": r["id"], "row": r["row"], "why": r["why"]} for r in missing],
    }
    return json.dumps(doc, ensure_ascii=False, indent=1, default=str).encode("utf-8")


def _safe_name(rank: int, path: Path) -> str:
    stem = re.sub(r"[^\w.() -]", "_", path.stem)[:80] or "photo"
    return f"{int(rank):04d}-{stem}{path.suffix.lower()}"


class ExportTooLarge(ValueError):
    pass


def to_zip(st, records, missing, query: dict[str, Any], max_bytes: int) -> Path:
    """A zip (stored, not recompressed: photos are compressed already) in a temporary file:
    ``photos/NNNN-name.ext`` in rank order, ``results.csv``, ``results.json``."""
    total = sum(Path(r["path"]).stat().st_size for r in records)
    if total > max_bytes:
        raise ExportTooLarge(
            f"the {len(records)} photos add up to {total / 2**20:.0f} MB, more than the export limit "
            f"of {max_bytes / 2**20:.0f} MB: export fewer photos, or start the server with a larger "
            f"--export-max-mb"
        )
    fd = tempfile.NamedTemporaryFile(prefix="agentcir-export-", suffix=".zip", delete=False)
    with fd, zipfile.ZipFile(fd, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        for r in records:
            z.write(r["path"], "photos/" + _safe_name(r["rank"], Path(r["path"])))
        z.writestr("results.csv", to_csv(records), compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("results.json", to_json(st, records, missing, query), compress_type=zipfile.ZIP_DEFLATED)
    return Path(fd.name)


def _digest(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def album_folder(root: str | Path, name: str) -> Path:
    """``root/name``, ``name`` checked (one plain folder name: no separator, no leading dot)."""
    n = name.strip()
    if not ALBUM_NAME.match(n) or n in (".", ".."):
        raise ValueError(
            f"album name '{name}': use letters, digits, spaces and . , ( ) - _ (at most 100, no leading dot, no slash)"
        )
    base = Path(root).resolve()
    folder = (base / n).resolve()
    if folder.parent != base:
        raise ValueError(f"album name '{name}' does not name a folder directly under the album root")
    return folder


def copy_album(records, folder: Path) -> dict[str, Any]:
    """Copy the photos into ``folder`` (made if missing); a file already there with the same
    bytes is kept, a different one with the same name gets a ``-2``, ``-3``... suffix."""
    folder.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for r in records:
        src = Path(r["path"])
        dst = folder / src.name
        n = 1
        while dst.exists():
            if dst.stat().st_size == src.stat().st_size and _digest(dst) == _digest(src):
                break
            n += 1
            dst = folder / f"{src.stem}-{n}{src.suffix}"
        if dst.exists():
            kept.append(dst.name)
            continue
        tmp = folder / f".{dst.name}.part"
        shutil.copy2(src, tmp)
        tmp.replace(dst)
        copied.append(dst.name)
    return {"folder": str(folder), "copied": copied, "already_there": kept}
