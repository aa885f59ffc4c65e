"""DISBench on a fixture in the official format (queries.jsonl, metadata/{user}.jsonl, images/{user}/{photo}.jpg)."""

import json

import pytest

from agentcir.framework.datasets.disbench import DISBench
from agentcir.framework.errors import InputError

PHOTOS = {"u1@N01": [f"1{i:03d}" for i in range(6)], "u2@N02": [f"2{i:03d}" for i in range(4)]}
QUERIES = [
    {
        "query_id": "1",
        "user_id": "u1@N01",
        "query": "photos of the concert with the blue logo",
        "answer": ["1000", "1001"],
        "event_type": "intra-event",
    },
    {
        "query_id": "2",
        "user_id": "u1@N01",
        "query": "the same jacket two years apart",
        "answer": ["1002", "1004", "1005"],
        "event_type": "inter-event",
    },
    {
        "query_id": "3",
        "user_id": "u2@N02",
        "query": "the dog at the beach",
        "answer": ["2001"],
        "event_type": "intra-event",
    },
]


@pytest.fixture
def root(tmp_path, h):
    (tmp_path / "metadata").mkdir()
    for user, photos in PHOTOS.items():
        with open(tmp_path / "metadata" / f"{user}.jsonl", "w") as f:
            for n, p in enumerate(photos):
                f.write(
                    json.dumps(
                        {
                            "photo_id": p,
                            "metadata": {
                                "taken_time": f"2010-04-{10 + n} 13:52:57",
                                "latitude": 51.7,
                                "longitude": -1.2,
                                "address": "Oxford, United Kingdom",
                            },
                        }
                    )
                    + "\n"
                )
        h.touch_all(tmp_path / "images" / user / f"{p}.jpg" for p in photos if p != "2003")  # one photo lost
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    return tmp_path


def test_loader(root):
    ds = DISBench(DISBench.Config(root=str(root)))
    items = ds.gallery_items()
    assert len(items) == 9 and items[0].meta["user"] == "u1@N01" and items[0].meta["address"].startswith("Oxford")
    queries = ds.queries()
    assert [(q.id, q.user, q.meta["event_type"]) for q in queries] == [
        ("1", "u1@N01", "intra-event"),
        ("2", "u1@N01", "inter-event"),
        ("3", "u2@N02", "intra-event"),
    ]
    assert queries[1].targets == ["1002", "1004", "1005"] and not queries[0].reference
    assert "gallery 9 of 10 images (1 missing on disk, skipped; e.g. 2003)" in ds.subset_note()
    only = DISBench(DISBench.Config(root=str(root), users=["u2@N02"]))
    assert len(only.gallery_items()) == 3 and [q.id for q in only.queries()] == ["3"]
    assert "2 of users not selected (dataset.users)" in only.subset_note()


def test_set_metrics_restricted_to_the_user(root, h):
    ds = DISBench(DISBench.Config(root=str(root)))
    g = h.id_gallery(ds.gallery_items())
    queries = ds.queries()
    # answers as sets (whole candidate lists); q1 also names another user's photo, which is dropped
    answers = [["1000", "2001", "1001"], ["1002", "1003"], ["2000"]]
    m = ds.evaluate(h.candidates_from(answers, g), queries, g)
    f1_q2 = 2 * 0.5 * (1 / 3) / (0.5 + 1 / 3)
    assert m["EM"] == pytest.approx(100 / 3) and m["F1"] == pytest.approx(100 * (1 + f1_q2 + 0) / 3)
    assert m["EM_intra"] == 50.0 and m["F1_inter"] == pytest.approx(100 * f1_q2)
    assert m["Recall@1"] == pytest.approx(100 * (0.5 + 1 / 3 + 0) / 3)
    assert "Rankings restricted to the query user's photos; answer set = the whole candidate list." in ds.subset_note()


def test_answer_k_and_best_of(root, h):
    ds = DISBench(DISBench.Config(root=str(root), answer_k=1))
    g = h.id_gallery(ds.gallery_items())
    queries = ds.queries()
    m = ds.evaluate(h.candidates_from([["1000", "1001"], ["1002", "1004"], ["2001"]], g), queries, g)
    assert m["P"] == 100.0 and m["EM"] == pytest.approx(100 / 3)  # top 1 only: only q3 is exact
    full = DISBench(DISBench.Config(root=str(root)))
    run1 = {"1": ["1000", "1001"], "2": ["1003"], "3": ["2000"]}
    run2 = {"1": ["1000"], "2": ["1002", "1004", "1005"], "3": ["2000"]}
    best = full.best_of([run1, run2])
    assert best["EM@2"] == pytest.approx(200 / 3) and best["F1@2"] == pytest.approx(200 / 3)
    with pytest.raises(InputError, match="run 2 of 2 has no answer for query '3'"):
        full.best_of([run1, {"1": [], "2": []}])


def test_bad_files(tmp_path, root):
    with pytest.raises(InputError, match="queries.jsonl' not found"):
        DISBench(DISBench.Config(root=str(tmp_path / "metadata"))).queries()
    (root / "queries.jsonl").write_text(json.dumps({**QUERIES[0], "event_type": "both"}) + "\n")
    with pytest.raises(InputError, match="event_type must be intra-event or inter-event, got 'both'"):
        DISBench(DISBench.Config(root=str(root))).queries()
    (root / "queries.jsonl").write_text(json.dumps({k: v for k, v in QUERIES[0].items() if k != "answer"}) + "\n")
    with pytest.raises(InputError, match="queries.jsonl line 1: missing field 'answer'"):
        DISBench(DISBench.Config(root=str(root))).queries()
    (root / "queries.jsonl").write_text(json.dumps({**QUERIES[0], "user_id": "ghost"}) + "\n")
    with pytest.raises(InputError, match="metadata file .*ghost.jsonl' for user 'ghost' not found"):
        DISBench(DISBench.Config(root=str(root))).gallery_items()
