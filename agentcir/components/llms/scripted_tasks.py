"""Moved to :mod:`agentcir.testing.replies` (the testing kit); this name still imports it."""

from ...testing.replies import InFlight, task_of, task_replier, task_reply  # noqa: F401
