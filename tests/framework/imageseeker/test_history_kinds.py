"""History questions of every kind over a tiny library whose metadata is written here (Pillow's EXIF, an
IPTC block, file times): keywords, continents, place names in other languages, month/year ranges over
every date source, abstention naming the condition that emptied the set, and a visual part cut at the
calibrated threshold."""

import asyncio
import os
import struct
from datetime import datetime
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from agentcir.components.memory.subsets import NamedSubsets
from agentcir.framework.methods.imageseeker.conditions import Facts, parse_conditions
from agentcir.framework.methods.imageseeker.exif import read_iptc_keywords, read_metadata
from agentcir.framework.methods.imageseeker.places import load_gazetteer, place_match
from agentcir.framework.methods.imageseeker.planner import OfflinePlanner, PlanConfig, decompose
from agentcir.framework.methods.imageseeker.store import FILE_TIME_SOURCE, PhotoCollection
from agentcir.framework.methods.imageseeker.tools import Toolbox


def _dms(x: float) -> tuple[float, float, float]:
    x = abs(x)
    d, m = int(x), int(abs(x) * 60) % 60
    return float(d), float(m), round((x * 3600) % 60, 2)


def _with_iptc(path, keywords: list[str]) -> None:
    """Insert an APP13 Photoshop block with IPTC-IIM keywords (record 2, dataset 25) after the JPEG's SOI."""
    iptc = b"".join(b"\x1c\x02\x19" + struct.pack(">H", len(k.encode())) + k.encode() for k in keywords)
    iptc += b"\x00" * (len(iptc) % 2)
    block = b"Photoshop 3.0\x00" + b"8BIM" + b"\x04\x04" + b"\x00\x00" + struct.pack(">I", len(iptc)) + iptc
    data = path.read_bytes()
    path.write_bytes(data[:2] + b"\xff\xed" + struct.pack(">H", len(block) + 2) + block + data[2:])


def _photo(path, *, original=None, digitized=None, gps=None, gps_date=None, keywords=(), colour="red"):
    ex = Image.Exif()
    sub = {}
    if original:
        sub[36867] = original
    if digitized:
        sub[36868] = digitized
    if sub:
        ex[0x8769] = sub
    if gps or gps_date:
        g = {}
        if gps:
            g.update({1: "N" if gps[0] >= 0 else "S", 2: _dms(gps[0]), 3: "E" if gps[1] >= 0 else "W", 4: _dms(gps[1])})
        if gps_date:
            g.update({29: gps_date, 7: (12.0, 0.0, 0.0)})
        ex[0x8825] = g
    Image.new("RGB", (16, 16), colour).save(path, exif=ex)
    if keywords:
        _with_iptc(path, list(keywords))


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("library")
    _photo(root / "kenya.jpg", original="2019:04:10 10:00:00", gps=(-0.3713, 36.0564), keywords=["Frost", "Yard"])
    _photo(root / "rome.jpg", original="2018:07:14 18:30:00", gps=(41.9, 12.5))
    _photo(root / "berlin.jpg", digitized="2019:05:20 09:00:00", gps=(52.52, 13.40))  # CreateDate only
    _photo(root / "madrid.jpg", gps=(40.4168, -3.7038), gps_date="2019:03:02")  # the GPS date only
    _photo(root / "undated.jpg")  # the file's time only
    stamp = datetime(2017, 8, 15, 12, 0).timestamp()
    os.utime(root / "undated.jpg", (stamp, stamp))
    return root


def collection(root, file_dates=True) -> PhotoCollection:
    names = ["kenya", "rome", "berlin", "madrid", "undated"]
    metas = [read_metadata(root / f"{n}.jpg", root=root)[0] for n in names]
    emb = np.eye(len(names), 8, dtype=np.float32)
    g = SimpleNamespace(
        items=[SimpleNamespace(meta=m) for m in metas],
        ids=names,
        paths=[str(root / f"{n}.jpg") for n in names],
        image_emb=emb,
        root=str(root),
    )
    return PhotoCollection(g, file_dates=file_dates)


def ask(coll, question, *, verified=None, phrase_emb=None, **cfg):
    async def embed(text):
        return phrase_emb if phrase_emb is not None else np.ones(8, np.float32) / np.sqrt(8)

    async def verify(
        photos, phrase, views, contrast
    ):  # eyes that confirm everything (a category-level zero-shot check)
        return [verified is None or p.id in verified for p in photos]

    async def scorer(phrase):
        return dict(zip(coll.ids, (coll.embeddings @ await embed(phrase)).tolist()))

    tb = Toolbox(coll, NamedSubsets(None), embed_text=embed)
    planner = OfflinePlanner(tb, verify, PlanConfig(**cfg), scorer=scorer)
    return asyncio.run(planner.run(decompose(question, coll.gazetteer, facts=Facts.of(coll.photos))))


def test_every_date_source_in_order(library):
    coll = collection(library)
    src = {p.id: p.meta.get("time_source") for p in coll.photos}
    assert src == {
        "kenya": "exif:DateTimeOriginal",
        "rome": "exif:DateTimeOriginal",
        "berlin": "exif:DateTimeDigitized",
        "madrid": "exif:GPSDateTime",
        "undated": FILE_TIME_SOURCE,
    }
    assert coll.get("undated").when == datetime(2017, 8, 15, 12, 0)
    # relative dates count from the newest date in the metadata, not from a file's time
    assert Facts.of(coll.photos).newest == datetime(2019, 5, 20, 9, 0)
    assert collection(library, file_dates=False).get("undated").when is None


def test_iptc_keywords_are_read(library):
    assert read_iptc_keywords(library / "kenya.jpg") == ["Frost", "Yard"]
    assert read_iptc_keywords(library / "rome.jpg") == []
    assert read_metadata(library / "kenya.jpg")[0]["tags"] == ["Frost", "Yard"]


@pytest.mark.parametrize(
    "question,expected",
    [
        # keywords, exact and case-insensitive, before any visual guess
        ("photos tagged frost", ["kenya"]),
        ("photos tagged FROST", ["kenya"]),
        ("pictures with the keyword yard", ["kenya"]),
        # continents
        ("anything from Africa?", ["kenya"]),
        ("photos from Europe", ["rome", "berlin", "madrid"]),
        ("photos from europe in 2019", ["berlin", "madrid"]),
        ("fotos de Europa", ["rome", "berlin", "madrid"]),
        # place names in other languages, and question words in other languages
        ("fotos de Italia", ["rome"]),
        ("Bilder aus Deutschland", ["berlin"]),
        ("fotos tomadas en España", ["madrid"]),
        ("photos prises en Italie", ["rome"]),
        ("Photos d'Italie", ["rome"]),
        ("foto dall'Italia", ["rome"]),
        ("photos from Deutschland or España", ["berlin", "madrid"]),
        # month and year ranges over every date source (DateTimeOriginal, CreateDate, GPS date, the file's time)
        ("between March and May 2019", ["kenya", "berlin", "madrid"]),
        ("photos from Mar to Apr 2019", ["kenya", "madrid"]),
        ("summer 2018", ["rome"]),
        ("summer 2017", ["undated"]),
        ("photos 2017-2018", ["rome", "undated"]),
        ("photos from 2018 to 2019 in Europe", ["rome", "berlin", "madrid"]),
    ],
)
def test_kinds(library, question, expected):
    res = ask(collection(library), question)
    assert sorted(res.ids) == sorted(expected) and res.no_match is None and res.visual is None, (res.ids, res.reasoning)


@pytest.mark.parametrize(
    "question,emptied",
    [
        ("photos from Antarctica", "place 'from Antarctica' kept none of the 5 photo(s)"),
        ("photos tagged volcano", "keyword 'tagged volcano' kept none of the 5 photo(s)"),
        ("summer 2016", "date 'summer 2016' kept none of the 5 photo(s)"),
        ("Canon photos from Kenya", "camera 'Canon' kept none of the 1 photo(s) that matched the conditions before it"),
        ("fotos de Asia", "place 'de Asia' kept none of the 5 photo(s)"),
    ],
)
def test_abstention_names_the_condition_that_emptied_the_set(library, question, emptied):
    res = ask(collection(library), question)
    assert res.ids == [] and res.no_match == f"no photo matches: {emptied}"
    assert res.visual is None  # no visual guess over photos the conditions ruled out


def test_file_dates_can_be_turned_off(library):
    res = ask(collection(library, file_dates=False), "summer 2017")
    assert res.ids == [] and res.no_match.startswith("no photo matches: date 'summer 2017'")


def test_a_visual_part_is_the_ranking_cut_at_the_calibrated_threshold(library):
    # eyes that confirm every candidate (as a zero-shot category check does for every t-shirt): the answer is
    # still only the photos whose similarity clears mean + z sd over the collection, in similarity order
    phrase = np.array([0.2, 0.9, 0.0, 0.3, 0.0, 0, 0, 0], np.float32)
    res = ask(collection(library), "red t-shirts for women", phrase_emb=phrase, visual_z=1.0)
    assert res.ids == ["rome"] and res.visual["pass"] == "calibrated" and res.visual["candidates"] == 5
    res = ask(collection(library), "red t-shirts for women", phrase_emb=phrase, visual_z=1.0, visual_pass="checked")
    assert len(res.ids) == 5  # the eyes alone let everything through
    # within the filtered set: photos from Europe, ranked by the encoder, cut at the threshold
    res = ask(collection(library), "red t-shirts for women from Europe", phrase_emb=phrase, visual_z=0.0)
    assert res.ids == ["rome", "madrid"] and res.visual["candidates"] == 3  # berlin (similarity 0) is below the mean


def test_gazetteer_continents_and_names_in_other_languages():
    gaz = load_gazetteer()
    assert (
        gaz.continent("Kenya") == "Africa"
        and gaz.continent("Deutschland") == "Europe"
        and gaz.continent("Narnia") is None
    )
    assert place_match("Nakuru, Kenya", "Afrika", gaz) and not place_match("Arezzo, Italy", "Africa", gaz)
    assert place_match("Omaha, Nebraska, United States", "North America", gaz)
    assert not place_match("Omaha, Nebraska, United States", "South America", gaz)
    for name in ("Italia", "Italien", "Italie", "Itália"):
        assert place_match("Arezzo, Italy", name, gaz), name
    assert place_match("Colmenar Viejo, Spain", "España", gaz) and place_match("Colmenar Viejo, Spain", "Espagne", gaz)
    # a translation that is a large city's name is not a country name ("Granada" is Grenada in Spanish)
    assert not place_match("Saint George's, Grenada", "Granada", gaz)


def test_question_words_in_other_languages_do_not_break_parsing():
    gaz = load_gazetteer()
    d = decompose("fotos de Italia del 2008", gaz, facts=Facts())
    assert d.target == "" and sorted(c.kind for c in d.conditions) == ["date", "place"]
    p = parse_conditions("Bilder aus Deutschland", gaz, Facts())
    assert [c.expression() for c in p.conditions] == ['place ~ "Deutschland"'] and not p.unparsed


def test_the_vocabulary_check_is_trusted_only_for_what_it_can_confirm():
    from agentcir.framework.methods.imageseeker.visual import ClueVocabulary

    names, syns = ClueVocabulary.terms(["articles", "objects"])
    vocab = ClueVocabulary(names, syns, np.zeros((len(names), 4), np.float32))
    # a category and more (colour, whom it is for): the zero-shot check confirms only the category
    assert vocab.asks_more("red t-shirts for women") and vocab.asks_more("black dress")
    # the category alone, or no vocabulary term at all: the check tests what is asked
    assert not vocab.asks_more("t-shirts") and not vocab.asks_more("a hat") and not vocab.asks_more("helicopter")
