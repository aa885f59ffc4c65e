"""The real-photo composed benchmark builder: targets, determinism, user catalogs, bad inputs."""

import csv
import json
from itertools import product

import pytest

from agentcir.framework.datasets.builder import (
    BenchmarkSpec,
    ambiguous_edit,
    article_phrase,
    build_benchmark,
    parse_edit,
    phrase_edit,
    split_of,
    with_article,
)
from agentcir.framework.datasets.composed import ComposedFolder
from agentcir.framework.errors import InputError


def make_catalog(tmp_path, h, header=("id", "gender", "articleType", "baseColour", "usage", "subCategory"), rows=None):
    """A synthetic catalog: every (gender, type, colour, usage) combination twice, placeholder photos."""
    if rows is None:
        rows, n = [], 0
        for g, t, c, u in product(
            ["Men", "Women", "Unisex"],
            ["Tshirts", "Shirts", "Tops"],
            ["Black", "Navy Blue", "Blue", "Red", "NA"],
            ["Casual", "Formal"],
        ):
            for _ in range(2):
                rows.append([str(1000 + n), g, t, c, u, "Topwear"])
                n += 1
    with open(tmp_path / "cat.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    h.touch_all(tmp_path / "photos" / f"{r[0]}.jpg" for r in rows)
    return rows


def spec(tmp_path, **kw):
    base = dict(
        csv_path=str(tmp_path / "cat.csv"),
        images_dir=str(tmp_path / "photos"),
        out=str(tmp_path / "bench"),
        num_queries=60,
        split="all",
    )
    return BenchmarkSpec(**{**base, **kw})


def load(out):
    gallery = {r["id"]: r for r in csv.DictReader(open(out / "gallery.csv"))}
    queries = [json.loads(line) for line in open(out / "queries.jsonl")]
    return gallery, queries


def check_targets(gallery, queries, edits):
    """Every target has the new value and the reference's kept values; every such photo is a target."""
    for q in queries:
        e = q["edit"]
        col, keep = edits[e["kind"]]
        ref = gallery[q["reference_id"]]
        assert e["from"] == ref[col] and e["to"] != ref[col] and e["keep"] == {k: ref[k] for k in keep}
        assert q["reference_id"] not in q["targets"]
        want = {i for i, r in gallery.items() if r[col] == e["to"] and all(r[k] == ref[k] for k in keep)}
        assert set(q["targets"]) == want and len(q["targets"]) == len(want)


def test_targets_are_exact_and_the_reference_never_a_target(tmp_path, h):
    make_catalog(tmp_path, h)
    s = spec(tmp_path)
    summary = build_benchmark(s)
    gallery, queries = load(tmp_path / "bench")
    assert summary["queries"] == len(queries) == 60 and summary["gallery"] == len(gallery) == 180
    assert set(summary["per_edit"]) == {"article", "colour", "gender", "usage"}
    assert max(summary["per_edit"].values()) - min(summary["per_edit"].values()) <= 1  # balanced kinds
    check_targets(gallery, queries, s.edits)
    assert len({q["reference_id"] for q in queries}) == len(queries)  # each reference used once
    for q in queries:  # no ambiguous edits: NA values, navy blue <-> blue, unisex
        e = q["edit"]
        assert "NA" not in (e["from"], e["to"], *e["keep"].values())
        assert not ambiguous_edit(e["kind"], e["from"], e["to"])
    ds = ComposedFolder(ComposedFolder.Config(root=str(tmp_path / "bench")))
    assert len(ds.queries()) == 60 and len(ds.gallery_items()) == 180


def test_deterministic_by_seed(tmp_path, h):
    make_catalog(tmp_path, h)
    build_benchmark(spec(tmp_path, out=str(tmp_path / "a"), seed=3))
    build_benchmark(spec(tmp_path, out=str(tmp_path / "b"), seed=3))
    build_benchmark(spec(tmp_path, out=str(tmp_path / "c"), seed=4))
    for name in ("gallery.csv", "queries.jsonl", "README.md"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "queries.jsonl").read_bytes() != (tmp_path / "c" / "queries.jsonl").read_bytes()


def test_user_catalog_with_other_columns_via_edits(tmp_path, h):
    rows = [
        [f"p{i}", f"sku-{i}", cat, col]
        for i, (cat, col) in enumerate(product(["mug", "bowl", "plate"], ["white", "green", "grey"]))
        for _ in range(1)
    ]
    rows = [[r[0] + s, *r[1:]] for r in rows for s in ("a", "b")]
    make_catalog(tmp_path, h, header=("key", "sku", "category", "color"), rows=rows)
    edits = dict(parse_edit(e) for e in ("colour=color:category", "shape=category:color"))
    s = spec(
        tmp_path, id_column="key", edits=edits, image_pattern="{key}.jpg", num_queries=10, article_column="category"
    )
    summary = build_benchmark(s)
    gallery, queries = load(tmp_path / "bench")
    assert summary["per_edit"] == {"colour": 5, "shape": 5}
    check_targets(gallery, queries, edits)
    assert all(len(q["targets"]) == 2 for q in queries)
    texts = [q["text"] for q in queries if q["edit"]["kind"] == "shape"]
    assert all("shape" in t for t in texts)  # generic phrasing names the edit kind


def test_max_targets_and_gallery_size(tmp_path, h):
    make_catalog(tmp_path, h)
    # colour, article and gender edits have 4 targets here (2 usages x 2 copies), usage edits 8
    summary = build_benchmark(spec(tmp_path, max_targets=4, num_queries=500))
    _, queries = load(tmp_path / "bench")
    assert queries and all(len(q["targets"]) <= 4 for q in queries) and "usage" not in summary["per_edit"]
    summary = build_benchmark(spec(tmp_path, out=str(tmp_path / "small"), gallery_size=40, num_queries=10))
    gallery, queries = load(tmp_path / "small")
    assert len(gallery) == 40 and summary["skipped_rows"]["over gallery_size"] == 140
    check_targets(gallery, queries, spec(tmp_path).edits)


def test_split_and_copy_images(tmp_path, h):
    rows = make_catalog(tmp_path, h)
    summary = build_benchmark(spec(tmp_path, split="val", copy_images=True, num_queries=5))
    gallery, _ = load(tmp_path / "bench")
    assert set(gallery) == {r[0] for r in rows if split_of(r[0]) == "val"}
    assert summary["skipped_rows"]["other split"] == len(rows) - len(gallery)
    assert all(
        (tmp_path / "bench" / g["image"]).is_file() and g["image"].startswith("images/") for g in gallery.values()
    )


def test_phrasings():
    import random

    rng = random.Random(0)
    texts = {phrase_edit("colour", "Black", "Red", "Tshirts", rng) for _ in range(200)}
    assert len(texts) >= 12 and all("red" in t for t in texts)
    assert "a red t-shirt instead" in texts
    assert article_phrase("Casual Shoes") == "casual shoes" and article_phrase("Watches") == "watch"
    assert with_article("jeans") == "a pair of jeans" and with_article("umbrella") == "an umbrella"
    usage = {phrase_edit("usage", "Casual", "Formal", "Shirts", rng) for _ in range(200)}
    assert "I need one for the office" in usage
    assert ambiguous_edit("colour", "Navy Blue", "Blue") and not ambiguous_edit("colour", "Navy Blue", "Red")
    assert ambiguous_edit("gender", "Men", "Unisex") and not ambiguous_edit("article", "Casual Shoes", "Formal Shoes")


def test_bad_inputs(tmp_path, h):
    with pytest.raises(InputError, match="images folder .*nowhere' not found"):
        build_benchmark(spec(tmp_path, images_dir=str(tmp_path / "nowhere")))
    (tmp_path / "photos").mkdir()
    with pytest.raises(InputError, match="attributes CSV .*cat.csv' not found"):
        build_benchmark(spec(tmp_path))
    (tmp_path / "cat.csv").write_text("")
    with pytest.raises(InputError, match="cat.csv' is empty"):
        build_benchmark(spec(tmp_path))
    (tmp_path / "cat.csv").write_text("id,colour\n1,red\n")
    with pytest.raises(
        InputError,
        match=r"lacks column\(s\) articleType, baseColour, gender, subCategory, usage \(has: id, colour\); "
        r"map your columns with --id-column and --edit",
    ):
        build_benchmark(spec(tmp_path))
    (tmp_path / "cat.csv").write_text(
        "id,gender,articleType,baseColour,usage,subCategory\n1,Men,Shirts,Red,Casual,Top\n1,Men,Shirts,Blue,Casual,Top\n"
    )
    with pytest.raises(InputError, match="id '1' appears twice \\(lines 2 and 3\\)"):
        build_benchmark(spec(tmp_path))
    (tmp_path / "cat.csv").write_text(
        "id,gender,articleType,baseColour,usage,subCategory\n1,Men,Shirts,Red,Casual,Top,extra\n"
    )
    with pytest.raises(InputError, match="line 2: more fields than the header"):
        build_benchmark(spec(tmp_path))
    (tmp_path / "cat.csv").write_text(
        "id,gender,articleType,baseColour,usage,subCategory\n1,Men,Shirts,Red,Casual,Top\n2,Men,Shirts,Blue,Casual,Top\n"
    )
    with pytest.raises(InputError, match=r"only 0 usable photo\(s\) .*'photo missing': 2"):
        build_benchmark(spec(tmp_path))
    with pytest.raises(InputError, match="image pattern '{sku}.jpg' does not fit the CSV columns"):
        build_benchmark(spec(tmp_path, image_pattern="{sku}.jpg"))
    h.touch_all([tmp_path / "photos" / "1.jpg", tmp_path / "photos" / "2.jpg"])
    with pytest.raises(InputError, match="no attribute edit has a matching target"):
        build_benchmark(spec(tmp_path, max_targets=0, edits={"gender": ("gender", ("articleType",))}))
    with pytest.raises(InputError, match="edit 'colour' should read|should read KIND=COLUMN"):
        parse_edit("colour")
    with pytest.raises(InputError, match="column 'gender' cannot be both changed and kept"):
        build_benchmark(spec(tmp_path, edits={"g": ("gender", ("gender",))}))


@pytest.mark.shared
def test_real_fashion_products(shared_dir, tmp_path):
    src = shared_dir / "data" / "fashion-products"
    s = BenchmarkSpec(
        csv_path=str(src / "products.csv"),
        images_dir=str(src / "images"),
        out=str(tmp_path / "b"),
        num_queries=120,
        seed=7,
    )
    summary = build_benchmark(s)
    gallery, queries = load(tmp_path / "b")
    assert summary["queries"] == 120 and 800 < summary["gallery"] < 1200
    assert all(split_of(i) == "val" for i in gallery)
    check_targets(gallery, queries, s.edits)
    assert len({q["text"] for q in queries}) > 80  # varied phrasings


def test_cli_build_benchmark(tmp_path, h, capsys):
    from agentcir.cli import main

    rows = [
        [f"p{i}{s}", cat, col]
        for i, (cat, col) in enumerate(product(["mug", "bowl"], ["white", "green"]))
        for s in "ab"
    ]
    make_catalog(tmp_path, h, header=("key", "category", "color"), rows=rows)
    args = [
        "build-benchmark",
        "--csv",
        str(tmp_path / "cat.csv"),
        "--images",
        str(tmp_path / "photos"),
        "--out",
        str(tmp_path / "b"),
        "--split",
        "all",
        "--queries",
        "4",
        "--id-column",
        "key",
        "--image-pattern",
        "{key}.jpg",
        "--edit",
        "colour=color:category",
        "--edit",
        "shape=category:color",
        "--attribution",
        "My shop, CC0",
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["queries"] == 4 and summary["per_edit"] == {"colour": 2, "shape": 2}
    assert "My shop, CC0" in (tmp_path / "b" / "README.md").read_text()
    assert main([*args[:-6], "--edit", "colour"]) == 2
    assert "should read KIND=COLUMN[:KEEP1,KEEP2,...]" in capsys.readouterr().err
    assert main([*args[:-6]]) == 2  # default edits need columns this catalog lacks
    assert "lacks column(s) articleType, baseColour, gender, subCategory, usage" in capsys.readouterr().err
