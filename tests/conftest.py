"""Shared fixtures: the test plugin (installed with pip into a temp dir), ../shared, and the testing kit's
(agentcir.testing.pytest_plugin: tiny images, a tiny dataset, a scripted LLM endpoint)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentcir.testing.data import make_image  # noqa: F401  (tests import it from here)

# Triton kernels run natively when CUDA is visible, else in the interpreter (tiny shapes only). The
# flag must be set before anything imports triton (diffusers and torch can, during collection), so
# it is set here, in the root conftest, which pytest loads first.
if "TRITON_INTERPRET" not in os.environ and importlib.util.find_spec("torch") is not None:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

# Ray starts its workers at nice 15: beside the suite's other pytest-xdist workers (or anything else
# busy on the machine) its actors would get a few percent of a core, and the Ray tests would take
# minutes. The suite's Ray clusters (here and in subprocesses, which inherit it) run at normal priority.
os.environ.setdefault("RAY_worker_niceness", "0")
# the scoring core's product path is the fixed table (agentcir/kernels/tune.py), not measured per
# test process nor written into the user's cache; tests/kernels/test_product_paths.py tunes on purpose
os.environ.setdefault("AGENTCIR_KERNELS_AUTOTUNE", "0")

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("AGENTCIR_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` (developers and CI have it; a fresh clone may not): skip when absent."""
    if not (SHARED / "data").is_dir():
        pytest.skip(f"needs the shared data folder ({SHARED}), absent here")
    return SHARED


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory) -> Path:
    """The tiny plugin package of tests/plugin_pkg, really installed by pip into a temp dir,
    and put on sys.path (subprocesses get it through PYTHONPATH, see ``plugin_env``)."""
    target = tmp_path_factory.mktemp("plugin-site")
    # built from a copy: pip writes build/ and *.egg-info next to setup.py, and pytest-xdist
    # workers installing the same source folder at once would race on them
    source = tmp_path_factory.mktemp("plugin-src") / "plugin_pkg"
    shutil.copytree(ROOT / "tests" / "plugin_pkg", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"pip could not install tests/plugin_pkg: {done.stderr[-2000:]}")
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    from agentcir.registry import REGISTRIES

    for reg in REGISTRIES.values():
        reg._plugins = None  # re-read entry points now that the plugin is importable
    return target


@pytest.fixture
def plugin_env(plugin_path, tmp_path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AGENTCIR_CACHE"] = str(tmp_path / "cache.sqlite")
    return env


# the method authors' testing kit: image_folder, tiny_dataset, scripted_llm, agentcir_env
pytest_plugins = ["agentcir.testing.pytest_plugin"]


#: test packages run on one worker each under ``--dist loadgroup``: ``serve`` and ``mcp_server``
#: build costly package-scoped fixtures (a gallery, a running server) once, not once per worker;
#: ``kernels`` compiles the numba kernels once (on a fresh checkout, two workers would compile the
#: same kernels at the same time, before either has written numba's cache)
GROUPED_PACKAGES = ("serve", "mcp_server", "kernels")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """The modules holding a test marked ``slow`` run first, each module's tests kept together and
    in their order (so module-scoped fixtures are set up once). Under pytest-xdist the long tests
    then start early, on either worker, and the run ends on short ones instead of one worker
    finishing a long test alone. The tests of ``GROUPED_PACKAGES`` get an ``xdist_group`` mark."""
    tests = ROOT / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        if len(parts) > 1 and parts[0] in GROUPED_PACKAGES and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(parts[0]))
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
