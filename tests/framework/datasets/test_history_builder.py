"""The DISBench-format photo-history builder: layout, determinism, multi-hop questions, bad inputs."""

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from agentcir.framework.datasets.disbench import DISBench
from agentcir.framework.datasets.history_builder import HistorySpec, build_history_benchmark
from agentcir.framework.errors import InputError

from ..imageseeker.conftest import make_labelled_set


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def _spec(src, out, **kw):
    return HistorySpec(
        out=str(out),
        csv_path=str(src / "photos.csv"),
        images_dir=str(src / "images"),
        min_photos=10,
        photos_per_event=5,
        queries_per_user=6,
        **kw,
    )


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_labelled_set(tmp_path_factory.mktemp("src"), users=3, per_user=30)


def test_layout_and_loader(src, tmp_path):
    summary = build_history_benchmark(_spec(src, tmp_path / "b", seed=1))
    assert summary["users"] == 3 and summary["photos"] == 90 and summary["queries"] > 0
    assert summary["intra-event"] > 0 and summary["inter-event"] > 0
    b = tmp_path / "b"
    meta = _jsonl(b / "metadata" / "user0.jsonl")
    m = meta[0]["metadata"]
    assert set(m) == {"taken_time", "latitude", "longitude", "accuracy", "address", "capturedevice"}
    assert (b / "images" / "user0" / f"{meta[0]['photo_id']}.jpg").is_symlink()
    ds = DISBench(DISBench.Config(root=str(b)))
    assert len(ds.gallery_items()) == 90 and len(ds.queries()) == summary["queries"]
    assert "Events (dates, cities, GPS) are synthetic" in (b / "README.md").read_text()


def test_same_seed_same_benchmark_other_seed_other(src, tmp_path):
    build_history_benchmark(_spec(src, tmp_path / "a", seed=5))
    build_history_benchmark(_spec(src, tmp_path / "b", seed=5))
    build_history_benchmark(_spec(src, tmp_path / "c", seed=6))
    read = lambda d: ((d / "queries.jsonl").read_text(), (d / "metadata" / "user1.jsonl").read_text())  # noqa: E731
    assert read(tmp_path / "a") == read(tmp_path / "b") != read(tmp_path / "c")


def test_questions_need_more_than_one_hop(src, tmp_path):
    build_history_benchmark(_spec(src, tmp_path / "b", seed=2))
    b = tmp_path / "b"
    events = {e["event"]: e for e in _jsonl(b / "events.jsonl")}
    label = {}
    for line in (src / "photos.csv").read_text().splitlines()[1:]:
        pid, _, lab = line.split(",")
        label[pid] = lab
    by_user = defaultdict(list)
    for e in events.values():
        by_user[e["user"]].append(e)
    for q in _jsonl(b / "queries.jsonl"):
        evs = by_user[q["user_id"]]
        with_clue = {e["event"] for e in evs if any(label[p] == q["clue"] for p in e["photos"])}
        with_target = {e["event"] for e in evs if any(label[p] == q["target"] for p in e["photos"])}
        want = sorted(p for ev in q["events"] for p in events[ev]["photos"] if label[p] == q["target"])
        assert sorted(q["answer"]) == want and want
        assert with_target - set(q["events"]), "the target also appears elsewhere: retrieving it alone over-answers"
        if q["event_type"] == "intra-event":
            (ev,) = q["events"]
            same_city = {e["event"] for e in evs if e["city"] == events[ev]["city"]}
            assert with_clue & same_city == {ev}, "clue + city identify exactly one event"
        else:
            assert set(q["events"]) == with_clue and len(with_clue) >= 2
    kinds = Counter(q["event_type"] for q in _jsonl(b / "queries.jsonl"))
    assert abs(kinds["intra-event"] - kinds["inter-event"]) <= 3


def test_copy_mode_and_bad_inputs(src, tmp_path):
    build_history_benchmark(_spec(src, tmp_path / "c", link="copy"))
    f = next((tmp_path / "c" / "images" / "user0").iterdir())
    assert f.is_file() and not f.is_symlink()
    with pytest.raises(InputError, match="give either --csv"):
        build_history_benchmark(HistorySpec(out=str(tmp_path / "x")))
    with pytest.raises(InputError, match="has no column 'sender'"):
        build_history_benchmark(_spec(src, tmp_path / "x", user_column="sender"))
    with pytest.raises(InputError, match="no user has at least 500 photos"):
        build_history_benchmark(
            HistorySpec(
                out=str(tmp_path / "x"),
                csv_path=str(src / "photos.csv"),
                images_dir=str(src / "images"),
                min_photos=500,
            )
        )
    with pytest.raises(InputError, match="link must be symlink or copy"):
        build_history_benchmark(_spec(src, tmp_path / "x", link="hard"))


def test_from_a_folder_with_metadata(tmp_path):
    """Folder mode: events are the photos' own days and cities, labels their XMP keywords."""
    from PIL import Image

    kw = {"a": ["hat", "shoes"], "b": ["dress", "shoes"], "c": ["hat", "dress"]}
    days = {"a": "2021-05-01", "b": "2021-06-02", "c": "2021-07-03"}
    gps = {"a": ("41,53.4N", "12,29.4E"), "b": ("48,51.4N", "2,21.1E"), "c": ("41,53.4N", "12,29.4E")}
    for day_key in kw:
        for i, k in enumerate(kw[day_key] * 2):
            p = tmp_path / "me" / f"{day_key}{i}.jpg"
            p.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8)).save(p)
            (tmp_path / "me" / f"{day_key}{i}.xmp").write_text(
                '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
                '<rdf:Description xmlns:xmp="http://ns.adobe.com/xap/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/" '
                f'xmlns:exif="http://ns.adobe.com/exif/1.0/" xmp:CreateDate="{days[day_key]}T1{i}:00:00" '
                f'exif:GPSLatitude="{gps[day_key][0]}" exif:GPSLongitude="{gps[day_key][1]}">'
                f"<dc:subject><rdf:Bag><rdf:li>{k}</rdf:li></rdf:Bag></dc:subject></rdf:Description></rdf:RDF></x:xmpmeta>"
            )
    s = build_history_benchmark(HistorySpec(out=str(tmp_path / "out"), folder=str(tmp_path), queries_per_user=4))
    assert s["users"] == 1 and s["photos"] == 12 and s["events"] == 3 and s["queries"] > 0
    q = _jsonl(tmp_path / "out" / "queries.jsonl")
    assert all(x["answer"] for x in q)
    meta = _jsonl(tmp_path / "out" / "metadata" / "me.jsonl")
    assert {m["metadata"]["address"] for m in meta} == {"Rome, Italy", "Paris, France"}
