"""Stage outputs from files: ``run.imports.<stage>`` (what a release ships, instead of model calls).

A stage's per-query record (what :meth:`RunContext.map` stores in ``state.traces``) can be
read from files before the run starts; :meth:`RunContext.map` then does not run those
queries, so the stage makes no model call for them (the arrays and rankings the stage
computes from its records are still computed). Two forms per stage:

- ``run.imports.perceive=FILE``: a stage trace as a run writes it (``stages/<stage>.jsonl``,
  lines ``{"query": id, "record": {...}}``), or a CSV / JSONL whose ``query`` column is the
  query id and whose other columns are the record's fields;
- a list of sources (or one), each ``{file, key, fields}``::

      run:
        imports:
          perceive:
            - file: ROOT/preload/gen_tar_desc/enriched_target_desc.csv
              key: target                  # how rows join queries: query | target | reference | release_row
              fields: {target_caption: tar_desc, initial_target: tar_desc}
            - fields: {reference_caption: "{txt1}"}     # no file: from the query's own fields
          create:
            - file: ROOT/preload/gen_tar_desc/enriched_target_desc.csv
              key: target
              fields: {proxies: enriched_desc}
            - fields: {visual_proxy: "features:gen_img_features/@{release_row}"}

  ``fields`` maps a record field to a column, or to a template (``{...}``) over the row's
  columns and the query's ``query``, ``reference``, ``target``, ``text`` and ``meta`` keys. A
  cell holding a JSON list or object (``["a", "b"]``) is parsed; other text is kept as is. ``key: target`` joins by the
  query's target: released per-query outputs are often named by it (the OCTOPUS release's
  target descriptions); it is a join key only and never reaches the method.

Every query of the batch must get a record from a stage's imports (``partial: true`` on a
source lets the others be computed). Files: CSV, JSON lines, JSON, or a ``.pkl`` holding a
dict of per-query lists (the OCTOPUS release's ``preload_image_captions.pkl``: row i is the
release's query i, joined with ``key: release_row``), read without running code
(:mod:`agentcir.framework.safe_pickle`). Their content hash joins the run's inputs, so changed
files recompute the stage.
"""

from __future__ import annotations

import csv
import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .datasets.base import read_json, read_jsonl
from .errors import InputError
from .hashing import file_digest, stable_hash
from .types import Query

KEYS = ("query", "target", "reference", "release_row")

__all__ = ["ImportSource", "parse_imports", "apply_imports", "imports_identity", "KEYS"]


@dataclass
class ImportSource:
    stage: str
    file: str = ""
    key: str = "query"
    fields: dict[str, str] = field(default_factory=dict)
    partial: bool = False

    @property
    def where(self) -> str:
        return f"run.imports.{self.stage}" + (f" ('{self.file}')" if self.file else "")


def parse_imports(spec: Mapping[str, Any] | None) -> list[ImportSource]:
    """The sources of ``run.imports`` (a stage -> FILE, a source mapping, or a list of them)."""
    out = []
    for stage, value in (spec or {}).items():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, str):
                v = {"file": v}
            if not isinstance(v, Mapping):
                raise InputError(
                    f"run.imports.{stage}: expected a file, a mapping {{file, key, fields}} or a list of "
                    f"them, got {type(v).__name__}"
                )
            unknown = sorted(set(v) - {"file", "key", "fields", "partial"})
            if unknown:
                raise InputError(
                    f"run.imports.{stage}: unknown field(s) {', '.join(unknown)} (valid: file, key, fields, partial)"
                )
            src = ImportSource(
                stage,
                str(v.get("file") or ""),
                str(v.get("key") or "query"),
                dict(v.get("fields") or {}),
                bool(v.get("partial", False)),
            )
            if src.key not in KEYS:
                raise InputError(f"{src.where}: key must be one of {', '.join(KEYS)}, got '{src.key}'")
            if not src.file and not src.fields:
                raise InputError(f"{src.where}: give a file, or fields made from the query's own values")
            if not src.file and not all(_is_template(t) for t in src.fields.values()):
                raise InputError(f"{src.where}: without a file every field must be a template such as '{{txt1}}'")
            if src.file and not Path(src.file).expanduser().is_file():
                raise InputError(f"{src.where}: file not found")
            out.append(src)
    return out


def _is_template(s: str) -> bool:
    return "{" in s and "}" in s


def _cell(v: Any) -> Any:
    """A text cell holding a JSON list or object (``["a", "b"]``) as that value; other text as is
    (a caption may well start with "[")."""
    if isinstance(v, str) and v.strip()[:1] in ("[", "{"):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _rows(src: ImportSource) -> list[dict[str, Any]]:
    path, where = Path(src.file).expanduser(), src.where
    if path.suffix == ".pkl":  # a dict of per-query lists, row i = query i of the release (read without running code)
        from .safe_pickle import safe_load

        d = safe_load(path)
        lists = {k: v for k, v in d.items() if isinstance(v, (list, tuple)) and v} if isinstance(d, dict) else {}
        n = {len(v) for v in lists.values()}
        if len(n) != 1:
            raise InputError(
                f"{where}: a .pkl import must be a dict of per-query lists of one length, got "
                f"{ {k: len(v) for k, v in lists.items()} if lists else type(d).__name__ }"
            )
        return [{"release_row": str(i), **{k: _plain(v[i]) for k, v in lists.items()}} for i in range(n.pop())]
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as f:  # newline="": a quoted cell may hold line breaks
            return list(csv.DictReader(f))
    if path.suffix == ".json":
        data = read_json(path, f"run.imports.{src.stage}")
        if isinstance(data, dict):  # {query id: record}
            return [{"query": k, "record": v} for k, v in data.items()]
        if isinstance(data, list):
            return data
        raise InputError(f"{where}: a .json import must be a list of rows or an object id -> record")
    return read_jsonl(path, f"run.imports.{src.stage}")


def _plain(v: Any) -> Any:
    """A pickled value as JSON-able data (a 0-d tensor or array -> its number)."""
    if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        return v.item()
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _query_values(q: Query) -> dict[str, Any]:
    """The query's own values (its ``meta``, ``release_row`` among them, and the join keys)."""
    return {
        **q.meta,
        "query": q.id,
        "reference": q.reference_id or "",
        "target": q.targets[0] if q.targets else "",
        "text": q.text,
    }


def _records(src: ImportSource, queries: Sequence[Query]) -> dict[str, dict[str, Any]]:
    """query id -> the record fields this source gives."""
    if not src.file:
        rows_by_key = None
    else:
        rows = _rows(src)
        rows_by_key = {}
        for r in rows:
            if not isinstance(r, dict) or src.key not in r:
                raise InputError(
                    f"{src.where}: every row needs a '{src.key}' column (the join key); got "
                    f"{', '.join(map(str, r)) if isinstance(r, dict) else type(r).__name__}"
                )
            rows_by_key.setdefault(str(r[src.key]), r)
    fmt = string.Formatter()
    out: dict[str, dict[str, Any]] = {}
    for q in queries:
        values, cols = _query_values(q), []
        if rows_by_key is not None:
            row = rows_by_key.get(str(values.get(src.key, "")))
            if row is None:
                continue
            cols = [k for k in row if k != "record"]
            values = {**values, **{k: row[k] for k in cols}}
            if not src.fields:  # a stage trace line, or columns = record fields
                rec = (
                    row["record"]
                    if isinstance(row.get("record"), dict)
                    else {k: _cell(v) for k, v in row.items() if k != src.key}
                )
                out[q.id] = dict(rec)
                continue
        rec = {}
        for name, spec in src.fields.items():
            if _is_template(spec):
                try:
                    rec[name] = fmt.vformat(spec, (), values)
                except KeyError as e:
                    raise InputError(
                        f"{src.where}: field '{name}': template '{spec}' names {e}, which neither the "
                        f"file nor query {q.id} has (has: {', '.join(sorted(values))})"
                    ) from None
            elif spec in values:
                rec[name] = _cell(values[spec])
            else:
                raise InputError(
                    f"{src.where}: field '{name}' reads column '{spec}', which the file lacks (columns: "
                    f"{', '.join(sorted(cols))})"
                )
        out[q.id] = rec
    return out


def apply_imports(
    traces: dict[str, dict[str, Any]], queries: Sequence[Query], sources: Sequence[ImportSource], stages: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Put the imported records into ``traces`` (query id -> stage -> record); returns, per
    stage, what was imported (``queries``, ``fields``, ``files``) for the report."""
    names = set(stages)
    report: dict[str, dict[str, Any]] = {}
    by_stage: dict[str, list[ImportSource]] = {}
    for s in sources:
        if s.stage not in names:
            raise InputError(
                f"run.imports.{s.stage}: the method has no stage '{s.stage}' (stages: {', '.join(stages)})"
            )
        by_stage.setdefault(s.stage, []).append(s)
    for stage, srcs in by_stage.items():
        merged: dict[str, dict[str, Any]] = {}
        for s in srcs:
            got = _records(s, queries)
            if not s.partial and len(got) < len(queries):
                miss = [q.id for q in queries if q.id not in got]
                raise InputError(
                    f"{s.where}: no row for {len(miss)} of {len(queries)} queries (first: query {miss[0]}, "
                    f"key {s.key}); add them, or set partial: true to compute those"
                )
            for qid, rec in got.items():
                merged.setdefault(qid, {}).update(rec)
        complete = [q.id for q in queries if q.id in merged]
        for qid in complete:
            traces.setdefault(qid, {})[stage] = merged[qid]
        report[stage] = {
            "queries": len(complete),
            "fields": sorted({k for r in merged.values() for k in r}),
            "files": [s.file for s in srcs if s.file],
        }
    return report


def imports_identity(sources: Sequence[ImportSource]) -> str:
    """Hash of the import specs and the files' contents (part of a run's inputs)."""
    return stable_hash(
        [
            [s.stage, s.key, s.fields, s.partial, file_digest(Path(s.file).expanduser()) if s.file else ""]
            for s in sources
        ],
        n=16,
    )
