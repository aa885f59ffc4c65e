"""``captioner=dataset``: captions a dataset provides, looked up by image path or item id.

Reads a JSONL file (one object per line; a gallery's own ``items.jsonl`` works as is) or
a CSV file with a header. An image is matched, in order, by its resolved path, by its
path relative to the captions file's folder (with and without suffix), then by item id
= its file name without suffix. A missing caption is an error naming the image and
what was looked up: this captioner never invents text.
"""

from __future__ import annotations

import csv
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ...framework.errors import InputError
from ...framework.hashing import file_digest
from ...framework.interfaces import Captioner
from ...registry import CAPTIONERS


@CAPTIONERS.register("dataset")
class DatasetCaptioner(Captioner):
    """Dataset-provided captions from a JSONL or CSV file.

    Config:
        path: the captions file (``.jsonl`` / ``.json`` lines, or ``.csv``).
        caption_field: column holding the caption (e.g. ``productDisplayName`` for the demo CSV).
        id_field: column holding the item id (empty: ids are not used).
        path_fields: columns that may hold the image path (the first present is used;
            relative paths are relative to the captions file's folder).
    """

    @dataclass
    class Config:
        path: str = ""
        caption_field: str = "caption"
        id_field: str = "id"
        path_fields: list[str] = field(default_factory=lambda: ["path", "image"])

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        self._table: tuple[dict[str, str], dict[str, str]] | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"captioner '{self.registry_key or 'dataset'}'"

    def _file(self) -> Path:
        if not self.cfg.path:
            raise InputError(f"{self.where}: field 'path' is empty; set it to a JSONL or CSV file of captions")
        p = Path(self.cfg.path).expanduser()
        if not p.is_file():
            raise InputError(f"{self.where}: captions file '{self.cfg.path}' does not exist")
        return p

    def model_identity(self) -> str:
        p = Path(self.cfg.path).expanduser() if self.cfg.path else None
        return file_digest(p) if p is not None and p.is_file() else f"missing:{self.cfg.path}"

    def _rows(self, p: Path) -> list[dict]:
        if p.suffix.lower() == ".csv":
            with open(p, newline="", encoding="utf-8") as f:
                return list(csv.DictReader(f))
        rows = []
        with open(p, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise InputError(f"{self.where}: captions file '{p}' line {n} is not JSON ({e.msg})") from None
        return rows

    def _load(self) -> tuple[dict[str, str], dict[str, str]]:
        with self._lock:
            if self._table is not None:
                return self._table
            p = self._file()
            rows = self._rows(p)
            c = self.cfg
            if rows and c.caption_field not in rows[0]:
                raise InputError(
                    f"{self.where}: captions file '{p}' has no column '{c.caption_field}' "
                    f"(field 'caption_field'); its columns: {', '.join(map(str, rows[0]))}"
                )
            by_path: dict[str, str] = {}
            by_id: dict[str, str] = {}
            root = p.parent.resolve()
            for row in rows:
                cap = row.get(c.caption_field)
                if cap is None or not str(cap).strip():
                    continue
                cap = str(cap).strip()
                if c.id_field and row.get(c.id_field) not in (None, ""):
                    by_id[str(row[c.id_field])] = cap
                for pf in c.path_fields:
                    if row.get(pf):
                        ip = Path(str(row[pf])).expanduser()
                        full = ip if ip.is_absolute() else root / ip
                        by_path[str(full.resolve())] = cap
                        if not ip.is_absolute():
                            by_path[ip.as_posix()] = cap
                            by_path[ip.with_suffix("").as_posix()] = cap
                        break
            if not by_path and not by_id:
                raise InputError(f"{self.where}: captions file '{p}' holds no caption in column '{c.caption_field}'")
            self._table = (by_path, by_id)
            return self._table

    def lookup(self, image: Path | str) -> str | None:
        """The caption of ``image`` (a path, or an item id), or ``None``."""
        by_path, by_id = self._load()
        s = str(image)
        p = Path(s).expanduser()
        for key in (str(p.resolve()), p.as_posix(), p.with_suffix("").as_posix()):
            if key in by_path:
                return by_path[key]
        return by_id.get(s) or by_id.get(p.stem)

    def caption(self, image: Path) -> str:
        cap = self.lookup(image)
        if cap is None:
            raise InputError(
                f"{self.where}: no caption for image '{image}' in '{self.cfg.path}' "
                f"(looked up by path and by id '{Path(str(image)).stem}')"
            )
        return cap
