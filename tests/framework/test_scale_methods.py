"""Every composed-retrieval method and ImageSeeker's image search on a 3-shard demo gallery
(one recipe switch, ``+scale=local`` / ``+scale=ray``): rankings identical to the single-process run."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe
from agentcir.framework.shards import ShardedGallery

METHODS = [
    ["method=octopus", "method.gate=0", "method.alpha=3"],
    ["method=octopus", "method.cross_modal=v2v", "method.gate=0"],
    ["method=xr", "method.k_prime=5", "method.stage3=true", "method.alpha=3"],
    ["method=xr", "method.tau=0"],
    ["method=cirevl"],
    ["method=ldre"],
]


def recipe(tmp_path, *extra):
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


def _ranking(res):
    return np.asarray(res.candidates.ids), np.asarray(res.candidates.scores)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: "-".join(x.split("=")[1] for x in m[:2]))
def test_method_on_three_local_shards_ranks_as_single_process(plugin_path, tmp_path, method):
    single = run_recipe(recipe(tmp_path, *method))
    sharded = run_recipe(recipe(tmp_path, *method, "+scale=local", "scale.shards=3"))
    assert isinstance(sharded.gallery, ShardedGallery) and len(sharded.gallery.shards) == 3
    assert sharded.gallery.ids == single.gallery.ids
    a, b = _ranking(single), _ranking(sharded)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], atol=1e-5)
    assert sharded.metrics["final"] == single.metrics["final"]
    for name, c in single.state.stage_candidates.items():
        np.testing.assert_array_equal(c.ids, sharded.state.stage_candidates[name].ids)


def test_imageseeker_image_search_on_shards(plugin_path, tmp_path):
    """A user's photos and image search read through the shards equal those of an unsharded
    gallery holding the same vectors (the shard builds batch the encoder differently, so a
    batch-dependent encoder may differ in the last bits from an unsharded build)."""
    from agentcir.framework.gallery import Gallery
    from agentcir.framework.methods.imageseeker.scoring import cosine_topk
    from agentcir.framework.methods.imageseeker.store import PhotoCollection
    from agentcir.framework.scale.embed import _Precomputed

    sharded = run_recipe(recipe(tmp_path, "method=cirevl", "+scale=local", "scale.shards=3")).gallery
    users = {it.id: {"user": "a" if n % 3 else "b"} for n, it in enumerate(sharded.items)}
    sharded.set_meta(users)
    emb = np.asarray(sharded.image_emb, np.float32)
    embed = _Precomputed(sharded.paths, emb, [""] * len(sharded))
    single = Gallery.build(tmp_path / "single", sharded.items, _Enc(sharded), progress=False, embed=embed)
    for user in ("a", "b", None):
        a, b = PhotoCollection(single, user), PhotoCollection(sharded, user)
        assert a.ids == b.ids
        np.testing.assert_array_equal(a.embeddings, b.embeddings)
        q = a.embeddings[1]
        for mask in (None, np.arange(len(a)) % 3 != 0):
            ra, sa = cosine_topk(q, a.embeddings, 10, mask)
            rb, sb = cosine_topk(q, b.embeddings, 10, mask)
            np.testing.assert_array_equal(ra, rb)
            np.testing.assert_array_equal(sa, sb)


class _Enc:
    def __init__(self, g):
        self.identity, self.registry_key = g.encoder_identity, g.info["encoder"]["key"]


def test_search_command_path_on_a_sharded_gallery(plugin_path, tmp_path):
    """`agentcir search` / `serve` (the Searcher) over a sharded gallery: the hits of the single gallery."""
    from agentcir.framework.search import Searcher

    method = ["method=octopus", "method.gate=0"]
    single = run_recipe(recipe(tmp_path, *method)).gallery
    sharded_recipe = recipe(tmp_path, *method, "+scale=local", "scale.shards=3")
    sharded = run_recipe(sharded_recipe).gallery
    a = Searcher(recipe(tmp_path, *method), single.root).search(image=single.paths[3], text="in red", k=8)
    s = Searcher(sharded_recipe, sharded.root)
    assert isinstance(s.gallery, ShardedGallery)
    b = s.search(image=single.paths[3], text="in red", k=8)
    assert [(h.id, h.row) for h in a.hits] == [(h.id, h.row) for h in b.hits]
