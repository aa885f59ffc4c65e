"""The Ray engine on a local Ray (2 CPUs, a small object store): shard actors (exact search equal
to the single process, an actor killed is restarted or the query names the shard) and the Ray
Data embedding job (identical to engine=local; a killed job reruns only its unfinished shards)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from agentcir import kernels
from agentcir.framework.galleries import open_gallery
from agentcir.framework.recipe import ComponentPool, compose
from agentcir.framework.scale.embed import build_sharded
from agentcir.framework.shards import ShardError

ray = pytest.importorskip("ray")

# one pytest-xdist worker runs every Ray test in turn (`--dist loadgroup`): the two-node test's
# ray.cluster_utils.Cluster names itself in /tmp/ray/ray_current_cluster, which a plain ray.init()
# elsewhere would join
pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "agentcir" / "data" / "demo"


@pytest.fixture(scope="module")
def local_ray(plugin_path):
    """One local Ray for the module; its workers import this checkout and the test plugin."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(plugin_path)] + ([old] if old else []))
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=200 * 2**20,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )  # loopback only
    try:
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@contextlib.contextmanager
def address_file(text: str | None = None):
    """Ray's /tmp/ray/ray_current_cluster, set to ``text`` for the block (a ray.cluster_utils
    Cluster writes it too) and put back as it was after."""
    from ray._common.utils import get_ray_address_file

    f = Path(get_ray_address_file(None))
    old = f.read_text() if f.is_file() else None
    if text is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    try:
        yield f
    finally:
        if old is None:
            f.unlink(missing_ok=True)
        else:
            f.write_text(old)


def demo_items(n: int | None = None):
    from agentcir.framework.gallery import items_from_folder

    its, _ = items_from_folder(DEMO / "images" if (DEMO / "images").is_dir() else DEMO)
    return its[:n] if n else its


def toy_recipe(tmp_path, *extra):
    return compose(
        [
            "encoder=toy",
            "dataset=demo",
            "dataset.limit=6",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


def test_ray_embedding_equals_local_and_actor_search_equals_single(local_ray, tmp_path, image_folder, caplog):
    from agentcir.framework.gallery import items_from_folder

    recipe = toy_recipe(tmp_path)
    enc = ComponentPool(recipe).get("encoder")
    its = demo_items(150) + items_from_folder(image_folder)[0]  # + a broken JPEG, in the last shard
    local = build_sharded(tmp_path / "local", its, enc, {"shards": 3}, progress=False)
    with caplog.at_level("INFO", logger="agentcir"):
        viaray = build_sharded(
            tmp_path / "ray", its, enc, {"engine": "ray", "shards": 3}, recipe=recipe, progress=False
        )
    assert "on 2 encoder actor(s)" in caplog.text  # the default fills the cluster's 2 CPUs
    assert viaray.ids == local.ids and viaray.skipped == local.skipped
    assert [(x["shard"], Path(x["path"]).name) for x in viaray.skipped] == [("shard-00002", "broken.jpg")]
    for s in range(3):
        a = np.load(local.shard_dir(s) / "image_emb.npy")
        b = np.load(viaray.shard_dir(s) / "image_emb.npy")
        np.testing.assert_array_equal(a, b)  # bit-identical
    single = open_gallery(tmp_path / "local")  # engine local
    q = np.asarray(single.image_emb[[0, 50, 120]], np.float32)
    p = np.stack([q, q[::-1], np.roll(q, 1, axis=0)], axis=1)
    try:
        for k in (5, 40):
            a = kernels.cosine_topk(q, single.image_emb, k, exclude=np.array([0, 50, 120]))
            b = kernels.cosine_topk(q, viaray.image_emb, k, exclude=np.array([0, 50, 120]))
            np.testing.assert_array_equal(a.ids, b.ids)
            np.testing.assert_array_equal(a.scores, b.scores)
        a = kernels.octopus_topk(
            q, p, q[::-1], single.image_emb, 10, visual=q, captions=single.image_emb, exclude=np.array([0, 50, 120])
        )
        b = kernels.octopus_topk(
            q, p, q[::-1], viaray.image_emb, 10, visual=q, captions=viaray.image_emb, exclude=np.array([0, 50, 120])
        )
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_allclose(a.entropy, b.entropy, rtol=1e-5)
    finally:
        viaray.close()


@pytest.mark.slow
def test_onnx_encoder_actors_use_their_cpu_share_and_embed_as_local(local_ray, tmp_path):
    """onnxruntime sizes its thread pool by the node's cores, not by Ray's OMP_NUM_THREADS: each
    1-CPU encoder actor must run it with 1 thread (two actors with 2 spinning threads each ran at
    half speed on 2 cores), and the job still writes what a local build writes."""
    pytest.importorskip("onnxruntime", reason="needs the onnx extra: pip install 'agentcir[onnx]'")
    pytest.importorskip("onnx", reason="needs the onnx extra: pip install 'agentcir[onnx]'")
    from agentcir.components.encoders.onnx import export_onnx
    from agentcir.framework.scale import scale_settings
    from agentcir.framework.scale.embed import EncodeBatch, actor_encoder_node
    from agentcir.registry import ENCODERS

    path = export_onnx(ENCODERS.build("catalog", {}), tmp_path / "onnx")
    recipe = compose(["encoder=onnx", f"encoder.path={path}"])
    enc = ComponentPool(recipe).get("encoder")
    scale = scale_settings({"engine": "ray", "shards": 2})
    actor = EncodeBatch(encoder_node=actor_encoder_node(recipe["encoder"], scale), identity=enc.identity)
    assert actor.encoder.session("image").get_session_options().intra_op_num_threads == 1  # what each actor runs
    its = demo_items(96)
    local = build_sharded(tmp_path / "local", its, enc, {"shards": 2}, progress=False)
    viaray = build_sharded(tmp_path / "ray", its, enc, scale, recipe=recipe, progress=False)
    assert viaray.ids == local.ids
    for s in range(2):
        np.testing.assert_array_equal(
            np.load(local.shard_dir(s) / "image_emb.npy"), np.load(viaray.shard_dir(s) / "image_emb.npy")
        )
    viaray.close()


def test_method_runs_on_ray_shards(local_ray, plugin_path, tmp_path):
    single = run = None
    from agentcir.framework.runner import run_recipe

    single = run_recipe(toy_recipe(tmp_path, "method=octopus", "method.gate=0"))
    run = run_recipe(toy_recipe(tmp_path, "method=octopus", "method.gate=0", "+scale=ray", "scale.shards=3"))
    try:
        np.testing.assert_array_equal(np.asarray(single.candidates.ids), np.asarray(run.candidates.ids))
    finally:
        run.gallery.close()


def test_dead_shard_actor_is_restarted_or_named(local_ray, tmp_path):
    recipe = toy_recipe(tmp_path)
    enc = ComponentPool(recipe).get("encoder")
    build_sharded(tmp_path / "g", demo_items(60), enc, {"shards": 3}, progress=False)
    q = np.asarray(open_gallery(tmp_path / "g").image_emb[[1, 2]], np.float32)
    want = kernels.cosine_topk(q, open_gallery(tmp_path / "g").image_emb, 5)

    g = open_gallery(tmp_path / "g", scale={"engine": "ray", "shards": 3, "restarts": 1})
    assert np.array_equal(kernels.cosine_topk(q, g.image_emb, 5).ids, want.ids)
    workers = g.search_engine.workers
    ray.kill(workers.actors[1], no_restart=False)  # dies; Ray restarts it
    for _ in range(50):  # the next query is answered in full
        try:
            got = kernels.cosine_topk(q, g.image_emb, 5)
            break
        except ShardError:
            time.sleep(0.1)
    np.testing.assert_array_equal(got.ids, want.ids)
    ray.kill(workers.actors[2], no_restart=True)  # dies for good, once Ray has acted on the kill
    for _ in range(100):  # ray.kill is asynchronous: a query sent at once may still be answered
        try:
            kernels.cosine_topk(q, g.image_emb, 5)
        except ShardError as e:
            assert "shard 'shard-00002'" in str(e)
            break
        time.sleep(0.1)
    else:
        pytest.fail("a shard actor killed with no_restart=True still answered 10 s later")
    g.close()


@pytest.mark.slow
def test_shard_actors_sit_evenly_on_the_cluster_nodes(local_ray, tmp_path):
    """On a cluster of two Ray nodes (ray.cluster_utils.Cluster on loopback, in a child process)
    the 8 shard actors sit evenly on both nodes (Ray's own placement of these num_cpus=0 actors
    was uneven: 5 and 3, with or without SPREAD; 6 of 6 on one node in a probe), each with its
    node's kernel threads, and answer exactly."""
    root = tmp_path / "g"
    build_sharded(
        root, demo_items(80), ComponentPool(toy_recipe(tmp_path)).get("encoder"), {"shards": 8}, progress=False
    )
    single = open_gallery(root).image_emb
    q = np.asarray(single[[3, 40]], np.float32)
    want = kernels.cosine_topk(q, single, 5).ids.tolist()
    code = f"""
import json, os
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"      # every node on loopback
import numpy as np, ray
from ray.cluster_utils import Cluster
from agentcir import kernels
from agentcir.framework.galleries import open_gallery
c = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1, "include_dashboard": False}})
c.add_node(num_cpus=1)
c.wait_for_nodes()
try:
    g = open_gallery({str(root)!r}, scale={{"engine": "ray", "shards": 8, "address": c.address}})
    ids = kernels.cosine_topk(np.array({q.tolist()!r}, np.float32), g.image_emb, 5).ids.tolist()
    import numba
    where = ray.get([a.__ray_call__.remote(lambda self: (ray.get_runtime_context().get_node_id(),
                                                           self._hold_threads() or numba.get_num_threads()))
                     for a in g.search_engine.workers.actors])
    print(json.dumps({{"ids": ids, "nodes": [w[0] for w in where], "threads": [w[1] for w in where],
                      "cluster": len(ray.nodes())}}))
    g.close()
finally:
    ray.shutdown()
    c.shutdown()
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    with address_file():  # the Cluster writes it: put back after
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["cluster"] == 2 and len(got["nodes"]) == 8
    assert sorted(Counter(got["nodes"]).values()) == [4, 4]  # the nodes hold 4 shards each
    assert got["threads"] == [1] * 8  # a 1-CPU node's CPU over its 4 shards, at least 1 (of the machine's 2)
    assert got["ids"] == want


def test_killed_embedding_job_reruns_only_unfinished_shards(local_ray, plugin_env, tmp_path):
    """`agentcir index --engine ray --shards 4` killed once its first shard is written: the rerun
    keeps that shard's files and embeds the rest."""
    out = tmp_path / "g"
    folder = DEMO / "images" if (DEMO / "images").is_dir() else DEMO
    cmd = [
        sys.executable,
        "-m",
        "agentcir.cli",
        "index",
        str(folder),
        "--out",
        str(out),
        "--engine",
        "ray",
        "--shards",
        "4",
        "--no-metadata",
        "-q",
        "encoder=toy",
        "+scale=ray",
        "scale.num_cpus_total=1",
        "scale.object_store_mb=100",
    ]
    env = dict(plugin_env, PYTHONPATH=os.pathsep.join([str(ROOT), plugin_env.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    first = out / "shard-00000" / "gallery.json"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if first.is_file() or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert first.is_file(), proc.communicate()[1].decode()[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("shard-*/gallery.json")}
    assert "shard-00000" in done and not (out / "gallery.json").is_file()
    recipe = toy_recipe(tmp_path, "+scale=ray", "scale.shards=4")
    enc = ComponentPool(recipe).get("encoder")
    g = build_sharded(out, demo_items(), enc, recipe["scale"], recipe=recipe, progress=False)
    for name, mtime in done.items():
        assert (out / name / "gallery.json").stat().st_mtime_ns == mtime  # finished shards kept as they were
    local = build_sharded(tmp_path / "local", demo_items(), enc, {"shards": 4}, progress=False)
    assert g.ids == local.ids and len(g.shards) == 4
    np.testing.assert_array_equal(np.asarray(g.image_emb), np.asarray(local.image_emb))
    assert json.loads((out / "gallery.json").read_text())["n"] == len(local)


def test_without_an_address_a_local_ray_starts_even_past_a_stale_cluster_file():
    """No address: engine=ray starts its own local Ray, as documented, even when a killed `ray
    start` left /tmp/ray/ray_current_cluster naming a cluster that is gone (a plain ray.init()
    joins that one, and fails)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    code = (
        "from agentcir.framework.scale import init_ray\n"
        "r = init_ray({'num_cpus_total': 1})\nprint('CPUs', r.cluster_resources()['CPU'])\nr.shutdown()"
    )
    with address_file("127.0.0.1:9"):  # loopback's discard port: no cluster there
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CPUs 1.0" in done.stdout


def test_index_command_joins_a_running_cluster_by_address(local_ray, plugin_env, tmp_path):
    """`agentcir index --engine ray --address A` joins the cluster at A (the module's local Ray)
    instead of starting one, and writes the gallery a local build writes. Its encoder actors embed
    the domain check's reference photos too: the command's own process embeds nothing."""
    from agentcir.framework.domain import REFERENCE_FILE, reference_images

    out, log = tmp_path / "g", tmp_path / "embedded.log"
    folder = DEMO / "images" if (DEMO / "images").is_dir() else DEMO
    address = local_ray.get_runtime_context().gcs_address
    env = dict(plugin_env, PYTHONPATH=os.pathsep.join([str(ROOT), plugin_env.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)
    toy = ["encoder=toy", f"encoder.domain={folder}", f"encoder.log={log}"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentcir.cli",
            "index",
            str(folder),
            "--out",
            str(out),
            "--engine",
            "ray",
            "--address",
            address,
            "--shards",
            "2",
            "--no-metadata",
            *toy,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"Connecting to existing Ray cluster at address: {address}" in done.stderr
    assert "on 2 encoder actor(s)" in done.stderr  # the joined cluster's 2 CPUs
    assert "domain check: encoder 'toy'" in done.stdout
    who = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert "cli.py" not in who and sum(who.values()) > 0, who  # every batch on an actor, none in the command
    enc = ComponentPool(compose(toy)).get("encoder")
    refs = reference_images(enc)
    with np.load(out / REFERENCE_FILE) as z:  # as the command's process would embed them
        np.testing.assert_array_equal(z["emb"], enc.encode_images([str(p) for p in refs], progress=False))
    recipe = toy_recipe(tmp_path)
    enc = ComponentPool(recipe).get("encoder")
    local = build_sharded(tmp_path / "local", demo_items(), enc, {"shards": 2}, progress=False)
    g = open_gallery(out)
    assert g.ids == local.ids
    np.testing.assert_array_equal(np.asarray(g.image_emb), np.asarray(local.image_emb))


def test_an_incremental_update_of_a_ray_sharded_gallery(local_ray, tmp_path):
    """A sharded gallery updated with the Ray engine's settings (new photos embedded, a deleted one
    dropped, the rest reused) is searched by Ray shard actors as a fresh build would be. (The first
    build runs in this process: a Ray Data job's start would dominate the test; the Ray build
    itself is tested above.)"""
    import shutil

    from agentcir.framework.gallery import items_from_folder
    from agentcir.framework.library import index_into
    from agentcir.framework.scale import scale_settings

    recipe = toy_recipe(tmp_path)
    enc = ComponentPool(recipe).get("encoder")
    pool = sorted((DEMO / "images").iterdir())
    folder = tmp_path / "photos"
    folder.mkdir()
    for p in pool[:24]:
        shutil.copy(p, folder / p.name)
    scale = scale_settings({"engine": "ray", "shards": 2})
    g, change = index_into(
        tmp_path / "g",
        items_from_folder(folder)[0],
        enc,
        scale={**scale, "engine": "local"},
        recipe=recipe,
        progress=False,
    )
    assert change is None and len(g) == 24
    for p in pool[24:27]:
        shutil.copy(p, folder / p.name)
    (folder / pool[3].name).unlink()
    items = items_from_folder(folder)[0]
    g, change = index_into(tmp_path / "g", items, enc, scale=scale, recipe=recipe, progress=False)
    try:
        assert (len(change.added), len(change.removed), change.embedded, change.reused) == (3, 1, 3, 23)
        assert len(g.shards) == 2 and len(g) == 26 and pool[3].stem not in g.ids
        fresh = build_sharded(tmp_path / "fresh", items, enc, {"shards": 2}, progress=False)
        assert g.ids == fresh.ids
        for s in range(2):
            np.testing.assert_array_equal(
                np.load(g.shard_dir(s) / "image_emb.npy"), np.load(fresh.shard_dir(s) / "image_emb.npy")
            )
        q = np.asarray(fresh.image_emb[[0, 25]], np.float32)
        a = kernels.cosine_topk(q, fresh.image_emb, 5)
        b = kernels.cosine_topk(q, g.image_emb, 5)  # through the Ray shard actors
        np.testing.assert_array_equal(a.ids, b.ids)
    finally:
        g.close()
