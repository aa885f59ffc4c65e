"""Build a real-photo composed-retrieval benchmark from photos + a CSV of attributes.

Each query is (reference photo, a natural-language attribute edit, every gallery photo
that matches the edited attributes). With the Myntra fashion-products data: change the
colour, the article type, the gender or the usage of a product; a target keeps the
reference's other identifying attributes. Works on any catalog folder + CSV.

The gallery is the ``val`` part of a fixed hash split of the ids (:func:`split_of`),
which is exactly the part the bundled catalog encoder never saw in training.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import InputError

VAL_PERCENT = 15


def split_of(item_id: str, val_percent: int = VAL_PERCENT) -> str:
    """``"val"`` for a fixed ~15% of ids (by sha1), else ``"train"``: the catalog encoder
    trains on ``train`` only; benchmarks and its validation use ``val``."""
    h = int(hashlib.sha1(str(item_id).encode()).hexdigest()[:8], 16)
    return "val" if h % 100 < val_percent else "train"


# -- how attribute values read in English -------------------------------------------------
_KEEP_PLURAL = ("jeans", "shorts", "trousers", "heels", "flats", "sandals", "flip flops", "socks", "shoes",
                "sunglasses", "briefs", "pants", "capris", "leggings", "boxers", "trunks", "tights", "stockings", "slippers")
_ARTICLE_NAMES = {"tshirts": "t-shirt", "kurtas": "kurta", "kurtis": "kurti", "dresses": "dress", "watches": "watch"}


def article_phrase(value: str) -> str:
    """``"Tshirts"`` -> ``"t-shirt"``, ``"Casual Shoes"`` -> ``"casual shoes"``."""
    v = value.strip().lower()
    if v in _ARTICLE_NAMES:
        return _ARTICLE_NAMES[v]
    if any(v.endswith(p) for p in _KEEP_PLURAL):
        return v
    return v[:-1] if v.endswith("s") and not v.endswith("ss") else v


def with_article(noun: str) -> str:
    if any(noun.endswith(p) for p in _KEEP_PLURAL):
        return f"a pair of {noun}" if not noun.endswith(("briefs", "socks")) else noun
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


_GENDER = {"men": ("men", "men's"), "women": ("women", "women's"), "boys": ("boys", "boys'"), "girls": ("girls", "girls'"),
           "unisex": ("everyone", "unisex")}
_USAGE = {"casual": "casual", "formal": "formal", "sports": "sporty", "ethnic": "ethnic", "smart casual": "smart casual",
          "travel": "travel", "party": "party"}

TEMPLATES: dict[str, list[str]] = {
    "colour": ["make it {new}", "change the colour to {new}", "I want it in {new} instead of {old}",
               "same {article} but {new}", "is {new} rather than {old}", "in {new} please", "a {new} one",
               "prefer the {new} colour", "{new} instead", "the same thing in {new}", "swap the {old} for {new}"],
    "article": ["make it {a_new} instead", "I want {a_new} rather than {a_old}", "change the {old} to {a_new}",
                "same colour but as {a_new}", "turn it into {a_new}", "show me {a_new} in this colour",
                "{a_new} instead of {a_old}", "not {a_old}, {a_new}"],
    "gender": ["make it for {new}", "the {new_poss} version", "I need the {new_poss} one", "same but for {new}",
               "change it from {old_poss} to {new_poss}", "a {new_poss} {article} like this"],
    "usage": ["make it more {new}", "a {new} version", "something {new} instead of {old}", "I want a {new} {article}",
              "same kind of {article} but {new}", "more {new}, less {old}"],
}

#: edit kind -> (column, columns a target must share with the reference)
DEFAULT_EDITS: dict[str, tuple[str, tuple[str, ...]]] = {
    "colour": ("baseColour", ("gender", "articleType")),
    "article": ("articleType", ("gender", "baseColour")),
    "gender": ("gender", ("articleType", "baseColour")),
    "usage": ("usage", ("gender", "articleType")),
}


def phrase_edit(kind: str, old: str, new: str, row: dict[str, str], rng: random.Random) -> str:
    article = article_phrase(row.get("articleType", "item") or "item")
    if kind == "colour":
        vals = {"old": old.lower(), "new": new.lower()}
    elif kind == "article":
        o, n = article_phrase(old), article_phrase(new)
        vals = {"old": o, "new": n, "a_old": with_article(o), "a_new": with_article(n)}
    elif kind == "gender":
        o, n = _GENDER.get(old.lower(), (old.lower(),) * 2), _GENDER.get(new.lower(), (new.lower(),) * 2)
        vals = {"old": o[0], "new": n[0], "old_poss": o[1], "new_poss": n[1]}
    elif kind == "usage":
        vals = {"old": _USAGE.get(old.lower(), old.lower()), "new": _USAGE.get(new.lower(), new.lower())}
    else:
        return f"change the {kind} from {old} to {new}"
    vals["article"] = article
    return rng.choice(TEMPLATES[kind]).format(**vals)


@dataclass
class BenchmarkSpec:
    """What to build. ``edits`` maps an edit kind to (column, columns a target keeps)."""

    csv_path: str
    images_dir: str
    out: str
    num_queries: int = 400
    seed: int = 0
    split: str = "val"
    gallery_size: int = 0
    id_column: str = "id"
    image_pattern: str = "{id}.jpg"
    edits: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=lambda: dict(DEFAULT_EDITS))
    copy_images: bool = False
    max_targets: int = 0
    attribution: str = ""


def _read_rows(spec: BenchmarkSpec) -> list[dict[str, str]]:
    path = Path(spec.csv_path)
    if not path.is_file():
        raise InputError(f"attributes CSV '{path}' not found")
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        need = {spec.id_column, *(c for c, keep in spec.edits.values() for c in (c, *keep))}
        missing = sorted(need - set(cols))
        if missing:
            raise InputError(f"attributes CSV '{path}' lacks column(s) {', '.join(missing)} (has: {', '.join(cols)})")
        rows = list(reader)
    if not rows:
        raise InputError(f"attributes CSV '{path}' has no rows")
    return rows


def build_benchmark(spec: BenchmarkSpec) -> dict:
    """Write a composed benchmark folder (gallery.csv, queries.jsonl, README.md). Returns a summary."""
    rng = random.Random(spec.seed)
    images = Path(spec.images_dir)
    if not images.is_dir():
        raise InputError(f"images folder '{images}' not found")
    rows = []
    for r in _read_rows(spec):
        if spec.split != "all" and split_of(r[spec.id_column]) != spec.split:
            continue
        p = images / spec.image_pattern.format(id=r[spec.id_column], **{k: v for k, v in r.items() if k != "id"})
        if p.is_file() and all((r.get(c) or "").strip() not in ("", "NA") for c, keep in spec.edits.values() for c in (c, *keep)):
            rows.append({**r, "_path": str(p.resolve())})
    if spec.gallery_size and len(rows) > spec.gallery_size:
        rows = _dense_subset(rows, spec, rng)
    if len(rows) < 2:
        raise InputError(f"only {len(rows)} usable photo(s) in '{images}' for split '{spec.split}'")

    index: dict[tuple, list[str]] = defaultdict(list)
    by_id = {r[spec.id_column]: r for r in rows}
    for kind, (col, keep) in spec.edits.items():
        for r in rows:
            index[(kind, tuple(r[k] for k in keep), r[col])].append(r[spec.id_column])

    candidates = []
    for kind, (col, keep) in spec.edits.items():
        values = sorted({r[col] for r in rows})
        for r in rows:
            ctx = tuple(r[k] for k in keep)
            for new in values:
                if new == r[col] or (kind == "gender" and "unisex" in (new.lower(), r[col].lower())):
                    continue
                tg = index.get((kind, ctx, new))
                if tg and (not spec.max_targets or len(tg) <= spec.max_targets):
                    candidates.append((kind, r[spec.id_column], new))
    if not candidates:
        raise InputError("no attribute edit has a matching target in this gallery; use a larger gallery or other edits")
    per_kind: dict[str, list] = defaultdict(list)
    for c in candidates:
        per_kind[c[0]].append(c)
    for lst in per_kind.values():
        rng.shuffle(lst)
    picked, kinds = [], sorted(per_kind)
    used_refs: set[tuple[str, str]] = set()
    while len(picked) < spec.num_queries and any(per_kind.values()):
        for k in kinds:
            while per_kind[k]:
                c = per_kind[k].pop()
                if (c[0], c[1]) not in used_refs:  # one edit of each kind per reference
                    used_refs.add((c[0], c[1]))
                    picked.append(c)
                    break
            if len(picked) >= spec.num_queries:
                break

    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    attr_cols = sorted({c for col, keep in spec.edits.values() for c in (col, *keep)})
    extra_cols = [c for c in rows[0] if c not in (spec.id_column, "_path", *attr_cols)]
    if spec.copy_images:
        (out / "images").mkdir(exist_ok=True)
    with open(out / "gallery.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "image", *attr_cols, *extra_cols])
        for r in rows:
            src = Path(r["_path"])
            if spec.copy_images:
                rel = Path("images") / src.name
                shutil.copyfile(src, out / rel)
                image = str(rel)
            else:
                image = str(src)
            w.writerow([r[spec.id_column], image, *(r[c] for c in attr_cols), *(r.get(c, "") for c in extra_cols)])
    counts: dict[str, int] = defaultdict(int)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for n, (kind, ref, new) in enumerate(picked):
            r = by_id[ref]
            col, keep = spec.edits[kind]
            targets = index[(kind, tuple(r[k] for k in keep), new)]
            text = phrase_edit(kind, r[col], new, r, rng)
            counts[kind] += 1
            f.write(json.dumps({"id": f"q{n:05d}", "reference_id": ref, "text": text, "targets": targets,
                                "edit": {"kind": kind, "attribute": col, "from": r[col], "to": new,
                                         "keep": {k: r[k] for k in keep}}}, ensure_ascii=False) + "\n")
    summary = {"queries": len(picked), "gallery": len(rows), "per_edit": dict(counts), "seed": spec.seed,
               "split": spec.split, "source_csv": str(spec.csv_path)}
    (out / "README.md").write_text(
        "# Composed-retrieval benchmark (built by `agentcir build-benchmark`)\n\n"
        f"- queries: {len(picked)} ({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})\n"
        f"- gallery: {len(rows)} photos (split '{spec.split}' of the id hash split, seed {spec.seed})\n"
        "- a query = reference photo + an attribute edit in natural language; its targets are every gallery photo with\n"
        "  the edited attribute value that keeps the reference's other identifying attributes\n"
        "- scored CIRCO-style (mAP@k over all targets) and Recall@k; the reference is excluded from rankings\n"
        + (f"\n## Source and licence\n\n{spec.attribution}\n" if spec.attribution else ""))
    return summary


def _dense_subset(rows: list[dict], spec: BenchmarkSpec, rng: random.Random) -> list[dict]:
    """A gallery subset where edits still have targets: (gender, articleType) groups, most
    frequent first, each capped at a tenth of ``gallery_size``, until it is reached."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r.get("gender", ""), r.get("articleType", ""))].append(r)
    order = sorted(groups, key=lambda g: -len(groups[g]))
    cap = max(8, spec.gallery_size // 10)
    picked: list[dict] = []
    for g in order:
        members = groups[g][:]
        rng.shuffle(members)
        room = spec.gallery_size - len(picked)
        if room <= 0:
            break
        picked.extend(members[: min(room, cap)])
    return picked
