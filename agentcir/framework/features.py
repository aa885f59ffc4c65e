"""Precomputed feature files (released image embeddings), read as tables keyed by item id.

Layouts (``path`` is a folder or one file):

- **OCTOPUS/CoVR preload** (``path/<table>/<arch>_*.pkl``, e.g. ``preload/img_features/ViT-L/14_webvidcovr_test.pkl``):
  torch-pickled dicts of one feature matrix and one list of names
  (``index_features`` + ``index_names``, ``ref_features`` + ``reference_names``,
  ``gen_tar_features`` + ``gen_reference_names``). The table is the folder name. The
  release's ``ref_img_features`` file keeps only its last batch's names (the authors'
  ``pickle.dump`` names ``reference_names`` of the last batch); its rows are the query rows,
  in the order of ``gen_img_features``, whose names it borrows (:data:`BORROW_NAMES`).
- **.npy + ids**: ``<table>.npy`` (``[n, d]``) and ``<table>.ids.txt`` (one id a line) or
  ``<table>.ids.json`` (a list), under ``path`` or ``path/<arch>/``.
- **parquet**: ``<table>.parquet`` with an ``id`` column and an ``embedding`` column (a list
  of floats per row), under ``path`` or ``path/<arch>/``. Needs pyarrow.
- **.pkl** (any name, under ``path`` or ``path/<arch>/``): a dict of one matrix and one list
  of names (as above), or a dict id -> vector.

Pickles are read with :func:`agentcir.framework.safe_pickle.safe_load` (plain data, arrays and
tensors only). A row is addressed by its id, or by ``@<row>`` (its position: needed when
one id names several different rows, as the generated proxies of two queries with the
same reference do).

Images served from such tables are named by *feature references*, ``features:<table>/<key>``
(:func:`feature_ref`); a dataset without media hands them out as image paths, and the
``features`` encoder (:mod:`agentcir.components.encoders.features`) resolves them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import InputError
from .hashing import file_digest, stable_hash
from .safe_pickle import safe_load

SCHEME = "features:"
#: table -> the table whose names label its rows when its own names list does not fit (see the module docstring)
BORROW_NAMES = {"ref_img_features": "gen_img_features"}
SUFFIXES = (".pkl", ".npy", ".parquet")

__all__ = ["SCHEME", "FeatureTable", "feature_ref", "parse_feature_ref", "load_tables", "table_files", "files_identity"]


def feature_ref(table: str, key: str) -> str:
    """The image path that names row ``key`` of feature table ``table``."""
    return f"{SCHEME}{table}/{key}"


def parse_feature_ref(path) -> tuple[str, str] | None:
    """``(table, key)`` of a feature reference (also after ``Path.resolve`` prefixed a folder), else None."""
    s = str(path)
    i = s.find(SCHEME)
    if i < 0:
        return None
    table, _, key = s[i + len(SCHEME) :].partition("/")
    return (table, key) if table and key else None


@dataclass
class FeatureTable:
    """One file's rows: ``ids[i]`` labels ``vectors[i]`` (float32, as stored)."""

    name: str
    ids: list[str]
    vectors: np.ndarray
    source: Path
    _index: dict[str, int] = field(default_factory=dict, repr=False)
    _ambiguous: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self):
        if self.vectors.ndim != 2 or len(self.ids) != len(self.vectors):
            raise InputError(
                f"feature file '{self.source}': {len(self.ids)} id(s) for a matrix of shape "
                f"{tuple(self.vectors.shape)} (expected [n_ids, dim])"
            )
        for i, k in enumerate(self.ids):
            j = self._index.setdefault(k, i)
            if j != i and not np.array_equal(self.vectors[i], self.vectors[j]):
                self._ambiguous.add(k)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def row(self, key: str) -> int:
        """Row of ``key`` (an id, or ``@<row>``); -1 when absent. An id naming several different rows is an error."""
        if key.startswith("@") and key[1:].isdigit():
            r = int(key[1:])
            return r if r < len(self.ids) else -1
        if key in self._ambiguous:
            raise InputError(
                f"feature file '{self.source}': id '{key}' names several different rows; address them "
                f"by position (@<row>)"
            )
        return self._index.get(key, -1)


def _as_matrix(v, where: str) -> np.ndarray:
    if hasattr(v, "detach"):  # a torch tensor
        v = v.detach().float().cpu().numpy()
    a = np.asarray(v)
    if a.dtype == object or a.ndim != 2 or not np.issubdtype(a.dtype, np.number):
        raise InputError(f"{where}: expected a 2-D numeric feature matrix, got {a.dtype} of shape {a.shape}")
    return a.astype(np.float32)


def _names(v) -> list[str] | None:
    if isinstance(v, (list, tuple)) and all(isinstance(x, (str, int)) or hasattr(x, "item") for x in v):
        return [str(x.item() if hasattr(x, "item") else x) for x in v]
    return None


def _read_pkl(path: Path) -> tuple[list[str] | None, np.ndarray]:
    """(names or None when they do not fit, matrix) of an OCTOPUS-style dict or an id -> vector dict."""
    where = f"feature file '{path}'"
    d = safe_load(path)
    if not isinstance(d, dict) or not d:
        raise InputError(f"{where}: expected a dict of features and names, got {type(d).__name__}")
    mats = {k: v for k, v in d.items() if hasattr(v, "shape") and len(getattr(v, "shape", ())) == 2}
    if len(mats) == 1:
        key, mat = next(iter(mats.items()))
        mat = _as_matrix(mat, where)
        lists = [n for n in (_names(v) for k, v in d.items() if k != key) if n is not None]
        if len(lists) != 1:
            raise InputError(
                f"{where}: expected one list of names beside '{key}', found {len(lists)} "
                f"(keys: {', '.join(map(str, d))})"
            )
        return (lists[0] if len(lists[0]) == len(mat) else None), mat
    if all(hasattr(v, "shape") and len(v.shape) == 1 for v in d.values()):  # id -> vector
        ids = [str(k) for k in d]
        return ids, _as_matrix(
            np.stack([np.asarray(v.float() if hasattr(v, "float") else v) for v in d.values()]), where
        )
    raise InputError(
        f"{where}: expected one feature matrix and its names (or a dict id -> vector); keys: {', '.join(map(str, d))}"
    )


def _ids_files(path: Path) -> tuple[Path, Path]:
    """The files that may hold the ids of the ``.npy`` table ``path``: ``<table>.ids.txt``, ``<table>.ids.json``."""
    stem = path.with_suffix("")
    return Path(f"{stem}.ids.txt"), Path(f"{stem}.ids.json")


def _read_npy(path: Path) -> tuple[list[str], np.ndarray]:
    stem = path.with_suffix("")
    for ids_file in _ids_files(path):
        if ids_file.is_file():
            break
    else:
        raise InputError(
            f"feature file '{path}': no ids beside it (expected '{stem.name}.ids.txt', one id a line, "
            f"or '{stem.name}.ids.json', a list)"
        )
    if ids_file.suffix == ".json":
        ids = json.loads(ids_file.read_text())
        if not isinstance(ids, list):
            raise InputError(f"'{ids_file}': expected a JSON list of ids")
        ids = [str(i) for i in ids]
    else:
        ids = [ln.strip() for ln in ids_file.read_text(encoding="utf-8").splitlines() if ln.strip()]
    try:
        mat = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise InputError(f"feature file '{path}': not a plain numeric .npy ({e})") from None
    return ids, _as_matrix(mat, f"feature file '{path}'")


def _read_parquet(path: Path) -> tuple[list[str], np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            f"feature file '{path}': reading parquet needs pyarrow (pip install 'agentcir[features]')"
        ) from None
    t = pq.read_table(path)
    cols = t.column_names
    if "id" not in cols or "embedding" not in cols:
        raise InputError(f"feature file '{path}': expected columns 'id' and 'embedding', has {', '.join(cols)}")
    ids = [str(x) for x in t.column("id").to_pylist()]
    vecs = t.column("embedding").to_pylist()
    if any(v is None for v in vecs) or len({len(v) for v in vecs}) > 1:
        raise InputError(f"feature file '{path}': every 'embedding' must be a list of floats of one length")
    return ids, _as_matrix(np.asarray(vecs, np.float32), f"feature file '{path}'")


def table_files(path: str | Path, arch: str) -> dict[str, Path]:
    """Table name -> file, for ``path`` in one of the layouts of the module docstring."""
    root = Path(path).expanduser()
    if root.is_file():
        return {root.name.split(".")[0]: root}
    if not root.is_dir():
        raise InputError(f"features: path '{root}' is neither a feature file nor a folder")
    out: dict[str, Path] = {}
    if arch:  # OCTOPUS layout: <table>/<arch>_*.pkl (arch "ViT-L/14" -> folder ViT-L, file 14_*)
        for sub in sorted(p for p in root.iterdir() if p.is_dir()):
            hits = sorted(sub.glob(f"{arch}_*.pkl"))
            if len(hits) > 1:
                raise InputError(
                    f"features: '{sub}' holds several {arch} files ({', '.join(h.name for h in hits)}); "
                    f"set encoder.path to the one to use"
                )
            if hits:
                out[sub.name] = hits[0]
    if not out:
        folder = root / arch if arch and (root / arch).is_dir() else root
        for p in sorted(folder.iterdir()):
            if p.is_file() and p.suffix in SUFFIXES:
                out.setdefault(p.name.split(".")[0], p)
    if not out:
        raise InputError(
            f"features: no feature files under '{root}'"
            + (f" for arch '{arch}'" if arch else "")
            + f" (expected <table>/{arch or '<arch>'}_*.pkl, or <table>.npy + ids, .parquet, .pkl)"
        )
    return out


def load_tables(path: str | Path, arch: str) -> dict[str, FeatureTable]:
    """Every table of ``path`` (see :func:`table_files`); all must share one dimension."""
    files = table_files(path, arch)
    raw: dict[str, tuple[list[str] | None, np.ndarray]] = {}
    for name, f in files.items():
        raw[name] = _read_pkl(f) if f.suffix == ".pkl" else _read_npy(f) if f.suffix == ".npy" else _read_parquet(f)
    tables = {}
    for name, (ids, mat) in raw.items():
        if ids is None:
            lender = BORROW_NAMES.get(name)
            lent = raw.get(lender, (None, None))[0] if lender else None
            if lent is None or len(lent) != len(mat):
                raise InputError(
                    f"feature file '{files[name]}': its names list does not match its {len(mat)} rows"
                    + (f" and '{lender}' does not lend {len(mat)} names" if lender else "")
                )
            ids = lent
        tables[name] = FeatureTable(name, ids, mat, files[name])
    dims = {n: t.dim for n, t in tables.items()}
    if len(set(dims.values())) > 1:
        raise InputError(f"features under '{path}': tables of different dimensions ({dims}); one encoder space only")
    return tables


def files_identity(path: str | Path, arch: str) -> str:
    """Content hash of the feature files (with their ids files) and the arch: the features' identity."""
    parts = []
    for name, f in sorted(table_files(path, arch).items()):
        parts.append([name, file_digest(f)])
        for side in _ids_files(f) if f.suffix == ".npy" else ():
            if side.is_file():
                parts.append([side.name, file_digest(side)])
    return stable_hash(arch, parts, n=24)
