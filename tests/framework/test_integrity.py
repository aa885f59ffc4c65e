"""Integrity of stored artefacts (issue 31 points 2, 3 and the read-only cache of point 10): each
damage the issue reports, reproduced, then the rerun that detects it and recovers (or the clear
error naming the file and the rebuilding command), never a traceback or a silently wrong result;
and the fast subset of ``benchmarks/integrity_sweep.py``."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.cache import MISSING, CallCache
from agentcir.framework.gallery import Gallery
from agentcir.framework.integrity import IntegrityError, sidecar
from agentcir.framework.recipe import compose
from agentcir.framework.runner import resolve_run_dir, run_recipe
from tests.full_disk import mount_tmpfs, umount

ROOT = Path(__file__).resolve().parents[2]


def toy_recipe(root: Path, *extra: str) -> dict:
    return compose(
        [
            "method=llm_then_rank",
            "encoder=toy",
            "llm=counting",
            "dataset.limit=10",
            f"run.root={root}",
            f"run.cache={root / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def same_results(a, b) -> bool:
    return (
        a.metrics["final"] == b.metrics["final"]
        and a.metrics["stages"] == b.metrics["stages"]
        and np.array_equal(a.candidates.ids, b.candidates.ids)
    )


# -- the call cache -------------------------------------------------------------------------------
def _fill(path: Path, n: int = 200) -> None:
    c = CallCache(path)
    for i in range(n):
        c.put(f"k{i}", {"text": f"a red shirt number {i}", "emb": np.arange(4, dtype=np.float32) + i})
    c.put("reply", "the red dress")
    c.close()


def test_three_bytes_changed_in_a_cached_reply_is_a_miss_with_one_warning(tmp_path, caplog):
    db = tmp_path / "cache.sqlite"
    _fill(db)
    conn = sqlite3.connect(db)
    v = conn.execute("SELECT value FROM calls WHERE key='reply'").fetchone()[0]
    conn.execute("UPDATE calls SET value=? WHERE key='reply'", (v.replace(b"red", b"tan"),))
    conn.commit()
    conn.close()
    c = CallCache(db)
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        assert c.get("reply") is MISSING  # not "the tan dress"
        assert c.get("k3")["text"] == "a red shirt number 3"
    assert [m for m in warnings_of(caplog) if str(db) in m and "fails its checksum" in m] and len(
        warnings_of(caplog)
    ) == 1
    c.put("reply", "the red dress")  # recomputed and stored again
    assert CallCache(db).get("reply") == "the red dress"


def test_broken_json_in_a_cached_value_is_recomputed_not_failed_forever(tmp_path):
    db = tmp_path / "cache.sqlite"
    _fill(db)
    conn = sqlite3.connect(db)
    # broken JSON whose checksum was (re)computed from the broken bytes: still a miss, never an exception
    from agentcir.framework.integrity import digest_bytes

    conn.execute(
        "UPDATE calls SET value=?, digest=? WHERE key='k5'", (b'{"text": "a re', digest_bytes(b'{"text": "a re'))
    )
    conn.commit()
    conn.close()
    c = CallCache(db)
    assert c.get("k5") is MISSING and "k5" not in c  # removed: the next run stores the recomputed value


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "middle"])
def test_a_damaged_sqlite_file_is_moved_aside_and_rebuilt_keeping_what_reads(tmp_path, caplog, damage):
    db = tmp_path / "cache.sqlite"
    _fill(db, 2000)
    size = db.stat().st_size
    if damage == "truncate":
        os.truncate(db, size // 2)
    else:
        with open(db, "r+b") as f:
            f.seek(0 if damage == "overwrite" else size // 2)
            f.write(os.urandom(8192))
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        c = CallCache(db)
        got = [c.get(f"k{i}") for i in range(2000)]  # never sqlite3.DatabaseError
    moved = [m for m in warnings_of(caplog) if "is damaged (sqlite:" in m and "moved aside to" in m]
    assert len(moved) == 1 and str(db) in moved[0]
    assert list(tmp_path.glob("cache.sqlite.damaged-*"))
    kept = sum(v is not MISSING for v in got)
    assert all(v is MISSING or v["text"] == f"a red shirt number {i}" for i, v in enumerate(got))
    if damage != "overwrite":
        assert kept > 100  # what could be read is kept
    n = len(c)
    assert n >= kept
    c.put("new", "value")
    assert CallCache(db).get("new") == "value" and len(CallCache(db)) == n + 1


def test_a_cache_from_before_checksums_gets_them_on_first_open(tmp_path):
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE calls (key TEXT PRIMARY KEY, component TEXT, op TEXT, value BLOB NOT NULL, created REAL NOT NULL)"
    )
    conn.execute("INSERT INTO calls VALUES ('a', '', '', ?, 0)", (b'"hello"',))
    conn.commit()
    conn.close()
    assert CallCache(db).get("a") == "hello"
    conn = sqlite3.connect(db)
    v = conn.execute("SELECT value FROM calls").fetchone()[0]
    conn.execute("UPDATE calls SET value=?", (v.replace(b"hello", b"jello"),))
    conn.commit()
    conn.close()
    assert CallCache(db).get("a") is MISSING  # later damage is caught


def test_a_read_only_cache_is_used_read_only(plugin_path, tmp_path, caplog):
    ro = tmp_path / "ro"
    ok, why = mount_tmpfs(ro, "4m")
    if not ok:
        pytest.skip(f"needs a read-only file system ({why})")
    try:
        _fill(ro / "cache.sqlite", 10)
        import subprocess

        assert subprocess.run(["mount", "-o", "remount,ro", str(ro)], capture_output=True, check=False).returncode == 0
        with caplog.at_level(logging.WARNING, logger="agentcir"):
            c = CallCache(ro / "cache.sqlite")
            assert c.read_only and c.get("reply") == "the red dress"
            c.put("new", "value")  # not stored, no error
            assert c.get("new") is MISSING
        assert sum("is read-only" in m and "new ones are not stored" in m for m in warnings_of(caplog)) == 1
        # a run with its cache in a read-only folder: the calls are made, not stored, the run completes
        res = run_recipe(toy_recipe(tmp_path / "runs", f"run.cache={ro / 'fresh.sqlite'}"))
        assert res.metrics["final"]
    finally:
        umount(ro)


# -- run directories ----------------------------------------------------------------------------
@pytest.fixture
def toy_run(plugin_path, tmp_path):
    r = toy_recipe(tmp_path / "runs")
    ref = run_recipe(r)
    return r, ref, resolve_run_dir(r)


def _rerun(r, caplog):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        res = run_recipe(r)
    return res, warnings_of(caplog)


@pytest.mark.parametrize(
    "damage",
    [
        "npz_truncated",
        "npz_flipped",
        "cands_truncated",
        "done_garbage",
        "done_edited",
        "trace_line_edited",
        "recipe_garbage",
        "inputs_garbage",
        "captions",
    ],
)
def test_damaged_run_files_are_recomputed_with_one_warning(toy_run, caplog, damage):
    r, ref, d = toy_run
    st = d / "stages"
    target = {
        "npz_truncated": st / "rank.arrays.npz",
        "npz_flipped": st / "rank.candidates.npz",
        "cands_truncated": st / "rank.candidates.npz",
        "done_garbage": st / "rewrite.done",
        "done_edited": st / "rank.done",
        "trace_line_edited": st / "rewrite.jsonl",
        "recipe_garbage": d / "recipe.yaml",
        "inputs_garbage": d / "inputs.json",
    }.get(damage)
    if damage in ("npz_truncated", "cands_truncated"):
        target = target if target.is_file() else st / "rank.candidates.npz"
        os.truncate(target, target.stat().st_size // 2)
    elif damage == "npz_flipped":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x10
        target.write_bytes(bytes(data))
    elif damage in ("done_garbage", "recipe_garbage", "inputs_garbage"):
        target.write_bytes(b"\x00garbage: [{")
    elif damage == "done_edited":
        rec = json.loads(target.read_text())
        rec["stats"]["calls"] += 5
        target.write_text(json.dumps(rec))
    elif damage == "trace_line_edited":
        lines = target.read_text().splitlines(keepends=True)
        lines[3] = lines[3].replace("edited", "edites")
        target.write_text("".join(lines))
    elif damage == "captions":  # the llm_then_rank method uses none: write some, damage them, read them
        g = ref.gallery
        g.save_captions("cap", [f"caption {i}" for i in range(len(g))])
        target = g.root / "captions" / "cap.jsonl"
        target.write_text(target.read_text().replace("caption 7", "caption 8"))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="agentcir"):
            assert Gallery.open(g.root).captions("cap") is None  # recomputed by the caption stage
        assert any(str(target) in m for m in warnings_of(caplog))
        return
    res, warned = _rerun(r, caplog)
    assert same_results(res, ref)
    named = [m for m in warned if target.name in m]
    assert len(named) == 1, warned
    res, warned = _rerun(r, caplog)  # recovered: the next rerun finds nothing to warn about
    assert same_results(res, ref) and not warned


# -- galleries ----------------------------------------------------------------------------------
def _flip_every_7th(p: Path) -> None:
    a = np.load(p)
    a.view(np.uint32).reshape(-1)[::7] ^= 1 << 3
    assert np.isfinite(a).all()
    with open(p, "r+b") as f:
        f.seek(p.stat().st_size - a.nbytes)
        f.write(a.tobytes())


@pytest.mark.parametrize("damage", ["mantissa", "truncated", "swapped_rows", "gallery_json"])
def test_a_damaged_gallery_is_a_clear_error_when_opened_and_rebuilt_by_a_build(toy_run, caplog, damage):
    r, ref, _ = toy_run
    g = ref.gallery.root
    if damage == "mantissa":
        f = g / "image_emb.npy"
        _flip_every_7th(f)
    elif damage == "truncated":
        f = g / "image_emb.npy"
        os.truncate(f, f.stat().st_size * 3 // 4)
    elif damage == "swapped_rows":
        f = g / "items.jsonl"
        lines = f.read_text().splitlines(keepends=True)
        lines[2], lines[3] = lines[3], lines[2]
        f.write_text("".join(lines))
    else:
        f = g / "gallery.json"
        f.write_text(f.read_text().replace('"dim": 24', '"dim": 25'))
    with pytest.raises(IntegrityError) as e:
        Gallery.open(g)
    msg = str(e.value)
    assert f"'{f}'" in msg and "rerun the `agentcir run` command of dataset demo: it rebuilds the gallery" in msg
    assert "mmap length" not in msg
    res, warned = _rerun(r, caplog)  # the run rebuilds the gallery, results as before
    assert same_results(res, ref)
    assert sum(str(f) in m for m in warned) == 1, warned
    assert Gallery.open(g).ids == ref.gallery.ids


def test_a_folder_gallery_names_the_index_command(plugin_path, tmp_path, image_folder):
    from agentcir.framework.gallery import items_from_folder
    from agentcir.framework.recipe import ComponentPool

    enc = ComponentPool(compose(["encoder=toy"])).get("encoder")
    items, _ = items_from_folder(image_folder)
    g = Gallery.build(tmp_path / "g", items, enc, source=str(image_folder))
    _flip_every_7th(g.root / "image_emb.npy")
    with pytest.raises(
        IntegrityError, match=rf"rebuild it with: agentcir index '{image_folder}' --out '{g.root}' encoder=toy"
    ):
        Gallery.open(g.root)
    again = Gallery.build(tmp_path / "g", items, enc, source=str(image_folder))  # what `agentcir index` runs
    assert np.array_equal(np.asarray(again.image_emb), np.asarray(Gallery.open(g.root).image_emb))


def test_a_gallery_from_before_checksums_is_accepted_and_sealed_on_first_open(
    plugin_path, tmp_path, image_folder, caplog
):
    from agentcir.framework.gallery import items_from_folder
    from agentcir.framework.recipe import ComponentPool

    enc = ComponentPool(compose(["encoder=toy"])).get("encoder")
    items, _ = items_from_folder(image_folder)
    g = Gallery.build(tmp_path / "g", items, enc)
    for name in ("gallery.json", "items.jsonl", "image_emb.npy"):
        sidecar(g.root / name).unlink()
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        assert len(Gallery.open(g.root)) == len(g)
    assert any("was built before its files carried checksums" in m for m in warnings_of(caplog))
    assert all(sidecar(g.root / n).is_file() for n in ("gallery.json", "items.jsonl", "image_emb.npy"))
    _flip_every_7th(g.root / "image_emb.npy")  # later damage is caught
    with pytest.raises(IntegrityError):
        Gallery.open(g.root)
    # a legacy gallery whose arrays do not match its item count is refused even without checksums
    for name in ("gallery.json", "items.jsonl", "image_emb.npy"):
        sidecar(g.root / name).unlink()
    os.truncate(g.root / "image_emb.npy", (g.root / "image_emb.npy").stat().st_size - 4 * 24)
    with pytest.raises(IntegrityError, match="image_emb.npy"):
        Gallery.open(g.root)


def test_set_meta_keeps_items_checksum_current(plugin_path, tmp_path, image_folder):
    from agentcir.framework.gallery import items_from_folder
    from agentcir.framework.recipe import ComponentPool

    enc = ComponentPool(compose(["encoder=toy"])).get("encoder")
    items, _ = items_from_folder(image_folder)
    g = Gallery.build(tmp_path / "g", items, enc)
    assert g.set_meta({g.items[0].id: {"album": "x"}}) == 1
    assert Gallery.open(g.root).items[0].meta == {"album": "x"}


def test_sharded_gallery_and_ann_index_damage(plugin_path, tmp_path, image_folder, caplog):
    pytest.importorskip("faiss")
    from agentcir.framework.galleries import open_gallery
    from agentcir.framework.gallery import items_from_folder
    from agentcir.framework.recipe import ComponentPool
    from agentcir.framework.scale import scale_settings
    from agentcir.framework.scale.ann import build_indexes
    from agentcir.framework.scale.embed import build_sharded

    enc = ComponentPool(compose(["encoder=toy"])).get("encoder")
    items, _ = items_from_folder(image_folder)
    scale = scale_settings({"shards": 2})
    g = build_sharded(tmp_path / "g", items, enc, scale)
    _flip_every_7th(g.root / "shard-00001" / "image_emb.npy")
    with pytest.raises(IntegrityError, match=r"shard-00001/image_emb.npy.*rebuild it with"):
        open_gallery(g.root)
    g2 = build_sharded(tmp_path / "g", items, enc, scale)  # the damaged shard is rebuilt
    assert g2.ids == g.ids
    ann = scale_settings({"shards": 2, "search": "hnsw"})
    build_indexes(open_gallery(g.root, scale=ann), ann, progress=False)
    f = next((g.root / "ann").glob("*/shard-00000.faiss"))
    os.truncate(f, f.stat().st_size - 100)
    from agentcir.framework.scale.ann import load_index

    with pytest.raises(IntegrityError, match=r"shard-00000.faiss.*agentcir build-index"):
        load_index(f, 16, 64)
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        infos = build_indexes(open_gallery(g.root, scale=ann), ann, progress=False)
    assert [i.get("reused", False) for i in infos] == [False, True]
    load_index(f, 16, 64)


# -- sweeps ---------------------------------------------------------------------------------------
def test_sweep_summary_reads_the_jobs_metrics_and_survives_a_damaged_manifest(plugin_path, tmp_path, caplog):
    from agentcir.framework.sweep import run_sweep

    ov = [
        "method=llm_then_rank",
        "encoder=toy",
        "llm=counting",
        "dataset.limit=6",
        "method.top_k=5,10",
        f"run.root={tmp_path / 'runs'}",
        f"run.cache={tmp_path / 'cache.sqlite'}",
        "run.progress=false",
    ]
    ref = run_sweep(ov, name="s")
    mfile = ref.dir / "manifest.json"
    m = json.loads(mfile.read_text())
    true = m["jobs"][0]["metrics"]["R@10"]
    m["jobs"][0]["metrics"]["R@10"] = true + 10
    mfile.write_text(json.dumps(m))
    res = run_sweep(ov, name="s")
    assert res.jobs[0]["metrics"]["R@10"] == true
    assert (
        f"{true}" in (ref.dir / "summary.csv").read_text()
        and f"{true + 10}" not in (ref.dir / "summary.csv").read_text()
    )
    os.truncate(mfile, mfile.stat().st_size // 2)  # a damaged manifest: no JSONDecodeError
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        res = run_sweep(ov, name="s")
    assert [j["metrics"] for j in res.jobs] == [j["metrics"] for j in ref.jobs]
    assert sum(str(mfile) in w for w in warnings_of(caplog)) == 1
    jm = Path(res.jobs[1]["dir"]) / "metrics.json"  # a job's own metrics.json edited: the job runs again
    d = json.loads(jm.read_text())
    d["final"]["R@10"] += 10
    jm.write_text(json.dumps(d))
    res = run_sweep(ov, name="s")
    assert [j["metrics"] for j in res.jobs] == [j["metrics"] for j in ref.jobs]


# -- the fast subset of the benchmark -------------------------------------------------------------
@pytest.fixture(scope="module")
def bench_module():
    spec = importlib.util.spec_from_file_location("integrity_sweep", ROOT / "benchmarks" / "integrity_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["integrity_sweep"] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("integrity_sweep", None)


@pytest.mark.slow
def test_integrity_sweep_fast_subset(bench_module, plugin_path, tmp_path):
    """Real `agentcir run` processes on a toy recipe: the named damages of the issue and seeded random
    flips/truncations; no wrong result, no traceback, every one recovered by the rerun."""
    bm = bench_module
    bench = bm.Bench(
        tmp_path,
        run=("dataset.limit=10", "method=llm_then_rank", "llm=counting"),
        sweep=("dataset.limit=6", "method=llm_then_rank", "llm=counting", "method.top_k=5,10"),
        extra=("encoder=toy",),
        pythonpath=(str(plugin_path),),
        seed=0,
    )
    named = {s.damage + " " + s.artefact: s for s in bm.named_scenarios()}
    pick = [
        named[k]
        for k in (
            "3 bytes of a stored LLM reply changed cache.sqlite value",
            "truncated to half cache.sqlite",
            "truncated to half stage candidates (.npz)",
            "garbage stage .done marker",
            "a mantissa bit flipped in every 7th float gallery image_emb.npy",
            "two rows swapped gallery items.jsonl",
            "a job's metric edited sweep manifest.json",
        )
    ]
    rnd = bm.random_scenarios(1)
    rows = bench.sweep(pick + [rnd[0], rnd[1], rnd[10], rnd[11]])
    table = bm.table(rows)
    for r in rows:
        assert r.wrong == 0 and r.tracebacks == 0 and r.recovered == "yes", table
    assert all(r.detected == "yes" for r in rows[: len(pick)]), table
