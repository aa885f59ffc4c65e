"""One Ray actor per shard, each holding its :class:`~agentcir.framework.shards.ShardWorker`
(the shard memory-mapped, scored by the scoring core through the usual dispatch).

An actor that dies is restarted by Ray up to ``scale.restarts`` times and the call that was
in flight is retried on the new actor; past that the query fails with a
:class:`~agentcir.framework.shards.ShardError` naming the shard.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..shards import ShardError, ShardWorker
from . import init_ray


class RayShards:
    """The shard actors of one opened sharded gallery (``engine=ray``)."""

    def __init__(self, specs: Sequence[dict], scale: dict[str, Any]):
        ray = init_ray(scale)
        self.ray = ray
        self.names = [s["shard"]["dir"] for s in specs]
        opts: dict[str, Any] = dict(max_restarts=scale["restarts"], max_task_retries=scale["restarts"], num_cpus=0)
        if scale.get("shard_threads"):
            opts["runtime_env"] = {"env_vars": {"NUMBA_NUM_THREADS": str(scale["shard_threads"])}}
        actor = ray.remote(ShardWorker).options(**opts)
        self.actors = [actor.remote(**s) for s in specs]

    def run(self, method: str, *args) -> list:
        """Call ``method`` on every shard actor at once; results in shard order."""
        ray = self.ray
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        out = []
        for name, ref in zip(self.names, refs):
            try:
                out.append(ray.get(ref))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                raise ShardError(f"shard '{name}': its Ray actor died and was not restarted "
                                 f"(scale.restarts exhausted): {type(e).__name__}") from None
        return out

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
        self.actors = []
