"""History questions over ``../shared/data/exif-photos``: ground truth from exiftool, and the offline planner's score.

``history_questions.json`` holds the questions (every kind the offline ImageSeeker planner reads:
dates, places, people, albums, cameras, keywords, titles, ratings, negation, counting and their
combinations), each with a *rule* over the photos' metadata. This script evaluates the rules
over the metadata **as exiftool reads it** (an independent tool, not the project's extraction)
and writes ``history_answers.json``; then it can index the folder, ask the offline planner each
question and print set F1 and exact match per kind::

    python benchmarks/history_questions.py answers            # regenerate history_answers.json (needs exiftool)
    python benchmarks/history_questions.py score              # index ../shared/data/exif-photos, ask, score

``apt-get install libimage-exiftool-perl`` provides exiftool. Rules (``all`` / ``any`` / ``not``
combine them): ``year``, ``date`` [start, end) (``YYYY-MM-DD``), ``month`` [months], ``weekday``
[0 = Monday ...], ``hours`` [first, last], ``relative_year`` (years after the newest photo's year:
0 this year, -1 last year), ``near`` [lat, lon, km], ``box`` [lat min, lat max, lon min, lon max],
``person`` (a tagged face / person name contains it; "" any), ``album`` (the parent folder),
``make`` / ``model`` (contains, case-insensitive), ``model_is`` (equals), ``keyword`` (an XMP/IPTC
keyword equals it), ``title`` (title or description contains it), ``rating_min``, ``dated``,
``file`` (the file name contains it). The photo's date is, in order: EXIF DateTimeOriginal, EXIF
CreateDate, XMP photoshop:DateCreated, XMP exif:DateTimeOriginal, XMP xmp:CreateDate, EXIF
ModifyDate, GPS date and time (local time as written; time zones dropped).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUESTIONS = HERE / "history_questions.json"
ANSWERS = HERE / "history_answers.json"
PHOTOS = ROOT.parent / "shared" / "data" / "exif-photos"

TAGS = [
    "ExifIFD:DateTimeOriginal",
    "ExifIFD:CreateDate",
    "XMP-photoshop:DateCreated",
    "XMP-exif:DateTimeOriginal",
    "XMP-xmp:CreateDate",
    "IFD0:ModifyDate",
    "Composite:GPSDateTime",
    "XMP-exif:GPSDateTime",
    "Composite:GPSLatitude",
    "Composite:GPSLongitude",
    "XMP-exif:GPSLatitude",
    "XMP-exif:GPSLongitude",
    "IFD0:Make",
    "IFD0:Model",
    "XMP-tiff:Make",
    "XMP-tiff:Model",
    "XMP-mwg-rs:RegionName",
    "XMP-mwg-rs:RegionType",
    "XMP-MP:RegionPersonDisplayName",
    "XMP-iptcExt:PersonInImage",
    "XMP-lr:HierarchicalSubject",
    "XMP-dc:Subject",
    "IPTC:Keywords",
    "XMP-dc:Title",
    "XMP-dc:Description",
    "IFD0:ImageDescription",
    "XMP-xmp:Rating",
    "File:FileType",
]
DATE_ORDER = TAGS[:8]
_TS = re.compile(r"^(\d{4})[:-](\d{2})[:-](\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?")


def _list(v) -> list:
    return [] if v in (None, "") else v if isinstance(v, list) else [v]


def _when(text) -> datetime | None:
    m = _TS.match(str(text or "").strip())
    if not m:
        return None
    try:
        return datetime(*(int(g) if g else 0 for g in m.groups()))
    except ValueError:
        return None


def exiftool_records(folder: Path) -> dict[str, dict]:
    """Photo id (path relative to ``folder`` without its extension, as ``agentcir index`` names
    items) -> normalised metadata as exiftool reads it; XMP sidecars and non-images are left out."""
    exe = shutil.which("exiftool")
    if exe is None:
        raise SystemExit("exiftool not found: apt-get install libimage-exiftool-perl")
    out = subprocess.run(
        [exe, "-j", "-n", "-r", "-a", "-G1", "-q", "-q", *[f"-{t}" for t in TAGS], "."],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    rows = json.loads(out.stdout or "[]")
    recs = {}
    for r in rows:
        src = Path(r["SourceFile"])
        if r.get("File:FileType") in (None, "XMP"):
            continue
        when = next((w for w in (_when(r.get(t)) for t in DATE_ORDER) if w and w.year > 1800), None)
        lat = next(
            (r[t] for t in ("Composite:GPSLatitude", "XMP-exif:GPSLatitude") if isinstance(r.get(t), (int, float))),
            None,
        )
        lon = next(
            (r[t] for t in ("Composite:GPSLongitude", "XMP-exif:GPSLongitude") if isinstance(r.get(t), (int, float))),
            None,
        )
        if lat == 0 and lon == 0:
            lat = lon = None
        types = _list(r.get("XMP-mwg-rs:RegionType"))
        names = _list(r.get("XMP-mwg-rs:RegionName"))
        people = [n for i, n in enumerate(names) if (types[i] if i < len(types) else "Face") == "Face"]
        people += _list(r.get("XMP-MP:RegionPersonDisplayName")) + _list(r.get("XMP-iptcExt:PersonInImage"))
        hier = [str(h) for h in _list(r.get("XMP-lr:HierarchicalSubject"))]
        people += [
            h.split("|")[-1] for h in hier if h.split("|")[0].lower() in ("people", "persons", "person", "faces")
        ]
        keywords = [str(k) for k in _list(r.get("XMP-dc:Subject")) + _list(r.get("IPTC:Keywords"))]
        keywords += [
            h.split("|")[-1] for h in hier if h.split("|")[0].lower() not in ("people", "persons", "person", "faces")
        ]
        recs[src.with_suffix("").as_posix().removeprefix("./")] = {
            "file": src.name,
            "album": src.parent.name,
            "when": when,
            "lat": lat,
            "lon": lon,
            "make": str(r.get("IFD0:Make") or r.get("XMP-tiff:Make") or ""),
            "model": str(r.get("IFD0:Model") or r.get("XMP-tiff:Model") or ""),
            "people": list(dict.fromkeys(str(p) for p in people)),
            "keywords": list(dict.fromkeys(keywords)),
            "text": " ".join(
                str(x)
                for x in (r.get("XMP-dc:Title"), r.get("XMP-dc:Description"), r.get("IFD0:ImageDescription"))
                if x
            ),
            "rating": r.get("XMP-xmp:Rating"),
        }
    return recs


def _km(lat1, lon1, lat2, lon2) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


def holds(rule: dict, r: dict, newest: datetime | None) -> bool:
    """Whether photo record ``r`` satisfies ``rule`` (see the module docstring)."""
    ok = True
    for key, v in rule.items():
        w = r["when"]
        if key == "all":
            ok &= all(holds(x, r, newest) for x in v)
        elif key == "any":
            ok &= any(holds(x, r, newest) for x in v)
        elif key == "not":
            ok &= not holds(v, r, newest)
        elif key == "year":
            ok &= w is not None and w.year == v
        elif key == "relative_year":
            ok &= w is not None and newest is not None and w.year == newest.year + v
        elif key == "date":
            ok &= w is not None and datetime.fromisoformat(v[0]) <= w < datetime.fromisoformat(v[1])
        elif key == "month":
            ok &= w is not None and w.month in v
        elif key == "weekday":
            ok &= w is not None and w.weekday() in v
        elif key == "hours":
            ok &= w is not None and v[0] <= w.hour <= v[1]
        elif key == "dated":
            ok &= (w is not None) == v
        elif key == "near":
            ok &= r["lat"] is not None and _km(v[0], v[1], r["lat"], r["lon"]) <= v[2]
        elif key == "box":
            ok &= r["lat"] is not None and v[0] <= r["lat"] <= v[1] and v[2] <= r["lon"] <= v[3]
        elif key == "person":
            ok &= any(v.lower() in p.lower() for p in r["people"])
        elif key == "album":
            ok &= r["album"].lower() == v.lower()
        elif key == "make":
            ok &= v.lower() in r["make"].lower()
        elif key == "model":
            ok &= v.lower() in r["model"].lower()
        elif key == "model_is":
            ok &= r["model"].lower() == v.lower()
        elif key == "keyword":
            ok &= any(k.lower() == v.lower() for k in r["keywords"])
        elif key == "title":
            ok &= v.lower() in r["text"].lower()
        elif key == "rating_min":
            ok &= isinstance(r["rating"], (int, float)) and r["rating"] >= v
        elif key == "file":
            ok &= v.lower() in r["file"].lower()
        else:
            raise SystemExit(f"unknown rule '{key}' in {rule}")
    return ok


def make_answers(folder: Path) -> dict:
    recs = exiftool_records(folder)
    newest = max((r["when"] for r in recs.values() if r["when"]), default=None)
    qs = json.loads(QUESTIONS.read_text(encoding="utf-8"))["questions"]
    version = subprocess.run([shutil.which("exiftool"), "-ver"], capture_output=True, text=True).stdout.strip()
    return {
        "about": f"answers of {QUESTIONS.name} over {len(recs)} photos, read with exiftool {version} by "
        f"benchmarks/history_questions.py (newest photo {newest})",
        "photos": len(recs),
        "answers": {q["id"]: sorted(i for i, r in recs.items() if holds(q["truth"], r, newest)) for q in qs},
    }


# -- scoring ---------------------------------------------------------------------------------------
def set_scores(pred: list[str], gold: list[str]) -> tuple[float, bool]:
    """Set F1 and exact match (the project's DISBench :func:`~agentcir.framework.eval.metrics.set_scores`;
    an empty gold answer: 1.0 when the prediction is empty too)."""
    from agentcir.framework.eval.metrics import set_scores as disbench_set_scores

    if not gold:
        return float(not pred), not pred
    s = disbench_set_scores(pred, gold)
    return s["F1"], s["EM"] == 1.0


def ask_all(folder: Path, work: Path, overrides: list[str] = (), method_overrides: list[str] = ()) -> dict[str, dict]:
    """Index ``folder`` into ``work``/gallery (offline default recipe and ``overrides``) and ask every
    question with ``method=imageseeker`` (and ``method_overrides``): question id -> {"ids", "trace"}."""
    from agentcir.cli import main as cli
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher

    gallery = work / "gallery"
    if not (gallery / "gallery.json").is_file():
        if cli(["index", str(folder), "--out", str(gallery), "-q", *overrides]) != 0:
            raise SystemExit(f"indexing {folder} failed")
    # the folder's file times are when it was copied here, not when its photos were taken: the questions are
    # about the dates in the metadata (the file-time fallback is tested on tiny libraries in tests/)
    searcher = Searcher(
        compose(
            [
                "method=imageseeker",
                f"run.root={work / 'runs'}",
                "run.progress=false",
                *overrides,
                "method.file_dates=false",
                *method_overrides,
            ]
        ),
        gallery,
    )
    out = {}
    for q in json.loads(QUESTIONS.read_text(encoding="utf-8"))["questions"]:
        res = searcher.search(text=q["question"], k=100000)
        out[q["id"]] = {
            "ids": [h.id for h in res.hits],
            "trace": res.trace.get("seek", res.trace),
            "no_match": res.trace["search"].get("no_match"),
        }
    searcher.pool.close()
    return out


def score(results: dict[str, dict], answers: dict) -> tuple[list[dict], dict[str, dict]]:
    """Per question and per kind: F1, exact match (and, for counting questions, whether the
    count is right)."""
    rows, kinds = [], {}
    for q in json.loads(QUESTIONS.read_text(encoding="utf-8"))["questions"]:
        gold = answers["answers"][q["id"]]
        pred = results[q["id"]]["ids"]
        f1, em = set_scores(pred, gold)
        row = {
            "id": q["id"],
            "kind": q["kind"],
            "question": q["question"],
            "metadata": q["metadata"],
            "f1": f1,
            "em": em,
            "gold": len(gold),
            "answered": len(pred),
            "set": q.get("set", "v1"),
            "no_match": results[q["id"]].get("no_match"),
        }
        if "how many" in q["question"].lower():
            row["count"] = results[q["id"]]["trace"].get("count")
        rows.append(row)
        k = kinds.setdefault(q["kind"], {"n": 0, "f1": 0.0, "em": 0})
        k["n"] += 1
        k["f1"] += f1
        k["em"] += em
    for k in kinds.values():
        k["f1"] /= k["n"]
        k["em"] /= k["n"]
    return rows, kinds


def table(rows: list[dict], kinds: dict[str, dict]) -> str:
    meta = [r for r in rows if r["metadata"]]
    lines = ["| kind | questions | F1 | EM |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v['n']} | {v['f1']:.3f} | {v['em']:.3f} |" for k, v in kinds.items()]
    lines.append(
        f"| **metadata questions** | {len(meta)} | {sum(r['f1'] for r in meta) / len(meta):.3f} | "
        f"{sum(r['em'] for r in meta) / len(meta):.3f} |"
    )
    for name, label in (("v2", "written before the code that reads them"), ("v2-after", "written after that code")):
        part = [r for r in meta if r["set"] == name]
        if part:
            lines.append(
                f"| set {name} ({label}) | {len(part)} | {sum(r['f1'] for r in part) / len(part):.3f} | "
                f"{sum(r['em'] for r in part) / len(part):.3f} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["answers", "score"])
    ap.add_argument("--photos", default=str(PHOTOS), help="the photo folder (default ../shared/data/exif-photos)")
    ap.add_argument("--work", help="folder for the gallery and runs (default: a temporary one)")
    ap.add_argument("-v", "--verbose", action="store_true", help="score: every question")
    ap.add_argument("overrides", nargs="*", help="score: recipe overrides (e.g. encoder=open_clip)")
    args = ap.parse_args(argv)
    folder = Path(args.photos)
    if not folder.is_dir():
        raise SystemExit(f"photo folder '{folder}' not found")
    if args.what == "answers":
        ANSWERS.write_text(json.dumps(make_answers(folder), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {ANSWERS}")
        return 0
    answers = json.loads(ANSWERS.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        results = ask_all(folder, Path(args.work or tmp), args.overrides)
    rows, kinds = score(results, answers)
    if args.verbose:
        for r in rows:
            print(
                f"{r['id']} {r['kind']:<13} F1 {r['f1']:.2f} EM {int(r['em'])} gold {r['gold']:>3} answered {r['answered']:>3}"
                + (f" count {r['count']}" if "count" in r else "")
                + f"  {r['question']}"
                + (f"  [{r['no_match']}]" if r["no_match"] else "")
            )
    print(table(rows, kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
