"""The errors of :mod:`agentcir.errors`, under the name the framework's modules import them by."""

from ..errors import AgentcirError, InputError, MissingExtraError, StorageError, require

__all__ = ["AgentcirError", "InputError", "MissingExtraError", "StorageError", "require"]
