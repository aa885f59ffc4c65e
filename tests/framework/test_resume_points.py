"""Resume from any stage boundary: a run cut off right after a stage's ``.done`` marker (the state a
SIGKILL leaves there) finishes with the metrics of an uninterrupted run."""

from __future__ import annotations

import json

import pytest

from agentcir.framework.recipe import compose
from agentcir.framework.runner import run_recipe


def recipe(tmp_path, *extra):
    return compose(
        [
            "encoder=toy",
            "dataset=demo",
            "dataset.limit=4",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            *extra,
        ]
    )


def cut_after(run_dir, stage: str, order: list[str]) -> None:
    """Leave the run directory as a kill right after ``stage`` finished leaves it."""
    keep = order[: order.index(stage) + 1]
    for f in (run_dir / "stages").iterdir():
        if f.name.split(".")[0] not in keep:
            f.unlink()
    for f in ("metrics.json", "report.md", "rankings.jsonl"):
        (run_dir / f).unlink(missing_ok=True)


@pytest.mark.parametrize(
    "method", [["method=xr", "method.k_prime=5", "method.stage3=true"], ["method=octopus", "method.gate=0"]]
)
def test_resume_after_gallery_captions(plugin_path, tmp_path, method):
    """The captions key chosen by the gallery_captions stage is persisted, so a
    resumed run that skips the finished stage still finds the gallery captions."""
    r = recipe(tmp_path, *method)
    ref = run_recipe(r)
    order = ["gallery_captions", *ref.metrics["stages"]]
    cut_after(ref.dir, "gallery_captions", order)
    again = run_recipe(r)
    assert again.metrics["final"] == ref.metrics["final"]
    assert again.metrics["stages"] == ref.metrics["stages"]
    assert again.stats["gallery_captions"].resumed_queries == 4
    done = json.loads((ref.dir / "stages" / "gallery_captions.done").read_text())
    assert done["state"]["captions_key"] == again.state.captions_key
