"""The photo collection of one user: photos with parsed metadata, photosets, embeddings, search.

A :class:`PhotoCollection` is a view over an indexed :class:`~agentcir.framework.gallery.Gallery`:
the rows whose item ``meta["user"]`` is the user (every row when there is no user), with
each item's metadata parsed once into a :class:`Photo` (DISBench fields ``taken_time``,
``latitude``, ``longitude``, ``address``, ``capturedevice`` and the fields that
``agentcir index`` extracts from EXIF/XMP: ``album``, ``albums``, ``people``, ``tags``,
``title``, ``description``, ``rating``).

Photosets (events): photos sorted by time are cut into events where the gap between
consecutive photos exceeds ``event_gap_hours`` or the city changes; undated photos form one
photoset per album (or stay alone). An event id is ``<user>/e<n>``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Sequence

import numpy as np

from ...errors import InputError
from .dates import format_timestamp, parse_timestamp
from .places import fold, load_gazetteer


@dataclass
class Photo:
    id: str
    row: int  # gallery row
    path: str
    when: datetime | None = None
    lat: float | None = None
    lon: float | None = None
    address: str = ""
    albums: list[str] = field(default_factory=list)
    people: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    camera: str = ""
    title: str = ""
    description: str = ""
    rating: float | None = None
    event: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def address_parts(self) -> list[str]:
        parts = [self.address] if self.address else []
        for k in ("city", "region", "country"):
            v = self.meta.get(k)
            if v and v not in parts:
                parts.append(str(v))
        return parts

    @property
    def city(self) -> str:
        c = self.meta.get("city")
        if c:
            return str(c)
        return self.address.split(",")[0].strip() if self.address else ""

    def describe(self, fields: Sequence[str] | None = None) -> dict[str, Any]:
        """A JSON-able record of the photo (all fields, or ``fields``)."""
        full = {
            "id": self.id,
            "date": format_timestamp(self.when),
            "address": self.address or None,
            "latitude": self.lat,
            "longitude": self.lon,
            "album": self.albums[0] if self.albums else None,
            "albums": self.albums or None,
            "event": self.event or None,
            "people": self.people or None,
            "tags": self.tags or None,
            "camera": self.camera or None,
            "title": self.title or None,
            "description": self.description or None,
            "rating": self.rating,
        }
        if fields:
            alias = {
                "taken_time": "date",
                "time": "date",
                "place": "address",
                "location": "address",
                "photoset": "event",
                "person": "people",
                "tag": "tags",
                "capturedevice": "camera",
                "lat": "latitude",
                "lon": "longitude",
            }
            out = {"id": self.id}
            for f in fields:
                key = alias.get(f, f)
                out[key] = full[key] if key in full else self.meta.get(f)
            return out
        return {k: v for k, v in full.items() if v is not None}


METADATA_FIELDS = (
    "date",
    "address",
    "latitude",
    "longitude",
    "album",
    "albums",
    "event",
    "people",
    "tags",
    "camera",
    "title",
    "description",
    "rating",
)


def photo_from_meta(item_id: str, row: int, path: str, meta: dict[str, Any]) -> Photo:
    """Parse a gallery item's ``meta`` into a :class:`Photo` (unknown fields are kept in ``meta``)."""

    def num(x: Any) -> float | None:
        try:
            v = float(x)
        except (TypeError, ValueError):
            return None
        return None if v != v else v

    albums = [str(a) for a in ([meta["album"]] if meta.get("album") else []) + list(meta.get("albums") or [])]
    people = meta.get("people") or []
    tags = meta.get("tags") or []
    return Photo(
        id=item_id,
        row=row,
        path=path,
        when=parse_timestamp(meta.get("taken_time")),
        lat=num(meta.get("latitude")),
        lon=num(meta.get("longitude")),
        address=str(meta.get("address") or ""),
        albums=list(dict.fromkeys(albums)),
        people=[str(p) for p in people] if isinstance(people, list) else [str(people)],
        tags=[str(t) for t in tags] if isinstance(tags, list) else [str(tags)],
        camera=str(meta.get("capturedevice") or meta.get("camera") or ""),
        title=str(meta.get("title") or ""),
        description=str(meta.get("description") or ""),
        rating=num(meta.get("rating")),
        meta=dict(meta),
    )


#: ``time_source`` of a photo dated by its file's modification time (no date in its metadata)
FILE_TIME_SOURCE = "file:mtime"


def date_by_file(photo: Photo) -> bool:
    """Date a photo that has no date in its metadata by its file's modification time (local time),
    the last resort of the date sources; ``time_source`` becomes :data:`FILE_TIME_SOURCE`. False
    when the file cannot be read."""
    try:
        mtime = os.stat(photo.path).st_mtime
    except OSError:
        return False
    photo.when = datetime.fromtimestamp(mtime).replace(microsecond=0)
    photo.meta["taken_time"] = format_timestamp(photo.when)
    photo.meta["time_source"] = FILE_TIME_SOURCE
    return True


class PhotoCollection:
    """One user's photos (see the module docstring).

    Args:
        gallery: the indexed gallery.
        user: the user id (``None``: every photo of the gallery).
        event_gap_hours: a gap longer than this between consecutive photos starts a new event.
        file_dates: date a photo whose metadata has no date by its file's modification time
            (:func:`date_by_file`; the metadata's sources come first, see :mod:`.exif`).
    """

    def __init__(self, gallery, user: str | None = None, *, event_gap_hours: float = 24.0, file_dates: bool = True):
        self.gallery = gallery
        self.user = user
        rows = [r for r, it in enumerate(gallery.items) if user is None or str(it.meta.get("user")) == str(user)]
        if not rows:
            raise InputError(f"user '{user}' has no photos in gallery '{gallery.root}'")
        self.photos = [photo_from_meta(gallery.ids[r], r, gallery.paths[r], gallery.items[r].meta) for r in rows]
        if file_dates:
            for p in self.photos:
                if p.when is None:
                    date_by_file(p)
        self._by_id = {p.id: i for i, p in enumerate(self.photos)}
        self.rows = np.array(rows, dtype=np.int64)
        self._emb: np.ndarray | None = None
        self.gazetteer = load_gazetteer()
        self.events: dict[str, list[str]] = {}
        self._assign_events(event_gap_hours)

    # -- access -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.photos)

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.photos]

    def get(self, photo_id: str) -> Photo | None:
        i = self._by_id.get(str(photo_id))
        return None if i is None else self.photos[i]

    def index(self, photo_id: str) -> int:
        """Position of a photo in this collection, -1 when the user has no such photo."""
        return self._by_id.get(str(photo_id), -1)

    def resolve(self, ids: Iterable[Any], what: str = "photo id") -> list[Photo]:
        """Photos for ``ids``; unknown ids raise an :class:`InputError` naming them."""
        out, bad = [], []
        for i in ids:
            p = self.get(str(i))
            (out if p is not None else bad).append(p if p is not None else str(i))
        if bad:
            raise InputError(
                f"unknown {what}(s) for this user: {', '.join(bad[:5])}"
                + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")
            )
        return out

    @property
    def embeddings(self) -> np.ndarray:
        """``[n, d]`` float32 image embeddings of this user's photos (a copy out of the memory map)."""
        if self._emb is None:
            self._emb = np.asarray(self.gallery.image_emb[self.rows], dtype=np.float32)
        return self._emb

    def mask(self, allowed: set[str] | None) -> np.ndarray:
        if allowed is None:
            return np.ones(len(self.photos), dtype=bool)
        return np.fromiter((p.id in allowed for p in self.photos), dtype=bool, count=len(self.photos))

    # -- photosets ----------------------------------------------------------------------------
    def _assign_events(self, gap_hours: float) -> None:
        prefix = f"{self.user}/" if self.user is not None else ""
        dated = sorted((p for p in self.photos if p.when is not None), key=lambda p: (p.when, p.id))
        n, prev = 0, None
        for p in dated:
            if (
                prev is None
                or (p.when - prev.when).total_seconds() > gap_hours * 3600
                or (p.city and prev.city and fold(p.city) != fold(prev.city))
            ):
                n += 1
            p.event = f"{prefix}e{n}"
            prev = p
        for p in self.photos:
            if p.when is None:
                p.event = f"{prefix}album:{p.albums[0]}" if p.albums else f"{prefix}undated:{p.id}"
            self.events.setdefault(p.event, []).append(p.id)

    def event_span(self, event: str) -> tuple[datetime | None, datetime | None]:
        whens = [self.get(i).when for i in self.events.get(event, []) if self.get(i).when is not None]
        return (min(whens), max(whens)) if whens else (None, None)
