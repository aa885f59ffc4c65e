"""Moved to :mod:`agentcir.testing.server` (the testing kit); this name still imports it."""

from ...testing.server import *  # noqa: F401,F403
from ...testing.server import FAULTS, Request, Script, ScriptedServer, Step, chat_completion, error_body  # noqa: F401
