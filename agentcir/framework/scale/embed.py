"""Building a sharded gallery: in this process (``engine=local``) or as a Ray Data job (``engine=ray``).

Items are split into ``shards`` contiguous ranges; each shard is a regular gallery folder
written by :meth:`Gallery.build <agentcir.framework.gallery.Gallery.build>` (so its format,
skipped-image counting and chunked resume are the unsharded ones). With Ray, one Ray Data
dataset holds the rows of every shard not finished yet; ``map_batches`` runs encoder actors
(each builds the recipe's encoder once through the registry; ``scale.concurrency`` actors with
``scale.num_gpus`` / ``scale.num_cpus`` each, by default as many as the cluster holds) that
read, decode and embed the images, one row of the dataset being one encoder batch (the
encoder's ``batch_size``, cut as a local build cuts it, so the embeddings are bit-identical to
``engine=local``); the driver streams the results and writes each shard as soon as all its rows are in. A
killed job leaves its finished shards, and the rerun embeds only the others.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..domain import reference_images, store_reference
from ..errors import InputError
from ..files import atomic_write_text
from ..gallery import CHUNK, Gallery, GalleryItem, clear_built, decode_note, stale_decode
from ..hashing import stable_hash
from ..images import DECODE_VERSION, Skipped
from ..shards import SHARD_DIR, open_sharded, shard_ranges, write_manifest
from . import init_ray, scale_settings

log = logging.getLogger(__name__)


def _plan(items: Sequence[GalleryItem], encoder, dtype: str, shards: int) -> dict:
    return {
        "items": stable_hash([[it.id, it.path] for it in items]),
        "encoder": encoder.identity,
        "dtype": dtype,
        "shards": shards,
        "decode": DECODE_VERSION,
    }


def _shard_done(d: Path) -> bool:
    """Whether shard folder ``d`` holds a finished, sound gallery (a damaged one is removed, to be rebuilt)."""
    if not (d / "gallery.json").is_file():
        return False
    from ..gallery import remove_gallery_files
    from ..integrity import IntegrityError, warn_once

    try:
        Gallery.open(d)
        return True
    except IntegrityError as e:
        warn_once(f"rebuild:{d}", "%s; the shard is rebuilt now", str(e).split("; rebuild")[0].split("; rerun")[0])
        remove_gallery_files(d)
        return False


def build_sharded(
    root: str | Path,
    items: Sequence[GalleryItem],
    encoder,
    scale: dict[str, Any],
    *,
    dtype: str = "float32",
    recipe: dict[str, Any] | None = None,
    progress: bool = True,
    source: str = "",
    domain_check: bool = False,
):
    """Embed ``items`` into a sharded gallery at ``root`` (resuming), open it with ``scale``.

    ``recipe`` (its ``encoder`` section) is how the Ray encoder actors build the encoder;
    it is required with ``engine=ray``. ``domain_check``: a Ray job embeds the encoder's domain
    reference photos too and keeps them in ``root`` (:mod:`agentcir.framework.domain`).
    """
    scale = scale_settings(scale)
    root = Path(root)
    S = scale["shards"]
    if not items:
        raise InputError(f"cannot build gallery '{root}': no items")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise InputError(f"gallery '{root}': duplicate item id '{dup}'")
    ranges = shard_ranges(len(items), S)
    plan = _plan(items, encoder, dtype, S)
    meta = root / "gallery.json"
    if meta.is_file():
        from ..integrity import (
            Damaged,
            IntegrityError,
            read_json_checked,
            recompute_warning,
            remove_with_sidecar,
            warn_once,
        )

        try:
            info = read_json_checked(meta)
            if not isinstance(info, dict):
                raise Damaged(meta, "is not a gallery description")
        except Damaged as e:
            recompute_warning(e, "it is written again from the shards")
            remove_with_sidecar(meta)
            info = None
        if info is not None and info.get("plan") == plan:
            try:
                return open_sharded(root, info, scale)
            except IntegrityError as e:
                warn_once(
                    f"rebuild:{root}",
                    "%s; the damaged shard is rebuilt now",
                    str(e).split("; rebuild")[0].split("; rerun")[0],
                )
                remove_with_sidecar(meta)
                info = None
        if info is not None and info.get("plan") != plan and stale_decode(info.get("plan"), plan):
            log.warning(
                "gallery '%s' was embedded by an older image decoder (%s); re-embedding it",
                root,
                decode_note(info.get("plan")),
            )
            remove_with_sidecar(meta)
            (root / "plan.json").unlink(missing_ok=True)
            for s in range(S):  # the same shard count: the plans differ only in the decoder
                clear_built(root / SHARD_DIR.format(s))
    if meta.is_file():
        raise InputError(
            f"gallery folder '{root}' already holds a different gallery (encoder, items or shard "
            f"count differ); choose another output folder or delete it"
        )
    root.mkdir(parents=True, exist_ok=True)
    marker = root / "plan.json"
    if marker.is_file() and json.loads(marker.read_text()) != plan:
        raise InputError(
            f"gallery folder '{root}' holds an unfinished build of a different gallery; "
            f"choose another output folder or delete it"
        )
    atomic_write_text(marker, json.dumps(plan))
    dirs = [root / SHARD_DIR.format(s) for s in range(S)]
    todo = [s for s in range(S) if not _shard_done(dirs[s])]
    if todo:
        log.info("gallery '%s': embedding %d of %d shard(s) with engine %s", root, len(todo), S, scale["engine"])
    if scale["engine"] == "ray" and todo:
        if recipe is None or "encoder" not in recipe:
            raise InputError("engine=ray needs the recipe (its encoder section) to build the encoder actors")
        refs = reference_images(encoder) if domain_check else []
        ref_emb = _embed_ray(dirs, ranges, todo, items, encoder, recipe, scale, dtype, progress, refs)
        if refs:
            store_reference(root, encoder, refs, ref_emb)
    else:
        for s in todo:
            a, b = ranges[s]
            Gallery.build(dirs[s], items[a:b], encoder, dtype=dtype, progress=progress, source=source)
    shard_galleries = [Gallery.open(d, encoder=encoder) for d in dirs]
    info = write_manifest(root, shard_galleries, plan=plan, source=source)
    marker.unlink(missing_ok=True)
    skipped = len(info["skipped"])
    if skipped:
        log.warning(
            "gallery '%s': %d item(s) indexed in %d shards, %d skipped (unreadable)", root, info["n"], S, skipped
        )
    return open_sharded(root, info, scale)


class EncodeBatch:
    """A Ray Data actor: builds the recipe's encoder once, then embeds rows that are each one
    encoder batch of image paths (read and decoded here), so the encoder sees exactly the
    batches of a local build and the embeddings are identical."""

    def __init__(self, encoder_node: dict[str, Any], identity: str):
        from ..recipe import ComponentPool

        self.encoder = ComponentPool({"encoder": encoder_node}).get("encoder")
        if self.encoder.identity != identity:
            raise InputError(
                f"the encoder actor built encoder identity {self.encoder.identity}, the driver "
                f"{identity}: the nodes run different agentcir or weights"
            )

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows, embs, reasons = [], [], []
        for start, paths in zip(batch["start"], batch["paths"]):
            paths = [str(p) for p in paths]
            skipped: list[Skipped] = []
            emb = self.encoder.encode_images(paths, len(paths), progress=False, skipped=skipped)
            bad = {s.index: s.reason for s in skipped}
            full = np.zeros((len(paths), self.encoder.dim), np.float32)
            kept = [i for i in range(len(paths)) if i not in bad]
            if kept:
                full[kept] = emb
            rows.append(np.arange(int(start), int(start) + len(paths)))
            embs.append(full)
            reasons += [bad.get(i, "") for i in range(len(paths))]
        return {"row": np.concatenate(rows), "emb": np.concatenate(embs), "reason": np.array(reasons, dtype=object)}


def encoder_batches(ranges, todo, batch: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` item ranges a local build hands the encoder: per shard, chunks of
    :data:`~agentcir.framework.gallery.CHUNK` from the shard's start, cut in ``batch``-sized calls."""
    out = []
    for s in todo:
        a, b = ranges[s]
        for c in range(a, b, CHUNK):
            stop = min(b, c + CHUNK)
            out += [(i, min(stop, i + batch)) for i in range(c, stop, batch)]
    return out


class _Precomputed:
    """``encode_images`` over rows embedded already (the Ray job's results for one shard)."""

    def __init__(self, paths: Sequence[str], emb: np.ndarray, reasons: Sequence[str]):
        self.row = {p: i for i, p in enumerate(paths)}
        self.emb, self.reasons = emb, reasons

    def __call__(
        self, paths: Sequence[str], progress: bool = False, skipped: list[Skipped] | None = None
    ) -> np.ndarray:
        rows = [self.row[str(p)] for p in paths]
        keep = []
        for i, r in enumerate(rows):
            if self.reasons[r]:
                if skipped is not None:
                    skipped.append(Skipped(i, str(paths[i]), self.reasons[r]))
            else:
                keep.append(r)
        return self.emb[keep]


def encoder_actors(scale: dict[str, Any], resources: dict[str, float], batches: int) -> int:
    """Encoder actors of the job: ``scale.concurrency``, or (0) as many as ``resources`` (the
    cluster's) hold at ``num_gpus`` GPUs, else ``num_cpus`` CPUs, each; never more than ``batches``."""
    n = scale["concurrency"]
    if not n:
        kind, each = ("GPU", scale["num_gpus"]) if scale["num_gpus"] else ("CPU", scale["num_cpus"])
        n = int(resources.get(kind, 0) // each) if each else 1
        if n < 1:
            raise InputError(
                f"the Ray cluster has {resources.get(kind, 0):g} {kind}(s), less than one encoder actor's "
                f"scale.num_{kind.lower()}s={each:g}"
            )
    return max(1, min(n, batches))


#: encoder batches per Ray Data block at most: a block is one task of an actor, so the tail a job
#: waits on at its end (the slowest actor's last block) stays a few seconds of work, while the
#: cost of a task (about 10 ms here) stays under 1% of it
BATCHES_PER_BLOCK = 16


def job_blocks(batches: int, actors: int) -> int:
    """Blocks of the job's dataset: at least 4 per actor (each actor holds two tasks in flight, so
    the pool balances itself) and at most :data:`BATCHES_PER_BLOCK` batches each."""
    return max(1, min(batches, 4 * actors), -(-batches // BATCHES_PER_BLOCK))


def actor_encoder_node(node: dict[str, Any], scale: dict[str, Any]) -> dict[str, Any]:
    """The recipe's encoder node as an encoder actor builds it: an encoder with a ``num_threads``
    setting left at 0 (the backend's default) gets the actor's CPUs. Ray tells torch its share
    (``OMP_NUM_THREADS``), but onnxruntime sizes its pool by the node's cores, so two 1-CPU
    actors on 2 cores ran 4 spinning threads, at half speed. ``num_threads`` is not part of an
    encoder's identity: the embeddings are the same."""
    node = dict(node)
    if node.get("num_threads") == 0:
        node["num_threads"] = max(1, int(scale["num_cpus"]))
    return node


def embedding_job(ray, items, ranges, todo, encoder, recipe, scale, udf=EncodeBatch, extra: Sequence = ()):
    """The Ray Data dataset that embeds the shards ``todo`` (rows: one encoder batch each, read,
    decoded and embedded by ``udf`` actors), and its number of actors. The images ``extra``
    are embedded too, as rows ``len(items) + i``."""
    b = encoder._batch(None) if hasattr(encoder, "_batch") else 64
    rows = [{"start": a, "paths": [items[i].path for i in range(a, z)]} for a, z in encoder_batches(ranges, todo, b)]
    rows += [{"start": len(items) + i, "paths": [str(p) for p in extra[i : i + b]]} for i in range(0, len(extra), b)]
    actors = encoder_actors(scale, ray.cluster_resources(), len(rows))
    log.info("Ray Data job: %d encoder batch(es) on %d encoder actor(s)", len(rows), actors)
    ds = ray.data.from_items(rows, override_num_blocks=job_blocks(len(rows), actors))
    node = actor_encoder_node(recipe["encoder"], scale)
    ds = ds.map_batches(
        udf,
        fn_constructor_kwargs={"encoder_node": node, "identity": encoder.identity},
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_gpus=scale["num_gpus"] or None,
        num_cpus=scale["num_cpus"],
        batch_format="numpy",
    )
    return ds, actors


def _embed_ray(dirs, ranges, todo, items, encoder, recipe, scale, dtype, progress, extra: Sequence = ()) -> np.ndarray:
    """Run the job, writing each shard as its rows come in; -> the embeddings of the images
    ``extra`` that could be read."""
    ray = init_ray(scale)
    n = len(items)
    shard_of = np.zeros(n, np.int32)
    for s, (a, z) in enumerate(ranges):
        shard_of[a:z] = s
    ds, _ = embedding_job(ray, items, ranges, todo, encoder, recipe, scale, extra=extra)
    pending, others = {s: {} for s in todo}, {}
    t0, done_rows = time.perf_counter(), 0
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for r, e, why in zip(batch["row"], batch["emb"], batch["reason"]):
            if r >= n:
                others[int(r) - n] = (e, str(why))
            else:
                pending[int(shard_of[r])][int(r)] = (e, str(why))
        done_rows += len(batch["row"])
        for s in [s for s, got in pending.items() if len(got) == ranges[s][1] - ranges[s][0]]:
            a, b = ranges[s]
            got = pending.pop(s)
            emb = np.stack([got[i][0] for i in range(a, b)])
            embed = _Precomputed([items[i].path for i in range(a, b)], emb, [got[i][1] for i in range(a, b)])
            Gallery.build(dirs[s], items[a:b], encoder, dtype=dtype, progress=False, embed=embed)
            if progress:
                print(
                    f"  {dirs[s].name}: {b - a} image(s) embedded ({done_rows / (time.perf_counter() - t0):.1f} img/s)"
                )
    if pending:
        raise InputError(f"the Ray embedding job ended with shard(s) {sorted(pending)} incomplete")
    kept = [others[i][0] for i in sorted(others) if not others[i][1]]
    return np.stack(kept) if kept else np.zeros((0, encoder.dim), np.float32)
