"""What the run tests of the looped methods (AutoCIR, ImageScope, WISER, Paracosm) share: the
``fashion_cir`` benchmark built from the shared product photos, the fault sweep's SIGKILL runs
against the scripted endpoint, and ``agentcir search --json`` over an indexed folder."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from agentcir.framework.recipe import compose

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "data" / "fashion-products"


def fashion_cir_recipe(tmp_path: Path, *overrides: str, queries: int = 6, gallery_size: int = 80):
    """A ``fashion_cir`` benchmark of ``queries`` queries over ``gallery_size`` product photos built
    under ``tmp_path`` (``agentcir build-benchmark``), and the recipe running ``overrides`` on it."""
    bench = tmp_path / "fashion-cir"
    subprocess.run(
        [sys.executable, "-m", "agentcir.cli", "build-benchmark", "--csv", str(SHARED / "products.csv"),
         "--images", str(SHARED / "images"), "--out", str(bench), "--queries", str(queries),
         "--gallery-size", str(gallery_size)],
        check=True,
        capture_output=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    return compose(
        [
            "encoder=toy",
            "dataset=fashion_cir",
            f"dataset.root={bench}",
            f"dataset.limit={queries}",
            f"run.root={tmp_path / 'runs'}",
            f"run.cache={tmp_path / 'cache.sqlite'}",
            "run.progress=false",
            *overrides,
        ]
    )


@contextmanager
def fault_sweep(out: Path, plugin_path: Path, *, delay: float, extra: tuple[str, ...] = ()) -> Iterator:
    """benchmarks/fault_sweep.py's ``Sweep`` over 4 queries, 2 calls at a time, against the scripted
    server answering after ``delay`` seconds; closed (its server stopped) on exit."""
    spec = importlib.util.spec_from_file_location("fault_sweep", ROOT / "benchmarks" / "fault_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fault_sweep"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    sw = mod.Sweep(
        out,
        limit=4,
        concurrency=2,
        delay=delay,
        seed=0,
        extra=("encoder=toy", *extra),
        pythonpath=(str(plugin_path),),
    )
    try:
        yield sw
    finally:
        sw.close()
        sys.modules.pop("fault_sweep", None)


def search_json(plugin_env: dict, image_folder: Path, tmp_path: Path, *overrides: str) -> tuple[dict, Path]:
    """``agentcir index`` of ``image_folder``, then ``agentcir search --json`` of its ``img01.png``
    with "make it red" and ``overrides``: (the search's JSON, the gallery folder)."""
    gal = tmp_path / "gallery"
    env = {**plugin_env, "PYTHONPATH": f"{ROOT}:{plugin_env['PYTHONPATH']}"}
    cli = [sys.executable, "-m", "agentcir.cli"]
    r = subprocess.run(
        [*cli, "index", str(image_folder), "--out", str(gal), "encoder=toy", "-q"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [*cli, "search", "--gallery", str(gal), "--image", str(image_folder / "img01.png"),
         "--text", "make it red", "-k", "3", "--json", "encoder=toy", *overrides,
         f"run.cache={tmp_path / 'c.sqlite'}", f"run.root={tmp_path / 'runs'}"],
        env=env,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), gal
