"""Shared fixtures: the test plugin (installed with pip into a temp dir), ../shared, tiny images."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Triton kernels run natively when CUDA is visible, else in the interpreter (tiny shapes only). The
# flag must be set before anything imports triton (diffusers and torch can, during collection), so
# it is set here, in the root conftest, which pytest loads first.
if "TRITON_INTERPRET" not in os.environ and importlib.util.find_spec("torch") is not None:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"

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
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(target), str(ROOT / "tests" / "plugin_pkg")],
                   check=True, capture_output=True)
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


def make_image(path: Path, seed: int, size: int = 24) -> Path:
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = (rng.random((size, size, 3)) * 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


@pytest.fixture
def image_folder(tmp_path) -> Path:
    """12 small real JPEG/PNG files, one broken JPEG, one text file."""
    d = tmp_path / "photos"
    for i in range(12):
        make_image(d / ("sub" if i % 3 == 0 else "") / f"img{i:02d}.{'png' if i % 2 else 'jpg'}", i)
    (d / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (d / "notes.txt").write_text("not an image")
    return d
