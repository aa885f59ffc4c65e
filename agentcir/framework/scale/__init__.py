"""The scale path: sharded galleries embedded by a Ray Data job and searched by Ray shard actors.

Selected by the recipe's ``scale`` section (:class:`ScaleConfig`); ``scale.shards=0`` (the
default) is the single-process gallery. The pieces:

* :mod:`agentcir.framework.shards` — the sharded format, the shard worker and the exact merge;
* :mod:`.embed` — building a sharded gallery (``engine=local``: in this process; ``engine=ray``:
  a Ray Data ``map_batches`` job with encoder actors), resumable shard by shard;
* :mod:`.ray_search` — one Ray actor per shard (restarted when it dies);
* :mod:`.ann` — per-shard faiss indexes (IVF-Flat, IVF-PQ, HNSW), built by ``agentcir build-index``.

Ray and faiss come with ``pip install 'agentcir[scale]'``; the core imports without them.
See docs/scale.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...registry import Choice, ConfigError, make_config
from ...registry.config import bounded, config_dict
from ..errors import InputError, require


class Engine(Choice):
    """Where shards are built and searched (``scale.engine``)."""

    local = "local"
    ray = "ray"


class SearchKind(Choice):
    """How each shard is searched (``scale.search``)."""

    exact = "exact"
    ivf_flat = "ivf_flat"
    ivf_sq = "ivf_sq"
    ivf_pq = "ivf_pq"
    hnsw = "hnsw"


class ScalarQuantizer(Choice):
    """IVF-SQ's codes (``scale.sq``)."""

    fp16 = "fp16"
    bit8 = "8bit"


ENGINES = Engine.values()
SEARCHES = SearchKind.values()
SQ = ScalarQuantizer.values()


@dataclass
class ScaleConfig:
    """The ``scale:`` section of a recipe.

    Attributes:
        engine: ``local`` (this process) or ``ray`` (a Ray Data embedding job and Ray shard actors).
        address: Ray cluster to join (``ray://...`` or ``host:port``); default ``$RAY_ADDRESS``, else a
            local Ray started for the run.
        shards: split the gallery into this many shards (0: one unsharded gallery).
        search: ``exact`` (the scoring core over every shard) or a per-shard approximate index
            built by ``agentcir build-index``: ``ivf_flat``, ``ivf_sq`` (scalar-quantized lists),
            ``ivf_pq`` or ``hnsw``.
        nlist: IVF lists per shard (0: about ``4 * sqrt(rows)``). sq: IVF-SQ's codes, ``fp16``
            (a half gallery's values exactly, half IVF-Flat's bytes) or ``8bit``. pq_m: IVF-PQ
            sub-quantizers (``dim`` must divide by it). hnsw_m: HNSW neighbours per node.
        nprobe: IVF lists visited per query. ef_search: HNSW search breadth.
        refine: 0, or R: the index proposes ``R * k`` candidates per shard, re-scored exactly
            from the shard's embeddings (recovers IVF-PQ's recall).
        concurrency: encoder actors of the Ray Data job (each call embeds one batch of the
            encoder's own ``batch_size``, as a local build does); 0 (the default): as many as
            the cluster's CPUs (GPUs with ``num_gpus``) hold, at most one per batch.
        num_gpus: GPUs per encoder actor (0 on CPU nodes). num_cpus: CPUs per encoder actor.
        shard_threads: kernel threads of each shard actor (numba threads; 0: its node's
            CPUs over the shards the node holds).
        restarts: times a dead shard actor is restarted (and its call retried) before the
            query fails naming the shard.
        num_cpus_total: CPUs of the local Ray this process starts (0: all); ignored with an address.
        object_store_mb: object store of that local Ray (0: Ray's default).
    """

    engine: Engine = Engine.local
    address: str | None = None
    shards: int = 0
    search: SearchKind = SearchKind.exact
    nlist: int = 0
    sq: ScalarQuantizer = ScalarQuantizer.fp16
    pq_m: int = 64
    hnsw_m: int = 32
    nprobe: int = 16
    ef_search: int = 64
    refine: int = 0
    concurrency: int = bounded(0, 0, note="0: fill the cluster")
    num_gpus: float = 0.0
    num_cpus: float = 1.0
    shard_threads: int = 0
    restarts: int = 1
    num_cpus_total: int = 0
    object_store_mb: int = 0


def scale_settings(raw: dict[str, Any] | None, *, where: str = "scale") -> dict[str, Any]:
    """A validated ``scale`` section with every default filled."""
    cfg = config_dict(make_config(ScaleConfig, dict(raw or {}), where=where))
    for f in (
        "shards",
        "nlist",
        "refine",
        "concurrency",
        "shard_threads",
        "restarts",
        "num_cpus_total",
        "object_store_mb",
    ):
        if cfg[f] < 0:
            raise ConfigError(f"{where}: field '{f}': must be >= 0, got {cfg[f]}")
    for f in ("pq_m", "hnsw_m", "nprobe", "ef_search"):
        if cfg[f] < 1:
            raise ConfigError(f"{where}: field '{f}': must be >= 1, got {cfg[f]}")
    return cfg


def require_ray():
    """Import ray, or fail with the install line of the ``scale`` extra."""
    return require("ray", "scale", feature="the Ray engine (scale.engine=ray)")


def init_ray(scale: dict[str, Any]):
    """Join ``scale['address']`` (or ``$RAY_ADDRESS``), or start a local Ray capped by the settings."""
    import os

    ray = require_ray()
    if ray.is_initialized():
        return ray
    address = scale.get("address") or os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, ray.exceptions.RayError) as e:
            hint = (
                "; a cluster started by `ray start` with token authentication (the default of recent Ray) "
                "also needs RAY_AUTH_MODE=token (and its token in ~/.ray/auth_token or $RAY_AUTH_TOKEN) "
                "in this command's environment"
                if os.environ.get("RAY_AUTH_MODE", "") != "token"
                else ""
            )
            raise InputError(
                f"cannot join the Ray cluster at '{address}' (scale.address / --address / $RAY_ADDRESS): {e}{hint}"
            ) from None
    else:
        kw: dict[str, Any] = {}
        if scale.get("num_cpus_total"):
            kw["num_cpus"] = scale["num_cpus_total"]
        if scale.get("object_store_mb"):
            kw["object_store_memory"] = scale["object_store_mb"] * 2**20
        # a local cluster on loopback: nothing of it listens on the machine's network addresses.
        # address="local": a new one, as documented; without it Ray joins the cluster named in
        # /tmp/ray/ray_current_cluster, which a killed `ray start` leaves pointing at nothing
        ray.init(address="local", include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1", **kw)
    return ray


#: the build settings of each index kind (they name its folder)
BUILD_PARAMS = {"ivf_flat": ("nlist",), "ivf_sq": ("nlist", "sq"), "ivf_pq": ("nlist", "pq_m"), "hnsw": ("hnsw_m",)}


def ann_dir(gallery, scale: dict[str, Any]) -> Path:
    """Folder of the per-shard indexes of kind ``scale['search']`` with its build settings."""
    from ..hashing import stable_hash

    kind = scale["search"]
    return Path(gallery.root) / "ann" / f"{kind}-{stable_hash({p: scale[p] for p in BUILD_PARAMS[kind]}, n=10)}"


def ann_paths(gallery, scale: dict[str, Any]) -> list[Path]:
    """The index file of every shard; an index not built yet is an error naming the command."""
    d = ann_dir(gallery, scale)
    paths = [d / f"{s['dir']}.faiss" for s in gallery.shards]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        kind = scale["search"]
        flags = "".join(f" --{p.replace('_', '-')} {scale[p]}" for p in BUILD_PARAMS[kind])
        raise InputError(
            f"sharded gallery '{gallery.root}' has no {kind} index for shard "
            f"'{missing[0].stem}' (looked in '{d}'); build it with: agentcir build-index "
            f"{gallery.root} --kind {kind}{flags}"
        )
    return paths
