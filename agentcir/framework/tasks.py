"""The LLM task contract shared by every LLM backend and by the methods that call them.

Methods call ``llm.run_task(task, variables, images=..., prompt=None)``. The default
prompt of a task is ``recipes/prompts/tasks/<task>.txt``; prompt-reading backends
(``openai``, ``transformers``) render it, the offline ``rules`` backend implements the
task directly. :func:`agentcir.framework.parsing.parse_task_reply` turns a reply
into the Python value the table below promises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import InputError


@dataclass(frozen=True)
class TaskSpec:
    """One task of the contract.

    Attributes:
        name: the task name (also the default prompt ``tasks/<name>``).
        variables: template variables the caller must give.
        images: what images the task takes (``""`` none, ``"optional"``, or a description).
        reply: ``"text"``, ``"json"``, ``"yes_no"`` or ``"true_false"``.
        fields: for JSON replies, field name -> ``"str"``, ``"list[str]"`` or ``"questions"``.
        count: the variable that bounds the length of the list field, if any (``k`` / ``n``).
        optional: variables a caller may leave out, with the value they then take
            (e.g. the objects OCTOPUS passes to ``textual_proxies``).
    """

    name: str
    variables: tuple[str, ...]
    images: str
    reply: str
    fields: tuple[tuple[str, str], ...] = ()
    count: str | None = None
    optional: tuple[tuple[str, Any], ...] = ()

    @property
    def needs_images(self) -> bool:
        return bool(self.images) and self.images != "optional"

    @property
    def field_types(self) -> dict[str, str]:
        return dict(self.fields)


TASKS: dict[str, TaskSpec] = {t.name: t for t in (
    TaskSpec("caption", (), "[image]", "text"),
    TaskSpec("target_caption", ("reference_caption", "modification"), "optional", "json",
             (("target_caption", "str"), ("modifications", "list[str]"))),
    TaskSpec("refine", ("reference_caption", "modification", "target_caption"), "", "json",
             (("target_caption", "str"),)),
    # objects: what should appear in the target (OCTOPUS: detected on the reference and the visual
    # proxy, then kept by filter_objects); a list, empty when the caller has none
    TaskSpec("textual_proxies", ("reference_caption", "modification", "target_caption", "k"), "", "json",
             (("proxies", "list[str]"),), count="k", optional=(("objects", ()),)),
    TaskSpec("list_objects", (), "[image]", "json", (("objects", "list[str]"),)),
    TaskSpec("filter_objects", ("objects", "modification", "target_caption"), "", "json",
             (("keep", "list[str]"), ("remove", "list[str]"))),
    TaskSpec("target_descriptions", ("reference_caption", "modification", "n"), "", "json",
             (("descriptions", "list[str]"),), count="n"),
    TaskSpec("rewrite_caption", ("reference_caption", "modification"), "", "json", (("caption", "str"),)),
    TaskSpec("divergent_captions", ("reference_caption", "modification", "n"), "", "json",
             (("captions", "list[str]"),), count="n"),
    TaskSpec("questions", ("reference_caption", "modification", "target_caption", "n"), "", "json",
             (("questions", "questions"),), count="n"),
    # one caption of a video from the captions of its sampled keyframes (OCTOPUS' Perceiver)
    TaskSpec("summarize_captions", ("captions",), "", "json", (("caption", "str"),)),
    TaskSpec("verify", ("modification", "reference_caption"), "[reference, candidate]", "yes_no"),
    TaskSpec("answer", ("statement",), "[candidate]", "true_false"),
    TaskSpec("entail", ("statement", "caption"), "", "true_false"),
    # AutoCIR (methods/autocir.py): planner, corrector and re-planner; free-text replies read by the
    # method as released ("Edited Description:" line, "Good retrieval" stop phrase, suggestions)
    TaskSpec("autocir_plan", ("reference_caption", "modification"), "", "text"),
    TaskSpec("autocir_check", ("reference_caption", "modification", "top_captions", "n"), "", "text", count="n"),
    TaskSpec("autocir_replan", ("reference_caption", "modification", "last_description", "suggestions"), "", "text"),
    # ImageScope (methods/imagescope.py): stage-1 and stage-2 reasoners; free text holding a ```json block
    # read by the method as released (step1 atomic instructions + step2 descriptions; step2 [question, answer])
    TaskSpec("imagescope_reason", ("instruction", "ref_image_desc"), "", "text"),
    TaskSpec("imagescope_propositions", ("instruction", "atomic_inst"), "", "text"),
    # used by the compressed-context memory (agentcir.components.memory.context) when its
    # summariser is an LLM: compress an agent's history into session + working memory
    TaskSpec("compress_context", ("goal", "findings", "session_memory", "history"), "", "json",
             (("session_memory", "str"), ("working_memory", "str"))),
)}


def task_spec(task: str) -> TaskSpec:
    """The spec of ``task``; an unknown task is an :class:`InputError` listing the known ones."""
    spec = TASKS.get(task)
    if spec is None:
        raise InputError(f"unknown LLM task '{task}'; tasks: {', '.join(TASKS)}")
    return spec


def check_variables(task: str, variables: Mapping[str, Any] | None) -> dict[str, Any]:
    """``variables`` as a dict, checked to hold every variable ``task`` needs; optional
    variables left out take their default.

    Count variables (``k``, ``n``) must be positive integers (``"3"`` is accepted).
    """
    spec = task_spec(task)
    values = dict(variables or {})
    for name, default in spec.optional:
        if values.get(name) is None:
            values[name] = list(default) if isinstance(default, tuple) else default
    missing = [v for v in spec.variables if v not in values or values[v] is None]
    if missing:
        raise InputError(f"LLM task '{task}' needs variable(s) {', '.join(missing)}; "
                         f"given: {', '.join(sorted(values)) or '(none)'}")
    if spec.count:
        raw = values[spec.count]
        try:
            n = int(raw)
            if isinstance(raw, float) and raw != n:
                raise ValueError
        except (TypeError, ValueError):
            n = 0
        if n < 1:
            raise InputError(f"LLM task '{task}': variable '{spec.count}' must be a positive integer, got {raw!r}")
        values[spec.count] = n
    return values
