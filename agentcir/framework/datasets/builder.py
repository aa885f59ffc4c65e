"""Build a real-photo composed-retrieval benchmark from photos + a CSV of attributes.

Each query is (reference photo, a natural-language attribute edit, every gallery photo
that matches the edited attributes). With the Myntra fashion-products data: change the
colour, the article type, the gender or the usage of a product. Works on any catalog
folder + CSV: :attr:`BenchmarkSpec.edits` maps each edit kind to the CSV column it
changes and the columns a target keeps (``agentcir build-benchmark --edit ...``).

Target definition: for an edit of column ``c`` from value ``a`` to ``b`` keeping columns
``K``, the targets are *every* gallery photo with ``c == b`` and the reference's values
on ``K``. The reference itself (``c == a``) is never a target. Edits that would be
ambiguous are not generated: values listed in ``exclude_values`` (``NA``, ``Multi``...),
colour pairs that share a word (``Navy Blue`` / ``Blue``), and gender edits to or from
``Unisex``; article edits keep the sub-category (a t-shirt may become a shirt, not heels). ``max_targets`` drops edits with too many targets (0 = no cap).

The gallery is the ``val`` part of a fixed hash split of the ids (:func:`split_of`),
which is exactly the part the bundled catalog encoder never saw in training. A fixed
``seed`` makes the build deterministic.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import shutil
import string
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

VAL_PERCENT = 15


def split_of(item_id: str, val_percent: int = VAL_PERCENT) -> str:
    """``"val"`` for a fixed ~15% of ids (by sha1), else ``"train"``: the catalog encoder
    trains on ``train`` only; benchmarks and its validation use ``val``."""
    h = int(hashlib.sha1(str(item_id).encode()).hexdigest()[:8], 16)
    return "val" if h % 100 < val_percent else "train"


# -- how attribute values read in English -------------------------------------------------
_KEEP_PLURAL = (
    "jeans",
    "shorts",
    "trousers",
    "heels",
    "flats",
    "sandals",
    "flip flops",
    "socks",
    "shoes",
    "sunglasses",
    "briefs",
    "pants",
    "capris",
    "leggings",
    "boxers",
    "trunks",
    "tights",
    "stockings",
    "slippers",
    "jeggings",
    "track pants",
    "lounge pants",
    "sports shoes",
    "formal shoes",
    "casual shoes",
)
_ARTICLE_NAMES = {
    "tshirts": "t-shirt",
    "kurtas": "kurta",
    "kurtis": "kurti",
    "dresses": "dress",
    "watches": "watch",
    "tops": "top",
    "sarees": "saree",
    "innerwear vests": "innerwear vest",
    "dupatta": "dupatta",
}


def article_phrase(value: str) -> str:
    """``"Tshirts"`` -> ``"t-shirt"``, ``"Casual Shoes"`` -> ``"casual shoes"``."""
    v = value.strip().lower()
    if v in _ARTICLE_NAMES:
        return _ARTICLE_NAMES[v]
    if any(v.endswith(p) for p in _KEEP_PLURAL):
        return v
    return v[:-1] if v.endswith("s") and not v.endswith("ss") else v


def with_article(noun: str) -> str:
    """``"t-shirt"`` -> ``"a t-shirt"``, ``"jeans"`` -> ``"a pair of jeans"``, ``"socks"`` -> ``"socks"``."""
    if any(noun.endswith(p) for p in _KEEP_PLURAL):
        return f"a pair of {noun}" if not noun.endswith(("briefs", "socks", "tights", "stockings")) else noun
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


_GENDER = {
    "men": ("men", "men's"),
    "women": ("women", "women's"),
    "boys": ("boys", "boys'"),
    "girls": ("girls", "girls'"),
    "unisex": ("everyone", "unisex"),
}
_USAGE = {
    "casual": ("casual", "everyday wear"),
    "formal": ("formal", "the office"),
    "sports": ("sporty", "the gym"),
    "ethnic": ("ethnic", "a traditional occasion"),
    "smart casual": ("smart casual", "a smart-casual day"),
    "travel": ("travel-friendly", "travelling"),
    "party": ("party", "a party"),
}

TEMPLATES: dict[str, list[str]] = {
    "colour": [
        "make it {new}",
        "change the colour to {new}",
        "I want it in {new} instead of {old}",
        "same {article} but {new}",
        "is {new} rather than {old}",
        "in {new} please",
        "{a_new_article} instead",
        "prefer the {new} colour",
        "{new} instead",
        "the same thing in {new}",
        "swap the {old} for {new}",
        "do you have this in {new}?",
        "show me {this_article} in {new}",
        "{new}, not {old}",
        "same style, {new} colour",
        "could it be {new}?",
    ],
    "article": [
        "make it {a_new} instead",
        "I want {a_new} rather than {a_old}",
        "change the {old} to {a_new}",
        "same colour but as {a_new}",
        "turn it into {a_new}",
        "show me {a_new} in this colour",
        "{a_new} instead of {a_old}",
        "not {a_old}, {a_new}",
        "I'd like {a_new} in the same colour",
        "swap the {old} for {a_new}",
        "what about {a_new} instead?",
        "same shade, but {a_new}",
    ],
    "gender": [
        "make it for {new}",
        "the {new_poss} version",
        "I need the {new_poss} one",
        "same but for {new}",
        "change it from {old_poss} to {new_poss}",
        "a {new_poss} {article} like this",
        "is there a {new_poss} version?",
        "for {new} instead of {old}",
        "the same {article}, {new_poss}",
    ],
    "usage": [
        "make it more {new}",
        "a {new} version",
        "something {new} instead of {old}",
        "I want {a_new_article}",
        "same kind of {article} but {new}",
        "more {new}, less {old}",
        "I need one for {context}",
        "something suitable for {context}",
        "a {new} {article} instead",
    ],
    "other": [
        "change the {kind} to {new}",
        "make the {kind} {new} instead of {old}",
        "same but with {kind} {new}",
        "I want {kind} {new}, not {old}",
    ],
}

#: edit kind -> (column, columns a target must share with the reference)
DEFAULT_EDITS: dict[str, tuple[str, tuple[str, ...]]] = {
    "colour": ("baseColour", ("gender", "articleType")),
    "article": ("articleType", ("gender", "baseColour", "subCategory")),  # t-shirt -> shirt, never t-shirt -> heels
    "gender": ("gender", ("articleType", "baseColour")),
    "usage": ("usage", ("gender", "articleType")),
}
#: attribute values never used in an edit (unknown or ambiguous)
DEFAULT_EXCLUDE = ("", "na", "n/a", "none", "null", "multi", "other", "others", "unknown")


def phrase_edit(kind: str, old: str, new: str, article_value: str, rng: random.Random) -> str:
    """One natural phrasing, drawn with ``rng``, of changing ``kind`` from ``old`` to ``new``
    on an item whose article type reads ``article_value`` (``""`` = unknown: "item")."""
    article = article_phrase(article_value) if article_value else "item"
    plural = any(article.endswith(p) for p in _KEEP_PLURAL)
    vals: dict[str, str] = {
        "article": article,
        "this_article": f"{'these' if plural else 'this'} {article}",
        "kind": kind.replace("_", " "),
    }
    if kind == "colour":
        o, n = old.lower(), new.lower()
        vals.update(old=o, new=n, a_new_article=with_article(f"{n} {article}"))
    elif kind == "article":
        o, n = article_phrase(old), article_phrase(new)
        vals.update(old=o, new=n, a_old=with_article(o), a_new=with_article(n))
    elif kind == "gender":
        o, n = _GENDER.get(old.lower(), (old.lower(),) * 2), _GENDER.get(new.lower(), (new.lower(),) * 2)
        vals.update(old=o[0], new=n[0], old_poss=o[1], new_poss=n[1])
    elif kind == "usage":
        o, n = _USAGE.get(old.lower(), (old.lower(),) * 2), _USAGE.get(new.lower(), (new.lower(),) * 2)
        vals.update(old=o[0], new=n[0], context=n[1], a_new_article=with_article(f"{n[0]} {article}"))
    else:
        vals.update(old=old.lower(), new=new.lower())
    return rng.choice(TEMPLATES.get(kind, TEMPLATES["other"])).format(**vals)


def ambiguous_edit(kind: str, old: str, new: str) -> bool:
    """Edits not generated: colours sharing a word (navy blue/blue) and gender to/from unisex."""
    o, n = old.strip().lower(), new.strip().lower()
    if kind == "colour" and set(o.split()) & set(n.split()):
        return True
    return kind == "gender" and "unisex" in (o, n)


@dataclass
class BenchmarkSpec:
    """What to build.

    Attributes:
        csv_path: attributes CSV (one row per photo).
        images_dir: folder of the photos.
        out: benchmark folder to write (``gallery.csv``, ``queries.jsonl``, ``README.md``).
        num_queries: how many queries (fewer when the gallery allows fewer distinct references).
        seed: fixes every random choice (subset, edits, phrasings).
        split: ``val`` / ``train`` part of :func:`split_of`, or ``all``.
        gallery_size: cap the gallery (0 = the whole split); the subset keeps groups dense.
        id_column: the CSV column of photo ids.
        image_pattern: photo file name from CSV columns, e.g. ``{id}.jpg``.
        edits: edit kind -> (column changed, columns a target keeps).
        exclude_values: attribute values never used in an edit (case-insensitive).
        group_columns: columns the gallery subset is grouped by (default: the first edit's keep columns).
        article_column: column read as the item noun in phrasings (default: the ``article`` edit's column, else ``articleType``).
        copy_images: copy the photos into ``out/images``.
        max_targets: drop edits with more targets than this (0 = no cap).
        attribution: source and licence text for the README.
    """

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
    exclude_values: tuple[str, ...] = DEFAULT_EXCLUDE
    group_columns: tuple[str, ...] = ()
    article_column: str = ""
    copy_images: bool = False
    max_targets: int = 0
    attribution: str = ""

    def columns(self) -> list[str]:
        """Every attribute column the edits read (sorted)."""
        return sorted({c for col, keep in self.edits.values() for c in (col, *keep)})

    def validate(self) -> None:
        if self.num_queries < 1:
            raise InputError(f"number of queries must be at least 1, got {self.num_queries}")
        if self.split not in ("val", "train", "all"):
            raise InputError(f"split must be val, train or all, got '{self.split}'")
        if self.gallery_size < 0 or self.max_targets < 0:
            raise InputError("gallery_size and max_targets must be 0 (no limit) or positive")
        if not self.edits:
            raise InputError("no edits given: map at least one edit kind to a column")
        for kind, (col, keep) in self.edits.items():
            if col in keep:
                raise InputError(f"edit '{kind}': column '{col}' cannot be both changed and kept")
        names = [f for _, f, _, _ in string.Formatter().parse(self.image_pattern) if f is not None]
        if not names:
            raise InputError(f"image pattern '{self.image_pattern}' names no column (e.g. '{{id}}.jpg')")


def parse_edit(text: str) -> tuple[str, tuple[str, tuple[str, ...]]]:
    """``"colour=baseColour:gender,articleType"`` -> ``("colour", ("baseColour", ("gender", "articleType")))``."""
    kind, eq, rest = text.partition("=")
    col, _, keep = rest.partition(":")
    kind, col = kind.strip(), col.strip()
    if not eq or not kind or not col:
        raise InputError(
            f"edit '{text}' should read KIND=COLUMN[:KEEP1,KEEP2,...], e.g. colour=baseColour:gender,articleType"
        )
    return kind, (col, tuple(k.strip() for k in keep.split(",") if k.strip()))


def _read_rows(spec: BenchmarkSpec) -> list[dict[str, str]]:
    path = Path(spec.csv_path)
    if not path.is_file():
        raise InputError(f"attributes CSV '{path}' not found")
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        sample = f.read(4096)
        f.seek(0)
        if not sample.strip():
            raise InputError(f"attributes CSV '{path}' is empty")
        reader = csv.DictReader(f)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        reader.fieldnames = cols
        need = {spec.id_column, *spec.columns()}
        missing = sorted(need - set(cols))
        if missing:
            raise InputError(
                f"attributes CSV '{path}' lacks column(s) {', '.join(missing)} (has: {', '.join(cols)}); "
                f"map your columns with --id-column and --edit KIND=COLUMN:KEEP,..."
            )
        rows = []
        for n, r in enumerate(reader, 2):
            if None in r:
                raise InputError(
                    f"attributes CSV '{path}' line {n}: more fields than the header has columns "
                    f"(quote values that contain commas)"
                )
            rows.append({k: (v or "").strip() for k, v in r.items()})
    if not rows:
        raise InputError(f"attributes CSV '{path}' has a header but no rows")
    seen: dict[str, int] = {}
    for n, r in enumerate(rows, 2):
        rid = r[spec.id_column]
        if not rid:
            raise InputError(f"attributes CSV '{path}' line {n}: empty id in column '{spec.id_column}'")
        if rid in seen:
            raise InputError(f"attributes CSV '{path}': id '{rid}' appears twice (lines {seen[rid]} and {n})")
        seen[rid] = n
    return rows


def _image_path(images: Path, spec: BenchmarkSpec, row: dict[str, str]) -> Path:
    try:
        return images / spec.image_pattern.format(**{**row, "id": row[spec.id_column]})
    except (KeyError, IndexError, ValueError) as e:
        raise InputError(
            f"image pattern '{spec.image_pattern}' does not fit the CSV columns ({type(e).__name__}: {e})"
        ) from None


def build_benchmark(spec: BenchmarkSpec) -> dict:
    """Write a composed benchmark folder (gallery.csv, queries.jsonl, README.md). Returns a summary."""
    spec.validate()
    rng = random.Random(spec.seed)
    images = Path(spec.images_dir)
    if not images.is_dir():
        raise InputError(f"images folder '{images}' not found")
    exclude = {v.strip().lower() for v in spec.exclude_values}
    skipped: Counter = Counter()
    rows = []
    for r in _read_rows(spec):
        if spec.split != "all" and split_of(r[spec.id_column]) != spec.split:
            skipped["other split"] += 1
            continue
        if any(not r[c] for c in spec.columns()):
            skipped["empty attribute"] += 1
            continue
        p = _image_path(images, spec, r)
        if not p.is_file():
            skipped["photo missing"] += 1
            continue
        rows.append({**r, "_path": str(p.resolve())})
    if spec.gallery_size and len(rows) > spec.gallery_size:
        skipped["over gallery_size"] += len(rows) - spec.gallery_size
        rows = _dense_subset(rows, spec, rng)
    if len(rows) < 2:
        raise InputError(
            f"only {len(rows)} usable photo(s) in '{images}' for split '{spec.split}' "
            f"(skipped: {dict(skipped) or 'none'}; photo names come from --image-pattern '{spec.image_pattern}')"
        )

    idc = spec.id_column
    by_id = {r[idc]: r for r in rows}
    index: dict[tuple, list[str]] = defaultdict(list)
    for kind, (col, keep) in spec.edits.items():
        for r in rows:
            index[(kind, tuple(r[k] for k in keep), r[col])].append(r[idc])

    candidates = []
    for kind, (col, keep) in spec.edits.items():
        values = sorted({r[col] for r in rows if r[col].lower() not in exclude})
        for r in rows:
            if r[col].lower() in exclude:
                continue
            ctx = tuple(r[k] for k in keep)
            if any(v.lower() in exclude for v in ctx):
                continue
            for new in values:
                if new == r[col] or ambiguous_edit(kind, r[col], new):
                    continue
                tg = index.get((kind, ctx, new))
                if tg and (not spec.max_targets or len(tg) <= spec.max_targets):
                    candidates.append((kind, r[idc], new))
    if not candidates:
        raise InputError(
            "no attribute edit has a matching target in this gallery; use a larger gallery, other edits "
            "or a higher --max-targets"
        )
    picked = _pick(candidates, spec.num_queries, rng)

    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    attr_cols = spec.columns()
    extra_cols = [c for c in rows[0] if c not in (idc, "_path", *attr_cols)]
    if spec.copy_images:
        (out / "images").mkdir(exist_ok=True)
    with open(out / "gallery.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "image", *attr_cols, *extra_cols])
        for r in rows:
            src = Path(r["_path"])
            if spec.copy_images:
                rel = Path("images") / f"{r[idc]}{src.suffix.lower()}"
                shutil.copyfile(src, out / rel)
                image = rel.as_posix()
            else:
                image = str(src)
            w.writerow([r[idc], image, *(r[c] for c in attr_cols), *(r.get(c, "") for c in extra_cols)])

    article_col = spec.article_column or (spec.edits["article"][0] if "article" in spec.edits else "articleType")
    counts: Counter = Counter()
    n_targets = []
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for n, (kind, ref, new) in enumerate(picked):
            r = by_id[ref]
            col, keep = spec.edits[kind]
            targets = index[(kind, tuple(r[k] for k in keep), new)]
            assert ref not in targets, "the reference can never be its own target"
            text = phrase_edit(kind, r[col], new, r.get(article_col, ""), rng)
            counts[kind] += 1
            n_targets.append(len(targets))
            f.write(
                json.dumps(
                    {
                        "id": f"q{n:05d}",
                        "reference_id": ref,
                        "text": text,
                        "targets": targets,
                        "edit": {
                            "kind": kind,
                            "attribute": col,
                            "from": r[col],
                            "to": new,
                            "keep": {k: r[k] for k in keep},
                        },
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    summary = {
        "queries": len(picked),
        "gallery": len(rows),
        "per_edit": dict(sorted(counts.items())),
        "seed": spec.seed,
        "split": spec.split,
        "targets_per_query": {
            "mean": round(sum(n_targets) / len(n_targets), 2),
            "max": max(n_targets),
            "min": min(n_targets),
        },
        "skipped_rows": dict(skipped),
        "source_csv": str(spec.csv_path),
    }
    if len(picked) < spec.num_queries:
        summary["note"] = (
            f"only {len(picked)} of {spec.num_queries} queries: each reference is used once and "
            f"the gallery allows no more"
        )
    (out / "README.md").write_text(_readme(spec, summary))
    return summary


def _pick(candidates: list[tuple[str, str, str]], num: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """Round-robin over edit kinds (balanced), each reference used at most once."""
    per_kind: dict[str, list] = defaultdict(list)
    for c in candidates:
        per_kind[c[0]].append(c)
    for k in sorted(per_kind):
        rng.shuffle(per_kind[k])
    picked: list[tuple[str, str, str]] = []
    used: set[str] = set()
    kinds = sorted(per_kind)
    while len(picked) < num and any(per_kind[k] for k in kinds):
        for k in kinds:
            while per_kind[k]:
                c = per_kind[k].pop()
                if c[1] not in used:
                    used.add(c[1])
                    picked.append(c)
                    break
            if len(picked) >= num:
                break
    return picked


def _readme(spec: BenchmarkSpec, s: dict) -> str:
    edits = "\n".join(
        f"  - {k}: changes `{col}`, a target keeps `{', '.join(keep) or '(nothing)'}`"
        for k, (col, keep) in spec.edits.items()
    )
    return (
        "# Composed-retrieval benchmark (built by `agentcir build-benchmark`)\n\n"
        f"- queries: {s['queries']} ({', '.join(f'{k}: {v}' for k, v in s['per_edit'].items())})\n"
        f"- gallery: {s['gallery']} photos (split '{spec.split}' of the id hash split, seed {spec.seed})\n"
        f"- targets per query: mean {s['targets_per_query']['mean']}, min {s['targets_per_query']['min']}, "
        f"max {s['targets_per_query']['max']}\n"
        "- a query = reference photo + an attribute edit in natural language; its targets are every gallery photo with\n"
        "  the edited attribute value that keeps the reference's other identifying attributes:\n"
        f"{edits}\n"
        "- scored CIRCO-style (mAP@k over all targets) and Recall@k; the reference is excluded from rankings\n"
        + (f"\n## Source and licence\n\n{spec.attribution}\n" if spec.attribution else "")
    )


def _dense_subset(rows: list[dict], spec: BenchmarkSpec, rng: random.Random) -> list[dict]:
    """A gallery subset where edits still have targets: groups of ``group_columns`` (default:
    the first edit's keep columns), most frequent first, each capped at a tenth of
    ``gallery_size``, until it is reached."""
    cols = spec.group_columns or next(iter(spec.edits.values()))[1]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r.get(c, "") for c in cols)].append(r)
    order = sorted(groups, key=lambda g: (-len(groups[g]), g))
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
