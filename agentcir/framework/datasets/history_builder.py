"""Build DISBench-format photo-history benchmarks whose questions need more than one hop.

Two sources:

- a **labelled photo set** (``--csv``: one row per photo with a user column and a label
  column, e.g. ``../shared/data/clothing/images.csv``: image, sender_id, label): each
  contributor is a user; each user's photos are dealt, deterministically from ``seed``, into
  one-day *events* in real cities (dates 2018-2024, a few hours apart within the day, GPS a
  few hundred metres around the city centre, DISBench ``address`` from the bundled gazetteer);
- a **photo folder with metadata** (``--folder``): users are top-level sub-folders (or one
  user), events are the photos' own days and cities (EXIF/XMP through
  :mod:`agentcir.framework.methods.imageseeker.exif`), labels are the photos' XMP keywords.

Questions (both kinds need a second photo, its date and its place; none is answerable by
matching the question text against single photos):

- **intra-event** - "the {target} photos from the day I photographed {clue} in {city}": the
  answer is the target photos of the one event in that city that also shows the clue. Chosen
  so that the clue alone and the city alone each match another event, when the user's
  history allows, and the target also appears in other events (so plain retrieval of the
  target over-answers);
- **inter-event** - "the {target} photos from the days I also photographed {clue}": the
  target photos of every event that shows the clue (at least two events), while the target
  also appears in an event without the clue.

Output (the DISBench layout read by ``dataset=disbench``)::

    queries.jsonl              query_id, user_id, query, answer, event_type (+ clue, target, events)
    metadata/{user}.jsonl      photo_id, metadata {taken_time, latitude, longitude, address, capturedevice}
    images/{user}/{photo}.jpg  symlinks (default) or copies of the photos
    events.jsonl               the synthetic events (for inspection; methods never read it)
    README.md                  source, licence, seed and the command that built it
"""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..hashing import stable_hash

#: city (gazetteer name), country, and how users may write it
CITIES = [
    ("New York City", "United States", ["New York", "NYC"]),
    ("Rome", "Italy", ["Rome", "Roma"]),
    ("Paris", "France", ["Paris"]),
    ("London", "United Kingdom", ["London"]),
    ("Florence", "Italy", ["Florence", "Firenze"]),
    ("Barcelona", "Spain", ["Barcelona"]),
    ("Lisbon", "Portugal", ["Lisbon", "Lisboa"]),
    ("Berlin", "Germany", ["Berlin"]),
    ("Munich", "Germany", ["Munich", "Muenchen"]),
    ("Vienna", "Austria", ["Vienna", "Wien"]),
    ("Prague", "Czechia", ["Prague", "Praha"]),
    ("Amsterdam", "The Netherlands", ["Amsterdam"]),
    ("Tokyo", "Japan", ["Tokyo"]),
    ("San Francisco", "United States", ["San Francisco", "SF"]),
    ("Los Angeles", "United States", ["Los Angeles", "LA"]),
    ("Istanbul", "Turkey", ["Istanbul"]),
]
#: labels of the clothing set as a person would say them (others: lower-cased)
NOUNS = {
    "T-Shirt": "t-shirt",
    "Longsleeve": "long-sleeve top",
    "Outwear": "jacket",
    "Body": "bodysuit",
    "Polo": "polo shirt",
    "Undershirt": "undershirt",
}
PLURAL = {"pants", "shoes", "shorts", "jeans", "trousers", "sneakers", "sandals", "boots", "socks", "glasses"}
EXCLUDE = ("Not sure", "Other", "Skip")
INTRA = [
    "the {t} photos from the day I photographed {c} in {p}",
    "photos of the {t} from the day in {p} when I also photographed {c}",
    "{T} pictures taken on the day I took a photo of {c} in {p}",
]
INTER = [
    "the {t} photos from the days I also photographed {c}",
    "all {t} pictures from every day on which I photographed {c}",
    "photos of the {t} taken on the days when I also took a photo of {c}",
]


@dataclass
class HistorySpec:
    """What :func:`build_history_benchmark` builds (see the module docstring)."""

    out: str
    csv_path: str = ""
    images_dir: str = ""
    folder: str = ""
    user_column: str = "sender_id"
    label_column: str = "label"
    id_column: str = "image"
    image_pattern: str = "{image}.jpg"
    exclude_labels: list[str] = field(default_factory=lambda: list(EXCLUDE))
    min_photos: int = 15
    photos_per_event: int = 6
    queries_per_user: int = 6
    seed: int = 0
    link: str = "symlink"  # symlink | copy
    attribution: str = ""


@dataclass
class _Photo:
    user: str
    id: str
    path: str
    label: str
    meta: dict[str, Any] = field(default_factory=dict)
    event: str = ""


def _noun(label: str) -> str:
    return NOUNS.get(label, label.lower())


def _with_article(noun: str) -> str:
    if noun in PLURAL or noun.endswith("s") and not noun.endswith("ss"):
        return noun
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _photos_from_csv(spec: HistorySpec) -> list[_Photo]:
    path, images = Path(spec.csv_path), Path(spec.images_dir)
    if not path.is_file():
        raise InputError(f"build-disbench: CSV '{path}' not found")
    if not images.is_dir():
        raise InputError(f"build-disbench: images folder '{images}' not found")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        for c in (spec.user_column, spec.label_column, spec.id_column):
            if c not in cols:
                raise InputError(f"build-disbench: CSV '{path}' has no column '{c}' (columns: {', '.join(cols)})")
        rows = list(reader)
    photos, missing = [], 0
    for r in rows:
        p = images / spec.image_pattern.format(**r)
        if not p.is_file():
            missing += 1
            continue
        photos.append(
            _Photo(str(r[spec.user_column]), str(r[spec.id_column]), str(p.resolve()), str(r[spec.label_column]))
        )
    if missing:
        import logging

        logging.getLogger(__name__).warning(
            "build-disbench: %d photo(s) of the CSV are missing in '%s' (skipped)", missing, images
        )
    return photos


def _synthesise_events(photos: list[_Photo], spec: HistorySpec) -> list[dict]:
    """Deal each user's photos into one-day events in cities (deterministic from the seed)."""
    from ..methods.imageseeker.places import load_gazetteer

    gaz = load_gazetteer()
    centre = {}
    for name, country, _ in CITIES:
        c = max(
            (c for c in gaz.cities if c.name == name and gaz.countries.get(c.country) == country),
            key=lambda c: c.population,
        )
        centre[name] = c
    by_user: dict[str, list[_Photo]] = defaultdict(list)
    for p in photos:
        by_user[p.user].append(p)
    events = []
    for user in sorted(by_user):
        rng = random.Random(stable_hash(spec.seed, user))
        ps = sorted(by_user[user], key=lambda p: p.id)
        rng.shuffle(ps)
        n_events = max(3, round(len(ps) / spec.photos_per_event))
        # cities: a few per user, revisited, so a city alone does not identify an event
        pool = rng.sample(CITIES, k=min(len(CITIES), max(2, n_events // 2)))
        cuts = sorted(rng.sample(range(1, len(ps)), k=min(n_events - 1, len(ps) - 1)))
        groups = [ps[a:b] for a, b in zip([0, *cuts], [*cuts, len(ps)])]
        day0 = datetime(2018, 1, 1) + timedelta(days=rng.randrange(0, 365))
        camera = rng.choice(
            ["Apple iPhone 12", "Google Pixel 6", "Samsung SM-G991B", "Canon EOS 250D", "SONY ILCE-6400"]
        )
        day = day0
        for n, group in enumerate(groups):
            day = day + timedelta(days=rng.randrange(20, 160))
            city_name, country, _ = pool[n % len(pool)] if n < len(pool) else rng.choice(pool)
            c = centre[city_name]
            ev = f"{user}/d{n}"
            t = day.replace(hour=rng.randrange(8, 12), minute=rng.randrange(60))
            for p in group:
                t = t + timedelta(minutes=rng.randrange(5, 90))
                lat, lon = c.lat + rng.uniform(-0.01, 0.01), c.lon + rng.uniform(-0.01, 0.01)
                p.meta = {
                    "taken_time": t.strftime("%Y-%m-%d %H:%M:%S"),
                    "latitude": round(lat, 6),
                    "longitude": round(lon, 6),
                    "accuracy": 16,
                    "address": f"{city_name}, {country}",
                    "capturedevice": camera,
                }
                p.event = ev
            events.append(
                {
                    "event": ev,
                    "user": user,
                    "date": day.strftime("%Y-%m-%d"),
                    "city": city_name,
                    "photos": [p.id for p in group],
                    "labels": sorted({p.label for p in group}),
                }
            )
    return events


def _photos_from_folder(spec: HistorySpec) -> tuple[list[_Photo], list[dict]]:
    """Users = sub-folders (or one user); events = days x cities from EXIF; labels = XMP keywords."""
    from ..images import list_images
    from ..methods.imageseeker.exif import scan_folder
    from ..methods.imageseeker.places import fold

    root = Path(spec.folder)
    images, _ = list_images(root)
    records, _ = scan_folder(images, root, progress=False)
    photos = []
    for p, meta in zip(images, records):
        rel = p.relative_to(root)
        user = rel.parts[0] if len(rel.parts) > 1 else "user"
        if not meta.get("taken_time") or not meta.get("tags"):
            continue
        kept = {k: meta[k] for k in ("taken_time", "latitude", "longitude", "address", "capturedevice") if k in meta}
        for tag in meta["tags"][:1]:
            photos.append(_Photo(user, stable_hash(str(rel), n=12), str(p.resolve()), str(tag), kept))
    events: dict[str, dict] = {}
    for p in photos:
        key = f"{p.user}/{p.meta['taken_time'][:10]}/{fold(p.meta.get('address', '').split(',')[0])}"
        p.event = key
        e = events.setdefault(
            key,
            {
                "event": key,
                "user": p.user,
                "date": p.meta["taken_time"][:10],
                "city": p.meta.get("address", "").split(",")[0],
                "photos": [],
                "labels": [],
            },
        )
        e["photos"].append(p.id)
        e["labels"] = sorted({*e["labels"], p.label})
    return photos, list(events.values())


def _queries(photos: list[_Photo], events: list[dict], spec: HistorySpec) -> list[dict]:
    by_id = {p.id: p for p in photos}
    excluded = set(spec.exclude_labels)
    out = []
    by_user: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_user[e["user"]].append(e)
    aliases = {name: al for name, _, al in CITIES}
    for user in sorted(by_user):
        rng = random.Random(stable_hash(spec.seed, user, "queries"))
        evs = by_user[user]
        labels_of = {
            e["event"]: Counter(by_id[i].label for i in e["photos"] if by_id[i].label not in excluded) for e in evs
        }
        events_with = defaultdict(set)
        for e in evs:
            for lab in labels_of[e["event"]]:
                events_with[lab].add(e["event"])
        city_of = {e["event"]: e["city"] for e in evs}
        cands = []
        for e in evs:  # intra-event
            ev = e["event"]
            for clue in labels_of[ev]:
                same = [x for x in events_with[clue] if city_of[x] == city_of[ev]]
                if len(same) != 1:
                    continue
                for target in labels_of[ev]:
                    if target == clue or len(events_with[target]) < 2:
                        continue
                    hard = (len(events_with[clue]) > 1) + (sum(1 for x in evs if x["city"] == e["city"]) > 1)
                    cands.append((hard, "intra-event", clue, target, [ev]))
        for clue, with_clue in events_with.items():  # inter-event
            if len(with_clue) < 2:
                continue
            for target in events_with:
                if target == clue:
                    continue
                inside, outside = events_with[target] & with_clue, events_with[target] - with_clue
                if inside and outside:
                    cands.append((2, "inter-event", clue, target, sorted(with_clue)))
        rng.shuffle(cands)
        cands.sort(key=lambda c: -c[0])
        taken, n_intra, n_inter = set(), 0, 0
        half = max(1, spec.queries_per_user // 2)
        for _hard, kind, clue, target, evlist in cands:
            if len(taken) >= spec.queries_per_user:
                break
            if (kind == "intra-event" and n_intra >= half and n_inter < half) or (
                kind == "inter-event" and n_inter >= half and n_intra < half
            ):
                continue
            key = (kind, clue, target, tuple(evlist))
            if key in taken:
                continue
            taken.add(key)
            answer = [
                i
                for ev in evlist
                for i in next(e for e in evs if e["event"] == ev)["photos"]
                if by_id[i].label == target
            ]
            t, c = _noun(target), _with_article(_noun(clue))
            if kind == "intra-event":
                n_intra += 1
                city = e_city = city_of[evlist[0]]
                written = rng.choice(aliases.get(e_city, [city]))
                text = rng.choice(INTRA).format(t=t, T=t[0].upper() + t[1:], c=c, p=written)
            else:
                n_inter += 1
                text = rng.choice(INTER).format(t=t, c=c)
            out.append(
                {
                    "query_id": "",
                    "user_id": user,
                    "query": text,
                    "answer": answer,
                    "event_type": kind,
                    "clue": clue,
                    "target": target,
                    "events": evlist,
                }
            )
    for n, q in enumerate(out, 1):
        q["query_id"] = f"q{n:04d}"
    return out


def build_history_benchmark(spec: HistorySpec) -> dict[str, Any]:
    """Write the benchmark into ``spec.out``; returns a summary (counts per user and kind)."""
    if spec.link not in ("symlink", "copy"):
        raise InputError(f"build-disbench: link must be symlink or copy, got '{spec.link}'")
    if bool(spec.csv_path) == bool(spec.folder):
        raise InputError("build-disbench: give either --csv (with --images) or --folder")
    if spec.csv_path:
        photos = _photos_from_csv(spec)
        counts = Counter(p.user for p in photos)
        photos = [p for p in photos if counts[p.user] >= spec.min_photos]
        if not photos:
            raise InputError(f"build-disbench: no user has at least {spec.min_photos} photos (--min-photos)")
        events = _synthesise_events(photos, spec)
    else:
        photos, events = _photos_from_folder(spec)
        if not photos:
            raise InputError(f"build-disbench: no photo under '{spec.folder}' has both a date and an XMP keyword")
    queries = _queries(photos, events, spec)
    if not queries:
        raise InputError(
            "build-disbench: no multi-hop question could be formed (users need several events that "
            "share labels); use more photos per user or fewer photos per event"
        )
    out = Path(spec.out)
    if (out / "queries.jsonl").exists():
        for sub in ("metadata", "images"):
            shutil.rmtree(out / sub, ignore_errors=True)
    (out / "metadata").mkdir(parents=True, exist_ok=True)
    users = sorted({p.user for p in photos})
    by_user: dict[str, list[_Photo]] = defaultdict(list)
    for p in photos:
        by_user[p.user].append(p)
    for user in users:
        img_dir = out / "images" / user
        img_dir.mkdir(parents=True, exist_ok=True)
        with open(out / "metadata" / f"{user}.jsonl", "w", encoding="utf-8") as f:
            for p in sorted(by_user[user], key=lambda p: (p.meta.get("taken_time", ""), p.id)):
                f.write(json.dumps({"photo_id": p.id, "metadata": p.meta}, ensure_ascii=False) + "\n")
                dst = (
                    img_dir
                    / f"{p.id}{Path(p.path).suffix.lower() if Path(p.path).suffix.lower() in ('.jpg', '.jpeg', '.png') else '.jpg'}"
                )
                if dst.exists() or dst.is_symlink():
                    dst.unlink()
                if spec.link == "copy" or Path(p.path).suffix.lower() not in (".jpg", ".jpeg", ".png"):
                    if Path(p.path).suffix.lower() in (".jpg", ".jpeg", ".png"):
                        shutil.copyfile(p.path, dst)
                    else:
                        from ..images import load_rgb

                        load_rgb(p.path).save(dst, quality=92)
                else:
                    os.symlink(p.path, dst)
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    with open(out / "events.jsonl", "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    kinds = Counter(q["event_type"] for q in queries)
    summary = {
        "users": len(users),
        "photos": len(photos),
        "events": len(events),
        "queries": len(queries),
        "intra-event": kinds["intra-event"],
        "inter-event": kinds["inter-event"],
        "mean_answer": round(sum(len(q["answer"]) for q in queries) / len(queries), 2),
        "seed": spec.seed,
    }
    source = f"--csv {spec.csv_path} --images {spec.images_dir}" if spec.csv_path else f"--folder {spec.folder}"
    (out / "README.md").write_text(
        "# A DISBench-format photo-history benchmark\n\n"
        f"Built by `agentcir build-disbench {source} --out {spec.out} --seed {spec.seed} "
        f"--queries-per-user {spec.queries_per_user} --photos-per-event {spec.photos_per_event} --min-photos {spec.min_photos}`.\n\n"
        + (
            "Events (dates, cities, GPS) are synthetic, dealt from the seed; the photos and their labels are real.\n\n"
            if spec.csv_path
            else "Events are the photos' own days and cities (EXIF/XMP); labels are their XMP keywords.\n\n"
        )
        + f"Summary: {json.dumps(summary)}\n\n"
        + (f"Source and licence: {spec.attribution}\n" if spec.attribution else "")
        + "Place names: GeoNames (https://www.geonames.org/, CC BY 4.0).\n",
        encoding="utf-8",
    )
    return summary
