"""The LLM tasks of refine_loop: their variables, reply schema, prompt file and offline replier.

Registered when this module is imported (entry-point group ``agentcir.tasks``, and by the method
module). The repliers make the method run offline: the ``rules`` LLM answers these tasks with
them, and so does the scripted test endpoint (``python -m agentcir.testing.server``).
"""

from agentcir.method_kit import register_task

from .replies import critique, plan

PLAN = register_task(
    "refine_loop_plan",
    ("reference_caption", "modification"),
    reply="json",
    fields={"description": "str", "keep": "list[str]"},
    prompt="refine_loop/plan",
    replier=plan,
)

CRITIQUE = register_task(
    "refine_loop_critique",
    ("modification", "description", "candidates"),
    reply="json",
    fields={"verdict": "str", "description": "str"},
    prompt="refine_loop/critique",
    replier=critique,
)
