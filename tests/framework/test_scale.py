"""Sharded galleries without Ray: the format, the exact merge of every scoring-core call,
the methods on the demo through one recipe switch, approximate indexes, the missing extra."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from agentcir import kernels
from agentcir.framework.errors import InputError, MissingExtraError
from agentcir.framework.galleries import open_gallery
from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.images import Skipped
from agentcir.framework.scale.embed import build_sharded
from agentcir.framework.shards import ShardedArray, ShardedGallery, merge_topk, shard_ranges

D = 16


class TableEncoder:
    """Image ``<n>.png`` -> row n of a fixed table (paths need not exist); ``bad-*`` fails to decode."""

    registry_key = "table"
    identity = "table-v1"
    dim = D

    def __init__(self, table: np.ndarray):
        self.table = table

    def encode_images(self, paths, progress=False, skipped=None):
        out = []
        for i, p in enumerate(paths):
            name = str(p).rsplit("/", 1)[-1]
            if name.startswith("bad"):
                if skipped is not None:
                    skipped.append(Skipped(i, str(p), "cannot identify image file"))
                continue
            out.append(self.table[int(name.split(".")[0])])
        return np.array(out, np.float32).reshape(-1, D)


def table(n: int, seed: int = 0, ties: bool = True) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32)
    if ties:
        x[7] = x[3]  # exact duplicates in different shards: ties broken by the lower id
        x[n - 2] = x[3]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def items(n: int, bad: tuple[int, ...] = ()) -> list[GalleryItem]:
    return [GalleryItem(f"i{r}", f"/nowhere/{'bad-' if r in bad else ''}{r}.png") for r in range(n)]


@pytest.fixture
def pair(tmp_path):
    """The same 50 items as one gallery and as a 3-shard gallery (float16, with 2 unreadable images)."""
    n, enc = 50, TableEncoder(table(50))
    its = items(n, bad=(5, 31))
    single = Gallery.build(tmp_path / "single", its, enc, dtype="float16", progress=False)
    sharded = build_sharded(tmp_path / "sharded", its, enc, {"shards": 3}, dtype="float16", progress=False)
    return single, sharded, enc


def test_shard_ranges_and_bad_counts():
    assert shard_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    with pytest.raises(InputError, match="shards must be at least 1"):
        shard_ranges(10, 0)
    with pytest.raises(InputError, match="cannot split 2 item"):
        shard_ranges(2, 3)


def test_sharded_format_matches_the_single_gallery(pair, tmp_path):
    single, sharded, enc = pair
    assert isinstance(sharded, ShardedGallery) and len(sharded.shards) == 3
    assert sharded.ids == single.ids and sharded.paths == single.paths and len(sharded) == 48
    assert [s["shard"] for s in sharded.skipped] == ["shard-00000", "shard-00001"]
    assert {s["path"] for s in sharded.skipped} == {s["path"] for s in single.skipped}
    emb = sharded.image_emb
    assert isinstance(emb, ShardedArray) and emb.shape == single.image_emb.shape and emb.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(emb), single.image_emb)
    rows = np.array([47, 0, 16, 17, 33, -1])
    np.testing.assert_array_equal(emb[rows], single.image_emb[rows])
    np.testing.assert_array_equal(emb[10:20, 3], single.image_emb[10:20, 3])
    np.testing.assert_array_equal(emb[16], single.image_emb[16])
    with pytest.raises(IndexError):
        emb[np.array([48])]
    # reopening goes through open_gallery (Gallery.open opens unsharded galleries only, and says so);
    # the same build resumes; another shard count is refused
    again = open_gallery(tmp_path / "sharded", encoder=enc)
    with pytest.raises(InputError, match="is sharded .*open_gallery"):
        Gallery.open(tmp_path / "sharded")
    assert type(open_gallery(tmp_path / "single")) is Gallery
    assert isinstance(again, ShardedGallery) and again.ids == single.ids
    assert (
        build_sharded(
            tmp_path / "sharded", items(50, bad=(5, 31)), enc, {"shards": 3}, dtype="float16", progress=False
        ).ids
        == single.ids
    )
    with pytest.raises(InputError, match="already holds a different gallery"):
        build_sharded(tmp_path / "sharded", items(50, bad=(5, 31)), enc, {"shards": 2}, dtype="float16", progress=False)
    with pytest.raises(InputError, match="duplicate item id 'i1'"):
        build_sharded(tmp_path / "dup", items(3) + [GalleryItem("i1", "/x/1.png")], enc, {"shards": 2}, progress=False)


def test_set_meta_writes_the_shard_that_holds_the_item(pair, tmp_path):
    _, sharded, enc = pair
    assert sharded.set_meta({"i40": {"user": "u"}, "i2": {"user": "v"}}) == 2
    again = open_gallery(tmp_path / "sharded", encoder=enc)
    assert again.items[again.index_of("i40")].meta == {"user": "u"}


def test_merge_topk_rule():
    s, i = merge_topk(
        [np.array([[0.9, 0.5]]), np.array([[0.9, -np.inf]])], [np.array([[4, 1]]), np.array([[2, -1]])], 4
    )
    assert i.tolist() == [[2, 4, 1, -1]] and s[0, 3] == -np.inf


#: float32 rounding of one score: a BLAS tile product's value for a row can depend on its place
#: in the tile, so equal rows may score a few ulps apart and swap (README "Conventions")
ROUNDING = 5e-7


def _same(a, b, atol=2e-6, tie_tol=0.0):
    """Equal scores (``atol``) and equal ids, except that ids may swap inside a run of scores
    equal within ``tie_tol`` (0: exactly equal rankings)."""
    arrays = [(np.asarray(x), np.asarray(y)) for x, y in zip(a, b)]
    scores = next((x for x, _ in arrays if not np.issubdtype(x.dtype, np.integer)), None)
    for x, y in arrays:
        if not np.issubdtype(x.dtype, np.integer):
            np.testing.assert_allclose(x, y, atol=atol, rtol=1e-5)
        elif not tie_tol or scores is None or x.shape != scores.shape:
            np.testing.assert_array_equal(x, y)
        else:
            for row_x, row_y, row_s in zip(x, y, scores):
                diff = np.flatnonzero(row_x != row_y)
                if diff.size:
                    lo, hi = diff.min(), diff.max() + 1
                    assert np.ptp(row_s[lo:hi]) <= tie_tol, (row_x, row_y, row_s)  # one run of near-ties
                    if hi < len(row_x):  # not cut by k
                        assert set(row_x[lo:hi]) == set(row_y[lo:hi]), (row_x, row_y)


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_every_scoring_call_on_shards_equals_the_single_process(pair, backend):
    single, sharded, _ = pair
    G, S = single.image_emb, sharded.image_emb
    tie = 0.0 if backend == "reference" else ROUNDING  # the reference ranks exactly as one process does
    rng = np.random.default_rng(1)
    Q, K = 5, 3
    q = table(Q, seed=2, ties=False)
    q[0] = np.asarray(G[3], np.float32)  # a query tied with the duplicated rows
    p = rng.standard_normal((Q, K, D)).astype(np.float32)
    p /= np.linalg.norm(p, axis=-1, keepdims=True)
    ex = np.array([[3, -1], [20, 40], [-1, -1], [0, 47], [16, 15]])
    for k in (1, 7, 60):
        for es in (None, -10.0):
            _same(
                kernels.cosine_topk(q, G, k, exclude=ex, exclude_score=es, backend=backend),
                kernels.cosine_topk(q, S, k, exclude=ex, exclude_score=es, backend=backend),
                tie_tol=tie,
            )
        for agg in ("mean", "max", "logsumexp", "octopus"):
            ref = q if agg == "octopus" else None
            _same(
                kernels.proxy_scores_topk(p, G, k, agg=agg, reference=ref, exclude=ex[:, 0], backend=backend),
                kernels.proxy_scores_topk(p, S, k, agg=agg, reference=ref, exclude=ex[:, 0], backend=backend),
                tie_tol=tie,
            )
    _same([kernels.octopus_weights(q, p, G, backend=backend)], [kernels.octopus_weights(q, p, S, backend=backend)])
    _same(
        [kernels.ldre_weights(q, p, G, topk=4, backend=backend)],
        [kernels.ldre_weights(q, p, S, topk=4, backend=backend)],
    )
    t = table(Q, seed=3, ties=False)
    v = table(Q, seed=4, ties=False)
    for visual in (None, v):
        for es in (None, -10.0):
            a = kernels.octopus_topk(
                q,
                p,
                t,
                G,
                9,
                visual=visual,
                captions=None if visual is None else G,
                exclude=ex,
                exclude_score=es,
                backend=backend,
            )
            b = kernels.octopus_topk(
                q,
                p,
                t,
                S,
                9,
                visual=visual,
                captions=None if visual is None else S,
                exclude=ex,
                exclude_score=es,
                backend=backend,
            )
            _same(a, b, atol=1e-5, tie_tol=tie)


def test_missing_scale_extra_names_the_install_line(monkeypatch):
    from agentcir.framework.scale import ann, require_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'agentcir\[scale\]'"):
        require_ray()
    with pytest.raises(MissingExtraError, match=r"pip install 'agentcir\[scale\]'"):
        ann.make_index("hnsw", 8, 100, {"hnsw_m": 8})


def test_bad_scale_settings_are_named():
    from agentcir.framework.scale import scale_settings
    from agentcir.registry import ConfigError

    with pytest.raises(ConfigError, match="field 'engine'"):
        scale_settings({"engine": "spark"})
    with pytest.raises(ConfigError, match="field 'search'"):
        scale_settings({"search": "lsh"})
    with pytest.raises(ConfigError, match="field 'shards'"):
        scale_settings({"shards": -1})
    with pytest.raises(ConfigError, match="field 'sq': must be one of fp16, 8bit, got '4bit'"):
        scale_settings({"search": "ivf_sq", "sq": "4bit"})
    with pytest.raises(ConfigError, match="unknown field 'shard'"):
        scale_settings({"shard": 2})
    with pytest.raises(ConfigError, match="field 'concurrency': must be at least 0"):
        scale_settings({"concurrency": -1})


def test_encoder_actors_fill_the_cluster_unless_set():
    from agentcir.framework.scale import scale_settings
    from agentcir.framework.scale.embed import encoder_actors

    cluster = {"CPU": 16.0, "GPU": 2.0}
    assert encoder_actors(scale_settings({}), cluster, 1000) == 16  # default: one per CPU
    assert encoder_actors(scale_settings({"num_cpus": 4}), cluster, 1000) == 4
    assert encoder_actors(scale_settings({"num_gpus": 0.5}), cluster, 1000) == 4  # GPUs decide
    assert encoder_actors(scale_settings({}), cluster, 3) == 3  # never more than batches
    assert encoder_actors(scale_settings({"concurrency": 5}), {"CPU": 2.0}, 1000) == 5  # as the recipe says
    with pytest.raises(InputError, match=r"0 GPU\(s\), less than one encoder actor's scale.num_gpus=1"):
        encoder_actors(scale_settings({"num_gpus": 1}), {"CPU": 8.0}, 10)


def test_encoder_actors_get_their_cpu_share_of_threads():
    from agentcir.framework.scale import scale_settings
    from agentcir.framework.scale.embed import actor_encoder_node

    node = {"name": "onnx", "path": "x", "num_threads": 0}
    assert actor_encoder_node(node, scale_settings({}))["num_threads"] == 1  # a 1-CPU actor: 1 thread
    assert actor_encoder_node(node, scale_settings({"num_cpus": 4}))["num_threads"] == 4
    assert actor_encoder_node(node, scale_settings({"num_cpus": 0.5}))["num_threads"] == 1
    assert actor_encoder_node({**node, "num_threads": 3}, scale_settings({}))["num_threads"] == 3  # as the recipe says
    assert "num_threads" not in actor_encoder_node({"name": "features", "path": "x"}, scale_settings({}))
    assert node["num_threads"] == 0  # the recipe's node is not changed


def test_shard_actors_are_pinned_to_nodes_in_turn_with_their_share_of_cores():
    from agentcir.framework.scale.ray_search import shard_placement
    from agentcir.framework.shards import ShardError

    class Cluster:  # what ray.nodes() says of a cluster
        def __init__(self, nodes):
            self._nodes = nodes

        def nodes(self):
            return self._nodes

    nodes = [
        {"NodeID": "b", "Alive": True, "Resources": {"CPU": 8.0}},
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 4.0}},
        {"NodeID": "head", "Alive": True, "Resources": {"memory": 1.0}},  # no CPUs: holds no shard
        {"NodeID": "c", "Alive": False, "Resources": {"CPU": 64.0}},
    ]  # gone
    assert shard_placement(Cluster(nodes), 5) == [("a", 1), ("b", 4), ("a", 1), ("b", 4), ("a", 1)]
    assert shard_placement(Cluster(nodes), 2, threads=3) == [("a", 3), ("b", 3)]  # as the recipe says
    assert shard_placement(Cluster(nodes[:1]), 16) == [("b", 1)] * 16  # never under 1 thread
    with pytest.raises(ShardError, match="no alive node with CPUs"):
        shard_placement(Cluster(nodes[2:]), 2)


def test_job_blocks_keep_every_actor_fed_and_the_tail_short():
    from agentcir.framework.scale.embed import BATCHES_PER_BLOCK, job_blocks

    assert job_blocks(105, 2) == 8  # the fashion photos on 2 actors: 4 blocks each
    assert job_blocks(3, 2) == 3  # never an empty block
    assert job_blocks(1, 16) == 1
    big = 10_000_000 // 64  # 10M photos on 8 actors: blocks of 16 batches, not 32 of 4,883
    assert job_blocks(big, 8) == -(-big // BATCHES_PER_BLOCK)
    for batches, actors in [(105, 2), (210, 2), (big, 8), (500, 64)]:
        n = job_blocks(batches, actors)
        assert n >= min(batches, 4 * actors) and -(-batches // n) <= BATCHES_PER_BLOCK


def test_joining_a_ray_cluster_that_refuses_names_address_and_token(monkeypatch):
    from agentcir.framework.scale import init_ray

    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray is already initialized in this process")

    def refuse(*a, **kw):
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.9:6379")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(InputError, match=r"cannot join the Ray cluster at '10.0.0.9:6379'.*RAY_AUTH_MODE=token"):
        init_ray({"address": "10.0.0.9:6379"})


def clustered(n: int, d: int, centers: int, seed: int = 0, noise: float = 0.35) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centers, d))
    x = c[rng.integers(0, centers, n)] + noise * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize(
    "kind,extra",
    [
        ("ivf_flat", {"nprobe": 8}),
        ("ivf_sq", {"nprobe": 8}),
        ("ivf_sq", {"nprobe": 8, "sq": "8bit"}),
        ("ivf_pq", {"nprobe": 8, "pq_m": 8, "refine": 10}),
        ("hnsw", {"ef_search": 64, "hnsw_m": 16}),
    ],
)
def test_approximate_index_per_shard(tmp_path, kind, extra):
    pytest.importorskip("faiss")
    from agentcir.framework.scale.ann import build_indexes

    n = 3000
    x = clustered(n, D, 30)
    enc = TableEncoder(x)
    g = build_sharded(tmp_path / "g", items(n), enc, {"shards": 2}, progress=False)
    q = x[np.random.default_rng(5).choice(n, 20, replace=False)]
    exact = kernels.cosine_topk(q, g.image_emb, 10, exclude=np.arange(20), exclude_score=None)
    scale = {"shards": 2, "search": kind, "nlist": 16, **extra}
    with pytest.raises(InputError, match=f"no {kind} index for shard 'shard-00000'.*agentcir build-index"):
        kernels.cosine_topk(q, open_gallery(tmp_path / "g", scale=scale).image_emb, 10)
    from agentcir.framework.scale import scale_settings

    infos = build_indexes(g, scale_settings(scale), progress=False)
    assert [i["n"] for i in infos] == [1500, 1500]
    assert all(i.get("reused") for i in build_indexes(g, scale_settings(scale), progress=False))
    approx = kernels.cosine_topk(
        q, open_gallery(tmp_path / "g", scale=scale).image_emb, 10, exclude=np.arange(20), exclude_score=None
    )
    for r in range(20):
        assert r not in set(approx.ids[r].tolist())  # the excluded item is removed, as in exact search
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx.ids.tolist(), exact.ids.tolist())])
    assert recall >= 0.9, recall


def _anon_mb() -> float:
    """This process's resident anonymous memory (``RssAnon``): what reading a file into memory
    grows, unlike the pages of a mapped file that are touched (``RssFile``)."""
    return int(next(l for l in open("/proc/self/status") if l.startswith("RssAnon")).split()[1]) / 1024


@pytest.mark.parametrize("sq", ["fp16", "8bit"])
def test_ivf_sq_is_memory_mapped_and_fp16_keeps_a_half_gallery_exactly(tmp_path, sq):
    """ivf_sq fp16 stores a half gallery's values as they are, so over every list its scores equal
    the exact scan of the fp16 rows; the index file is mapped, not read into memory."""
    pytest.importorskip("faiss")
    from agentcir.framework.scale.ann import build_index, load_index, search_index

    x = clustered(60000, 128, 50, seed=3).astype(np.float16)
    f = tmp_path / "sq.faiss"
    info = build_index(x, "ivf_sq", {"nlist": 64, "sq": sq}, f)
    size_mb = f.stat().st_size / 2**20
    assert info["n"] == 60000 and size_mb > (14 if sq == "fp16" else 7)
    before = _anon_mb()
    index = load_index(f, nprobe=64, ef_search=0)  # every list: exhaustive over the codes
    assert _anon_mb() - before < size_mb / 2, "the index was read into memory, not mapped"
    assert str(f) in Path("/proc/self/maps").read_text(), "the index file is not mapped"
    q = x[:16].astype(np.float32)
    s, i = search_index(index, q, 10, None, None)
    exact = kernels.cosine_topk(q, x, 10, backend="reference")
    if sq == "fp16":
        assert np.array_equal(i, np.asarray(exact.ids)) and np.allclose(s, exact.scores, atol=1e-5)
    else:
        assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(i.tolist(), np.asarray(exact.ids).tolist())]) >= 0.8


def test_build_index_command_writes_the_kind_and_settings_searched(tmp_path, capsys):
    """`agentcir build-index G --kind ivf_sq --sq 8bit`: one index per shard in the folder that
    `scale.search=ivf_sq scale.sq=8bit` opens; other settings name another folder (not built)."""
    pytest.importorskip("faiss")
    from agentcir.cli import main

    n = 3000
    x = clustered(n, D, 30)
    build_sharded(tmp_path / "g", items(n), TableEncoder(x), {"shards": 2}, progress=False)
    assert main(["build-index", str(tmp_path / "g"), "--kind", "ivf_sq", "--sq", "8bit", "--nlist", "16", "-q"]) == 0
    assert "built ivf_sq indexes of 2 shard(s)" in capsys.readouterr().out
    q = x[:5]
    got = kernels.cosine_topk(
        q,
        open_gallery(
            tmp_path / "g", scale={"shards": 2, "search": "ivf_sq", "sq": "8bit", "nlist": 16, "nprobe": 16}
        ).image_emb,
        10,
    )
    assert got.ids[:, 0].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(
        InputError,
        match="no ivf_sq index for shard 'shard-00000'.*agentcir build-index .* --kind ivf_sq --nlist 16 --sq fp16$",
    ):
        kernels.cosine_topk(
            q,
            open_gallery(tmp_path / "g", scale={"shards": 2, "search": "ivf_sq", "sq": "fp16", "nlist": 16}).image_emb,
            10,
        )
    assert main(["build-index", str(tmp_path / "g"), "--kind", "ivf_sq", "+scale=local", "scale.sq=4bit"]) == 2
    assert "field 'sq': must be one of fp16, 8bit, got '4bit'" in capsys.readouterr().err
