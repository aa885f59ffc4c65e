"""Photo metadata from EXIF and XMP (embedded or in a sidecar), never crashing on a bad file.

:func:`read_metadata` returns one photo's metadata record (the ``meta`` of its gallery
item) and the problems met; :func:`scan_folder` does it for a whole folder with counts.
The record uses DISBench's field names where DISBench has them:

============== ============================================================================
field           from
============== ============================================================================
taken_time      EXIF DateTimeOriginal > DateTimeDigitized > XMP photoshop:DateCreated /
                exif:DateTimeOriginal / xmp:CreateDate > EXIF DateTime > GPS date+time
                (``YYYY-MM-DD HH:MM:SS``, local time; ``time_source`` says which)
latitude,       EXIF GPS (or XMP exif:GPSLatitude/GPSLongitude)
longitude
address, city,  reverse geocoding of the coordinates with the bundled offline gazetteer
region, country (:mod:`.places`); ``place_source: gazetteer``
capturedevice   EXIF Make + Model (DISBench's name for the camera)
album           the folder of the photo relative to the indexed root (folder = album);
                ``albums`` adds XMP album names (``xmpDM:album``) when present
people          names of XMP face regions (MWG ``mwg-rs:Name`` of ``Type=Face``, Microsoft
                ``MPReg:PersonDisplayName``) and ``People/...`` hierarchical tags
tags            XMP ``dc:subject`` keywords and hierarchical tags that are not people, IPTC-IIM
                keywords (JPEG, TIFF)
title,          XMP ``dc:title`` / ``dc:description``, EXIF ImageDescription
description
rating          XMP ``xmp:Rating``
============== ============================================================================

EXIF is read with ``exifread`` (the ``photos`` extra; it also reads HEIC/AVIF
containers) and, without it or where it finds no field at all (WebP, some JPEGs with an
empty GPS block), with Pillow. XMP is read from the file's XMP packet and from
a sidecar ``NAME.xmp`` or ``NAME.EXT.xmp`` (UTF-8 or UTF-16), parsed as XML (with a
tolerant fallback when the packet is not well-formed). Persons are only ever what the
metadata names: no face is detected in the pixels.
"""

from __future__ import annotations

import logging
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

from .dates import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

#: bytes of a file searched for an embedded XMP packet
XMP_SCAN_BYTES = 8 << 20
NS = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "dc": "http://purl.org/dc/elements/1.1/",
    "xmp": "http://ns.adobe.com/xap/1.0/",
    "exif": "http://ns.adobe.com/exif/1.0/",
    "photoshop": "http://ns.adobe.com/photoshop/1.0/",
    "mwg-rs": "http://www.metadataworkinggroup.com/schemas/regions/",
    "MPReg": "http://ns.microsoft.com/photo/1.2/t/Region#",
    "digiKam": "http://www.digikam.org/ns/1.0/",
    "lr": "http://ns.adobe.com/lightroom/1.0/",
    "xmpDM": "http://ns.adobe.com/xmp/1.0/DynamicMedia/",
    "tiff": "http://ns.adobe.com/tiff/1.0/",
}
_PEOPLE_ROOTS = ("people", "persons", "person", "faces", "names")


@dataclass
class ScanReport:
    """What :func:`scan_folder` found: files read, fields found, and every problem by file."""

    files: int = 0
    with_time: int = 0
    with_gps: int = 0
    with_people: int = 0
    #: files whose metadata could only be read in part (path, problems)
    partial: list[tuple[str, list[str]]] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"metadata of {self.files} photo(s): {self.with_time} with a date, {self.with_gps} with GPS, "
            f"{self.with_people} with named people; {len(self.partial)} partial record(s) (unreadable or "
            f"malformed metadata)"
        )


# -- EXIF ----------------------------------------------------------------------------------------
def _num(v: Any) -> float:
    if hasattr(v, "num") and hasattr(v, "den"):
        return float(Fraction(int(v.num), int(v.den))) if int(v.den) else float("nan")
    if isinstance(v, tuple) and len(v) == 2:
        return v[0] / v[1] if v[1] else float("nan")
    return float(v)


def _dms(values: Any, ref: Any) -> float | None:
    try:
        vals = [_num(x) for x in (values if isinstance(values, (list, tuple)) else [values])]
        deg = vals[0] + (vals[1] / 60 if len(vals) > 1 else 0) + (vals[2] / 3600 if len(vals) > 2 else 0)
    except (TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    if deg != deg:  # NaN
        return None
    if str(ref).strip().upper()[:1] in ("S", "W"):
        deg = -deg
    return deg


class _Collect(logging.Handler):
    """Collects what a parser logs at warning level or above (its complaints about a file)."""

    def __init__(self, sink: list[str]):
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "does not have exif" not in msg.lower():  # a format without EXIF is not a malformed file
            self.sink.append(msg[:160])


def _exif_exifread(path: Path) -> dict[str, Any]:
    import exifread  # the photos extra

    warnings: list[str] = []
    handler = _Collect(warnings)
    logger = logging.getLogger("exifread")
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        with open(path, "rb") as f:
            tags = exifread.process_file(f, details=False)
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate

    def get(*names: str) -> Any:
        for n in names:
            t = tags.get(n)
            if t is not None:
                return t
        return None

    def text(*names: str) -> str | None:
        t = get(*names)
        s = str(t.printable if hasattr(t, "printable") else t).strip().strip("\x00").strip() if t is not None else ""
        return s or None

    out: dict[str, Any] = {
        "DateTimeOriginal": text("EXIF DateTimeOriginal"),
        "DateTimeDigitized": text("EXIF DateTimeDigitized"),
        "DateTime": text("Image DateTime"),
        "Make": text("Image Make"),
        "Model": text("Image Model"),
        "ImageDescription": text("Image ImageDescription"),
        "GPSDate": text("GPS GPSDate"),
    }
    lat, lon = get("GPS GPSLatitude"), get("GPS GPSLongitude")
    if lat is not None and lon is not None:
        out["lat"] = _dms(lat.values, text("GPS GPSLatitudeRef") or "N")
        out["lon"] = _dms(lon.values, text("GPS GPSLongitudeRef") or "E")
    if warnings:
        out["warnings"] = list(dict.fromkeys(warnings))
    ts = get("GPS GPSTimeStamp")
    if ts is not None:
        try:
            h, m, s = (_num(x) for x in ts.values)
            out["GPSTime"] = f"{int(h):02d}:{int(m):02d}:{int(s):02d}"
        except (TypeError, ValueError):
            pass
    return out


def _exif_pillow(path: Path) -> dict[str, Any]:
    from PIL import Image

    from ...images import _enable_heif

    _enable_heif()
    with Image.open(path) as im:
        ex = im.getexif()
        sub = ex.get_ifd(0x8769)
        gps = ex.get_ifd(0x8825)
    out: dict[str, Any] = {
        "DateTimeOriginal": sub.get(36867),
        "DateTimeDigitized": sub.get(36868),
        "DateTime": ex.get(306),
        "Make": ex.get(271),
        "Model": ex.get(272),
        "ImageDescription": ex.get(270),
        "GPSDate": gps.get(29),
    }
    out = {k: (str(v).strip("\x00 ") or None) if v is not None else None for k, v in out.items()}
    if gps.get(2) and gps.get(4):
        out["lat"], out["lon"] = _dms(gps[2], gps.get(1, "N")), _dms(gps[4], gps.get(3, "E"))
    return out


def read_exif(path: str | os.PathLike) -> dict[str, Any]:
    """Raw EXIF fields of a file (``exifread`` when installed, else Pillow). Raises on failure."""
    import importlib.util

    if importlib.util.find_spec("exifread") is None:  # the photos extra; without it, Pillow
        return _exif_pillow(Path(path))
    out = _exif_exifread(Path(path))
    if not any(v is not None for k, v in out.items() if k != "warnings"):
        # exifread found no field at all (it misses the EXIF of some files, e.g. WebP, or JPEGs with an
        # empty GPS block, that Pillow reads): try Pillow before concluding there is none
        import warnings

        try:
            with (
                warnings.catch_warnings()
            ):  # Pillow warns about the corrupt EXIF of broken files: they stay partial records
                warnings.simplefilter("ignore")
                out.update({k: v for k, v in _exif_pillow(Path(path)).items() if v is not None})
        except Exception:  # a file Pillow cannot read either: keep exifread's (empty) answer
            pass
    return out


# -- XMP -----------------------------------------------------------------------------------------
def read_iptc_keywords(path: str | os.PathLike) -> list[str]:
    """The IPTC-IIM keywords (record 2, dataset 25) of a JPEG or TIFF, as Pillow reads them; ``[]``
    when the file has none or is not such an image. UTF-8, else Latin-1."""
    from PIL import Image, IptcImagePlugin

    p = Path(path)
    if p.suffix.lower() not in (".jpg", ".jpeg", ".jpe", ".tif", ".tiff"):
        return []
    with Image.open(p) as im:
        info = IptcImagePlugin.getiptcinfo(im) or {}
    raw = info.get((2, 25))
    out = []
    for v in raw if isinstance(raw, list) else [raw] if raw else []:
        try:
            text = v.decode("utf-8")
        except UnicodeDecodeError:
            text = v.decode("latin-1")
        if text.strip():
            out.append(text.strip())
    return list(dict.fromkeys(out))


def _decode_xmp(raw: bytes) -> str | None:
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(raw) > 1 and (raw[0] == 0 or raw[1] == 0)):
        enc = "utf-16-be" if raw[:2] == b"\xfe\xff" or (raw[0] == 0) else "utf-16-le"
        text = raw.decode(enc, errors="replace").lstrip("\ufeff")
    else:
        text = raw.decode("utf-8", errors="replace")
    i, j = text.find("<x:xmpmeta"), text.rfind("</x:xmpmeta>")
    if i < 0:
        i, j = text.find("<rdf:RDF"), text.rfind("</rdf:RDF>")
        return text[i : j + len("</rdf:RDF>")] if i >= 0 and j > i else None
    return text[i : j + len("</x:xmpmeta>")] if j > i else None


def find_xmp(path: str | os.PathLike) -> list[str]:
    """XMP packets of a photo: the embedded one and a sidecar (``NAME.xmp`` / ``NAME.EXT.xmp``)."""
    p = Path(path)
    packets = []
    if p.suffix.lower() != ".xmp":
        with open(p, "rb") as f:
            data = f.read(XMP_SCAN_BYTES)
        i = data.find(b"<x:xmpmeta")
        if i >= 0:
            j = data.find(b"</x:xmpmeta>", i)
            if j > i:
                packets.append(data[i : j + 12].decode("utf-8", errors="replace"))
        sidecars = [p.with_suffix(".xmp"), p.with_suffix(".XMP"), p.with_name(p.name + ".xmp")]
    else:
        sidecars = [p]
    for s in dict.fromkeys(sidecars):
        if s.is_file():
            text = _decode_xmp(s.read_bytes())
            if text:
                packets.append(text)
    return packets


def _q(tag: str) -> str:
    pre, local = tag.split(":", 1)
    return f"{{{NS[pre]}}}{local}"


def _values(desc: ET.Element, tag: str) -> list[str]:
    """Values of property ``tag`` on an rdf:Description: attribute, simple element, or a
    Bag/Seq/Alt of rdf:li."""
    out = []
    if _q(tag) in desc.attrib:
        out.append(desc.attrib[_q(tag)])
    for el in desc.findall(_q(tag)):
        lis = el.findall(f".//{{{NS['rdf']}}}li")
        if lis:
            out.extend((li.text or "").strip() for li in lis if (li.text or "").strip())
        elif (el.text or "").strip():
            out.append(el.text.strip())
    return out


def parse_xmp(packet: str) -> dict[str, Any]:
    """Fields of one XMP packet: dates, GPS, title/description, rating, keywords, people, albums.

    Raises ``ValueError`` when the packet is not well-formed XML (the caller then falls back
    to :func:`parse_xmp_loose`).
    """
    try:
        root = ET.fromstring(packet)
    except ET.ParseError as e:
        raise ValueError(f"XMP is not well-formed XML ({e})") from None
    out: dict[str, Any] = {"people": [], "tags": [], "albums": []}
    for desc in root.iter(f"{{{NS['rdf']}}}Description"):
        for key, tag in (
            ("DateCreated", "photoshop:DateCreated"),
            ("DateTimeOriginal", "exif:DateTimeOriginal"),
            ("CreateDate", "xmp:CreateDate"),
            ("title", "dc:title"),
            ("description", "dc:description"),
            ("Rating", "xmp:Rating"),
            ("GPSLatitude", "exif:GPSLatitude"),
            ("GPSLongitude", "exif:GPSLongitude"),
            ("Make", "tiff:Make"),
            ("Model", "tiff:Model"),
            ("GPSTimeStamp", "exif:GPSTimeStamp"),
        ):
            v = _values(desc, tag)
            if v and key not in out:
                out[key] = v[0]
        out["albums"] += _values(desc, "xmpDM:album")
        subjects = _values(desc, "dc:subject")
        hier = [
            h.replace("|", "/") for h in _values(desc, "lr:hierarchicalSubject") + _values(desc, "digiKam:TagsList")
        ]
        people_h = [
            h.split("/", 1)[1].split("/")[-1] for h in hier if "/" in h and h.split("/", 1)[0].lower() in _PEOPLE_ROOTS
        ]
        out["people"] += people_h
        out["tags"] += [s for s in subjects if s not in people_h] + [
            h.split("/")[-1] for h in hier if h.split("/", 1)[0].lower() not in _PEOPLE_ROOTS
        ]
        # MWG regions: mwg-rs:RegionList/rdf:Bag/rdf:li/rdf:Description[@mwg-rs:Name, @mwg-rs:Type]
        for region in desc.iter(f"{{{NS['rdf']}}}Description"):
            name = region.attrib.get(_q("mwg-rs:Name")) or next(iter(_values(region, "mwg-rs:Name")), None)
            kind = region.attrib.get(_q("mwg-rs:Type")) or next(iter(_values(region, "mwg-rs:Type")), "Face")
            if name and kind.lower() == "face":
                out["people"].append(name)
        for li in desc.iter(f"{{{NS['rdf']}}}li"):
            name = li.attrib.get(_q("MPReg:PersonDisplayName"))
            if name:
                out["people"].append(name)
    for k in ("people", "tags", "albums"):
        out[k] = list(dict.fromkeys(x.strip() for x in out[k] if x and x.strip()))
    return out


_LOOSE = {
    "DateCreated": r"photoshop:DateCreated=\"([^\"]+)\"",
    "CreateDate": r"xmp:CreateDate=\"([^\"]+)\"",
    "DateTimeOriginal": r"exif:DateTimeOriginal=\"([^\"]+)\"",
    "Rating": r"xmp:Rating=\"([^\"]+)\"",
}


def parse_xmp_loose(packet: str) -> dict[str, Any]:
    """Best-effort fields of a malformed XMP packet (attribute-form dates, rating, face names)."""
    out: dict[str, Any] = {k: m.group(1) for k, rx in _LOOSE.items() if (m := re.search(rx, packet))}
    out["people"] = list(dict.fromkeys(re.findall(r"(?:mwg-rs:Name|MPReg:PersonDisplayName)=\"([^\"]+)\"", packet)))
    out["tags"], out["albums"] = [], []
    return out


def _xmp_coord(v: str) -> float | None:
    """XMP GPS coordinate ``"40,14.0786450N"`` / ``"40,14,5N"`` / ``"40.2345"`` -> degrees."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)(?:,(\d+(?:\.\d+)?))?(?:,(\d+(?:\.\d+)?))?\s*([NSEW])?\s*$", str(v))
    if not m:
        return None
    d = float(m.group(1)) + float(m.group(2) or 0) / 60 + float(m.group(3) or 0) / 3600
    return -d if m.group(4) in ("S", "W") else d


# -- the record ----------------------------------------------------------------------------------
def _camera(make: str | None, model: str | None) -> str | None:
    make, model = (make or "").strip(), (model or "").strip()
    if make and model.lower().startswith(make.split()[0].lower()):
        return model
    return " ".join(x for x in (make, model) if x) or None


def read_metadata(
    path: str | os.PathLike, *, root: str | os.PathLike | None = None, gazetteer=None, max_km: float = 50.0
) -> tuple[dict[str, Any], list[str]]:
    """The metadata record of one photo (see the module docstring) and the problems met.

    Never raises for a bad file: unreadable EXIF or XMP is a problem in the list and the
    record keeps whatever else could be read (a *partial* record).

    Args:
        path: the photo.
        root: the indexed folder; the photo's folder relative to it is its ``album``.
        gazetteer: a :class:`~.places.Gazetteer` for place names (default: the bundled one;
            ``False``: no reverse geocoding).
        max_km: farthest distance to a listed city for a city-level address.
    """
    p = Path(path)
    meta: dict[str, Any] = {}
    problems: list[str] = []
    try:
        exif = read_exif(p) if p.suffix.lower() != ".xmp" else {}
    except Exception as e:  # any parser failure on a broken file: keep going with XMP
        exif = {}
        problems.append(f"EXIF unreadable ({type(e).__name__}: {str(e)[:120]})")
    problems += [f"EXIF: {w}" for w in exif.pop("warnings", [])]
    xmp: dict[str, Any] = {"people": [], "tags": [], "albums": []}
    try:
        packets = find_xmp(p)
    except OSError as e:
        packets = []
        problems.append(f"file unreadable ({e})")
    for packet in packets:
        try:
            part = parse_xmp(packet)
        except ValueError as e:
            problems.append(str(e))
            part = parse_xmp_loose(packet)
        for k, v in part.items():
            if isinstance(v, list):
                xmp[k] = list(dict.fromkeys([*xmp.get(k, []), *v]))
            else:
                xmp.setdefault(k, v)
    try:
        xmp["tags"] = list(dict.fromkeys([*xmp["tags"], *read_iptc_keywords(p)]))
    except Exception as e:  # a broken IPTC block: keep going without its keywords
        problems.append(f"IPTC unreadable ({type(e).__name__}: {str(e)[:120]})")
    # time
    candidates = [
        ("exif:DateTimeOriginal", exif.get("DateTimeOriginal")),
        ("exif:DateTimeDigitized", exif.get("DateTimeDigitized")),
        ("xmp:photoshop:DateCreated", xmp.get("DateCreated")),
        ("xmp:exif:DateTimeOriginal", xmp.get("DateTimeOriginal")),
        ("xmp:CreateDate", xmp.get("CreateDate")),
        ("exif:DateTime", exif.get("DateTime")),
    ]
    if exif.get("GPSDate"):
        candidates.append(("exif:GPSDateTime", f"{exif['GPSDate']} {exif.get('GPSTime', '00:00:00')}"))
    candidates.append(("xmp:exif:GPSTimeStamp", xmp.get("GPSTimeStamp")))
    bad_times = []
    for source, raw in candidates:
        if not raw:
            continue
        dt = parse_timestamp(raw)
        if dt is None:
            bad_times.append(f"{source}={str(raw)[:40]!r}")
            continue
        meta["taken_time"], meta["time_source"] = format_timestamp(dt), source
        break
    if bad_times and "taken_time" not in meta:
        problems.append("no valid date (" + ", ".join(bad_times) + ")")
    # place
    lat, lon = exif.get("lat"), exif.get("lon")
    if (lat is None or lon is None) and xmp.get("GPSLatitude") and xmp.get("GPSLongitude"):
        lat, lon = _xmp_coord(xmp["GPSLatitude"]), _xmp_coord(xmp["GPSLongitude"])
    if lat is not None and lon is not None:
        if -90 <= lat <= 90 and -180 <= lon <= 180 and not (lat == 0 and lon == 0):
            meta["latitude"], meta["longitude"] = round(lat, 6), round(lon, 6)
            if gazetteer is not False:
                from .places import load_gazetteer

                place = (gazetteer or load_gazetteer()).reverse(lat, lon, max_km=max_km)
                meta.update({k: place[k] for k in ("address", "city", "region", "country") if place[k]})
                meta["place_source"] = "gazetteer"
        else:
            problems.append(f"GPS out of range or empty (latitude {lat}, longitude {lon})")
    camera = _camera(exif.get("Make") or xmp.get("Make"), exif.get("Model") or xmp.get("Model"))
    if camera:
        meta["capturedevice"] = camera
    if root is not None:
        rel = (
            p.resolve().parent.relative_to(Path(root).resolve())
            if p.resolve().is_relative_to(Path(root).resolve())
            else None
        )
        if rel is not None and rel.parts:
            meta["album"] = rel.as_posix()
    if xmp["albums"]:
        meta["albums"] = list(dict.fromkeys([*([meta["album"]] if "album" in meta else []), *xmp["albums"]]))
    if xmp["people"]:
        meta["people"] = xmp["people"]
    tags = [t for t in xmp["tags"] if t not in set(xmp["people"])]
    if tags:
        meta["tags"] = tags
    title = xmp.get("title")
    desc = xmp.get("description") or exif.get("ImageDescription")
    if title:
        meta["title"] = title
    if desc and desc != title:
        meta["description"] = desc
    if xmp.get("Rating") is not None:
        try:
            meta["rating"] = int(float(xmp["Rating"]))
        except ValueError:
            problems.append(f"rating not a number ({xmp['Rating']!r})")
    return meta, problems


def scan_folder(
    paths: Iterable[str | os.PathLike], root: str | os.PathLike, *, gazetteer=None, progress: bool | None = None
) -> tuple[list[dict[str, Any]], ScanReport]:
    """Metadata records of ``paths`` (in order) and a :class:`ScanReport`; problems are logged
    with a count, never raised."""
    from tqdm.auto import tqdm

    paths = list(paths)
    report = ScanReport(files=len(paths))
    records = []
    for path in tqdm(
        paths,
        desc="photo metadata",
        unit="img",
        disable=progress is False or (progress is None and len(paths) < 200),
        leave=False,
    ):
        meta, problems = read_metadata(path, root=root, gazetteer=gazetteer)
        if problems:
            meta["metadata_problems"] = problems
            report.partial.append((str(path), problems))
        report.with_time += "taken_time" in meta
        report.with_gps += "latitude" in meta
        report.with_people += bool(meta.get("people"))
        records.append(meta)
    if report.partial:
        shown = "; ".join(f"{Path(p).name}: {pr[0]}" for p, pr in report.partial[:3])
        log.warning("%d photo(s) with partial metadata (e.g. %s)", len(report.partial), shown)
    return records, report
