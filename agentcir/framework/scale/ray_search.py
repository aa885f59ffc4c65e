"""One Ray actor per shard, each holding its :class:`~agentcir.framework.scale.worker.ShardWorker`
(the shard memory-mapped, scored by the scoring core through the usual dispatch), pinned to the
cluster's nodes in turn, each with its share of the node's cores (:func:`shard_placement`).

An actor that dies is restarted by Ray on its node up to ``scale.restarts`` times and the call
that was in flight is retried on the new actor; past that, or when its node is gone, the query
fails with a :class:`~agentcir.framework.scale.worker.ShardError` naming the shard (opening the
gallery again places its shards on the nodes alive then).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from .worker import ShardError, ShardWorker
from . import init_ray


def shard_placement(ray, n: int, threads: int = 0) -> list[tuple[str, int]]:
    """The node and kernel threads of each of ``n`` shard actors: the cluster's alive nodes with
    CPUs in turn (ordered by node id, so a node holds the same shards, and keeps their pages
    cached, from one opening to the next), and ``threads``, or (0) the node's CPUs over the shards
    it holds. Ray's own placement of these ``num_cpus=0`` actors is uneven (on two local nodes:
    all 6 of 6 on one node; 5 and 3 of 8, with SPREAD too; a soft node affinity gave 5 and 3 in
    one run of three): one machine would hold most shards. And 4 shards of 2 threads each on 2
    cores scanned 1M rows in 45 ms (Q=1) where 1 thread each took 36 ms."""
    cpus = {x["NodeID"]: x["Resources"].get("CPU", 0) for x in ray.nodes() if x["Alive"]}
    nodes = sorted(node for node, c in cpus.items() if c > 0)
    if not nodes:
        raise ShardError("the Ray cluster has no alive node with CPUs to hold the shard actors")
    placed = [nodes[i % len(nodes)] for i in range(n)]
    held = Counter(placed)
    return [(node, threads or max(1, int(cpus[node] // held[node]))) for node in placed]


class RayShards:
    """The shard actors of one opened sharded gallery (``engine=ray``)."""

    def __init__(self, specs: Sequence[dict], scale: dict[str, Any]):
        ray = init_ray(scale)
        self.ray = ray
        self.names = [s["shard"]["dir"] for s in specs]
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor = ray.remote(ShardWorker)
        placement = shard_placement(ray, len(specs), scale.get("shard_threads", 0))
        self.actors = [
            actor.options(
                max_restarts=scale["restarts"],
                max_task_retries=scale["restarts"],
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            ).remote(**s, threads=threads)
            for s, (node, threads) in zip(specs, placement)
        ]

    def run(self, method: str, *args) -> list:
        """Call ``method`` on every shard actor at once; results in shard order."""
        ray = self.ray
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        out = []
        for name, ref in zip(self.names, refs):
            try:
                out.append(ray.get(ref))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                raise ShardError(
                    f"shard '{name}': its Ray actor died and was not restarted "
                    f"(scale.restarts exhausted): {type(e).__name__}"
                ) from None
        return out

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
        self.actors = []
