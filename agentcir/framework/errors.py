"""Errors and the optional-dependency guard shared across agentcir."""

from __future__ import annotations

import importlib
from types import ModuleType


class AgentcirError(Exception):
    """Base class: a clear, user-facing error (the CLI prints its message, no traceback)."""


class MissingExtraError(AgentcirError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""


class InputError(AgentcirError, ValueError):
    """Bad user input: the message names the input and what is wrong with it."""


class StorageError(AgentcirError, OSError):
    """A file cannot be written (disk full, a short write, read-only, no permission); the message names
    the path and what to do. Nothing written before is lost."""


def require(module: str, extra: str, *, feature: str | None = None) -> ModuleType:
    """Import ``module`` or fail with the exact install line for agentcir's ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        what = feature or module
        raise MissingExtraError(
            f"{what} needs the optional package '{module.split('.')[0]}' ({e}); "
            f"install it with: pip install 'agentcir[{extra}]'"
        ) from e
