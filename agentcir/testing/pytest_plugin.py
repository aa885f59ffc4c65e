"""pytest fixtures for testing a method offline. Enable them in a ``conftest.py``::

    pytest_plugins = ["agentcir.testing.pytest_plugin"]

Fixtures:

- ``tiny_dataset``: a composed benchmark folder (:func:`agentcir.testing.data.tiny_composed_dataset`:
  24 product-like images with captions, 8 colour-change queries), made once per session;
- ``image_folder``: 12 small JPEG/PNG files (some in a sub-folder), one broken JPEG, one text file;
- ``scripted_llm``: a running :class:`~agentcir.testing.server.ScriptedServer` answering every
  LLM task (built in and registered by plugins, with their offline repliers); its
  ``base_url`` goes to ``llm=openai llm.base_url=...``;
- ``agentcir_env``: environment variables for ``agentcir`` subprocesses: the call cache in the
  test's temp folder, progress bars off.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from .data import make_image, tiny_composed_dataset


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    return tiny_composed_dataset(tmp_path_factory.mktemp("tiny-dataset"))


@pytest.fixture
def image_folder(tmp_path) -> Path:
    d = tmp_path / "photos"
    for i in range(12):
        make_image(d / ("sub" if i % 3 == 0 else "") / f"img{i:02d}.{'png' if i % 2 else 'jpg'}", i)
    (d / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (d / "notes.txt").write_text("not an image")
    return d


@pytest.fixture
def scripted_llm() -> Iterator["object"]:
    from .replies import task_replier
    from .server import ScriptedServer

    with ScriptedServer() as srv:
        srv.script("/chat/completions", task_replier())
        yield srv


@pytest.fixture
def agentcir_env(tmp_path) -> dict:
    env = dict(os.environ)
    env["AGENTCIR_CACHE"] = str(tmp_path / "cache.sqlite")
    env["TQDM_DISABLE"] = "1"
    return env
