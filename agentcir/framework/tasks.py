"""The LLM task contract shared by every LLM backend and by the methods that call them.

Methods call ``llm.run_task(task, variables, images=..., prompt=None)``. The default
prompt of a task is ``recipes/prompts/tasks/<task>.txt``; prompt-reading backends
(``openai``, ``transformers``) render it, the offline ``rules`` backend implements the
task directly. :func:`agentcir.framework.parsing.parse_task_reply` turns a reply
into the Python value the table below promises.

The table is open: a plugin adds its own tasks with :func:`register_task` (a reply schema
or parser, a prompt file found on the prompt search path, and optionally an offline
*replier* with which the ``rules`` LLM and the scripted test endpoint answer the task), in a
module named by the entry-point group ``agentcir.tasks``::

    # setup.py: entry_points={"agentcir.tasks": ["my_tasks = my_plugin.tasks"]}
    register_task("critique", ("target_caption", "modification"), reply="json",
                  fields={"ok": "str", "missing": "list[str]"}, prompt="my_plugin/critique",
                  replier=lambda v: {"ok": "yes", "missing": []})

Built-in task names cannot be replaced.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .errors import InputError

#: reply kinds a task may declare, and the field types of JSON replies
REPLY_KINDS = ("text", "json", "yes_no", "true_false")
FIELD_TYPES = ("str", "list[str]", "questions")
#: entry-point group whose modules register tasks when imported
ENTRY_POINT_GROUP = "agentcir.tasks"


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
        prompt: the task's default prompt (a name on the prompt search path); ``""`` means
            ``tasks/<name>``.
        parser: ``parser(reply_text, variables) -> value`` replacing the schema parsing
            (:func:`agentcir.framework.parsing.parse_task_reply`), for replies the field types
            cannot describe; it raises ``ReplyParseError`` on a reply it cannot read.
        replier: ``replier(variables) -> str | dict | list | bool``, an offline, deterministic
            answer to the task (the ``rules`` LLM and :mod:`agentcir.testing` use it).
        origin: the module that registered the task (``""`` for the built-ins).
    """

    name: str
    variables: tuple[str, ...]
    images: str
    reply: str
    fields: tuple[tuple[str, str], ...] = ()
    count: str | None = None
    optional: tuple[tuple[str, Any], ...] = ()
    prompt: str = ""
    parser: Callable[[Any, Mapping[str, Any]], Any] | None = field(default=None, compare=False, repr=False)
    replier: Callable[[dict[str, Any]], Any] | None = field(default=None, compare=False, repr=False)
    origin: str = ""

    @property
    def prompt_name(self) -> str:
        """The default prompt: :attr:`prompt`, else ``tasks/<name>``."""
        return self.prompt or f"tasks/{self.name}"

    @property
    def needs_images(self) -> bool:
        return bool(self.images) and self.images != "optional"

    @property
    def field_types(self) -> dict[str, str]:
        return dict(self.fields)


TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec("caption", (), "[image]", "text"),
        TaskSpec(
            "target_caption",
            ("reference_caption", "modification"),
            "optional",
            "json",
            (("target_caption", "str"), ("modifications", "list[str]")),
        ),
        TaskSpec(
            "refine", ("reference_caption", "modification", "target_caption"), "", "json", (("target_caption", "str"),)
        ),
        # objects: what should appear in the target (OCTOPUS: detected on the reference and the visual
        # proxy, then kept by filter_objects); a list, empty when the caller has none
        TaskSpec(
            "textual_proxies",
            ("reference_caption", "modification", "target_caption", "k"),
            "",
            "json",
            (("proxies", "list[str]"),),
            count="k",
            optional=(("objects", ()),),
        ),
        TaskSpec("list_objects", (), "[image]", "json", (("objects", "list[str]"),)),
        TaskSpec(
            "filter_objects",
            ("objects", "modification", "target_caption"),
            "",
            "json",
            (("keep", "list[str]"), ("remove", "list[str]")),
        ),
        TaskSpec(
            "target_descriptions",
            ("reference_caption", "modification", "n"),
            "",
            "json",
            (("descriptions", "list[str]"),),
            count="n",
        ),
        TaskSpec("rewrite_caption", ("reference_caption", "modification"), "", "json", (("caption", "str"),)),
        TaskSpec(
            "divergent_captions",
            ("reference_caption", "modification", "n"),
            "",
            "json",
            (("captions", "list[str]"),),
            count="n",
        ),
        TaskSpec(
            "questions",
            ("reference_caption", "modification", "target_caption", "n"),
            "",
            "json",
            (("questions", "questions"),),
            count="n",
        ),
        # one caption of a video from the captions of its sampled keyframes (OCTOPUS' Perceiver)
        TaskSpec("summarize_captions", ("captions",), "", "json", (("caption", "str"),)),
        TaskSpec("verify", ("modification", "reference_caption"), "[reference, candidate]", "yes_no"),
        TaskSpec("answer", ("statement",), "[candidate]", "true_false"),
        TaskSpec("entail", ("statement", "caption"), "", "true_false"),
        # AutoCIR (methods/autocir.py): planner, corrector and re-planner; free-text replies read by the
        # method as released ("Edited Description:" line, "Good retrieval" stop phrase, suggestions)
        TaskSpec("autocir_plan", ("reference_caption", "modification"), "", "text"),
        TaskSpec("autocir_check", ("reference_caption", "modification", "top_captions", "n"), "", "text", count="n"),
        TaskSpec(
            "autocir_replan", ("reference_caption", "modification", "last_description", "suggestions"), "", "text"
        ),
        # ImageScope (methods/imagescope.py): stage-1 and stage-2 reasoners; free text holding a ```json block
        # read by the method as released (step1 atomic instructions + step2 descriptions; step2 [question, answer])
        TaskSpec("imagescope_reason", ("instruction", "ref_image_desc"), "", "text"),
        TaskSpec("imagescope_propositions", ("instruction", "atomic_inst"), "", "text"),
        # used by the compressed-context memory (agentcir.components.memory.context) when its
        # summariser is an LLM: compress an agent's history into session + working memory
        TaskSpec(
            "compress_context",
            ("goal", "findings", "session_memory", "history"),
            "",
            "json",
            (("session_memory", "str"), ("working_memory", "str")),
        ),
    )
}


#: tasks registered by plugins (and by code at run time), by name
PLUGIN_TASKS: dict[str, TaskSpec] = {}
_LOCK = threading.RLock()
_ENTRY_POINTS_LOADED = False


def register_task(
    name: str,
    variables: Sequence[str] = (),
    *,
    reply: str = "json",
    fields: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    prompt: str | None = None,
    images: str = "",
    count: str | None = None,
    optional: Mapping[str, Any] | None = None,
    parser: Callable[[Any, Mapping[str, Any]], Any] | None = None,
    replier: Callable[[dict[str, Any]], Any] | None = None,
) -> TaskSpec:
    """Add an LLM task to the table (see the module docstring) and return its spec.

    Args:
        name: the task name (letters, digits, ``_``, ``-``, ``.``); a built-in name is refused.
        variables: the template variables a caller must give.
        reply: ``json`` (a JSON object with ``fields``), ``text``, ``yes_no`` or ``true_false``.
        fields: for ``json``: field name -> ``str``, ``list[str]`` or ``questions``.
        prompt: the default prompt's name (e.g. ``my_plugin/critique``); default ``tasks/<name>``.
        images: ``""`` (none), ``"optional"`` or a description of the images the task needs.
        count: a variable bounding the length of the list fields (a positive integer).
        optional: variables a caller may leave out, with their default value.
        parser: replaces the schema parsing of replies (``parser(text, variables) -> value``).
        replier: an offline answer (``replier(variables) -> value``) for the ``rules`` LLM and the
            scripted test endpoint.

    Registering the same task again from the same module (a re-import) replaces it; another
    module registering the same name is an :class:`InputError` naming both.
    """
    import sys

    where = f"LLM task '{name}'"
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-." for c in name):
        raise InputError(f"LLM task name must be a non-empty word (letters, digits, _ - .), got {name!r}")
    if name in TASKS:
        raise InputError(
            f"{where} is built in and cannot be registered again; choose another name (e.g. '<plugin>_{name}')"
        )
    if reply not in REPLY_KINDS:
        raise InputError(f"{where}: reply must be one of {', '.join(REPLY_KINDS)}, got {reply!r}")
    pairs = tuple((str(k), str(v)) for k, v in (fields.items() if isinstance(fields, Mapping) else fields))
    bad = [f"{k}: {v}" for k, v in pairs if v not in FIELD_TYPES]
    if bad:
        raise InputError(f"{where}: field types must be {', '.join(FIELD_TYPES)}; got {', '.join(bad)}")
    if reply == "json" and not pairs and parser is None:
        raise InputError(f"{where}: a json reply needs its fields (name -> type) or a parser")
    if reply != "json" and pairs:
        raise InputError(f"{where}: fields are for json replies; this task's reply is {reply!r}")
    variables = tuple(str(v) for v in ([variables] if isinstance(variables, str) else variables))
    if count is not None and count not in variables:
        raise InputError(
            f"{where}: count variable {count!r} is not one of its variables ({', '.join(variables) or 'none'})"
        )
    for what, fn in (("parser", parser), ("replier", replier)):
        if fn is not None and not callable(fn):
            raise InputError(f"{where}: {what} must be callable, got {type(fn).__name__}")
    origin = sys._getframe(1).f_globals.get("__name__", "")
    spec = TaskSpec(
        name,
        variables,
        images,
        reply,
        pairs,
        count,
        tuple((optional or {}).items()),
        prompt=str(prompt or ""),
        parser=parser,
        replier=replier,
        origin=str(origin),
    )
    with _LOCK:
        old = PLUGIN_TASKS.get(name)
        if old is not None and old.origin != spec.origin:
            raise InputError(f"{where} is registered twice: by '{old.origin}' and by '{spec.origin}'")
        PLUGIN_TASKS[name] = spec
    return spec


def register_replier(task: str, replier: Callable[[dict[str, Any]], Any]) -> TaskSpec:
    """Set (or replace) the offline replier of a registered plugin task (e.g. a test's own script)."""
    import dataclasses

    spec = task_spec(task)
    if spec.name in TASKS:
        raise InputError(f"LLM task '{task}' is built in: the rules LLM and the scripted endpoint answer it already")
    if not callable(replier):
        raise InputError(f"LLM task '{task}': replier must be callable, got {type(replier).__name__}")
    with _LOCK:
        PLUGIN_TASKS[spec.name] = new = dataclasses.replace(spec, replier=replier)
    return new


def load_task_plugins(refresh: bool = False) -> list[str]:
    """Import the modules of the ``agentcir.tasks`` entry points (once; ``refresh`` reads them
    again, e.g. after a plugin was installed); returns the modules imported. A module that fails
    to import is an :class:`InputError` naming the entry point."""
    global _ENTRY_POINTS_LOADED
    import importlib
    from importlib import metadata

    with _LOCK:
        if _ENTRY_POINTS_LOADED and not refresh:
            return []
        _ENTRY_POINTS_LOADED = True
        done = []
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            module = ep.value.split(":", 1)[0].strip()
            try:
                importlib.import_module(module)
            except Exception as e:
                raise InputError(
                    f"plugin task entry point '{ep.name} = {ep.value}' (group {ENTRY_POINT_GROUP}) "
                    f"failed to import: {type(e).__name__}: {e}"
                ) from e
            done.append(module)
        return done


def find_task(task: str) -> TaskSpec | None:
    """The spec of ``task`` (built in, registered, or from a task plugin), or ``None``."""
    spec = TASKS.get(task) or PLUGIN_TASKS.get(task)
    if spec is None and isinstance(task, str):
        load_task_plugins()
        spec = PLUGIN_TASKS.get(task)
    return spec


def all_tasks() -> dict[str, TaskSpec]:
    """Every task: the built-ins, then the plugins' (their entry points are loaded)."""
    load_task_plugins()
    return {**TASKS, **PLUGIN_TASKS}


def task_spec(task: str) -> TaskSpec:
    """The spec of ``task``; an unknown task is an :class:`InputError` listing the known ones."""
    spec = find_task(task)
    if spec is None:
        raise InputError(
            f"unknown LLM task '{task}'; tasks: {', '.join(all_tasks())} "
            f"(plugins add tasks with agentcir.framework.tasks.register_task)"
        )
    return spec


def reply_text(task: str, value: Any) -> str:
    """A replier's value as the reply text a model would send: a bool as ``yes``/``no`` or
    ``true``/``false`` (as the task's reply kind says), a str as is, anything else as JSON."""
    import json

    spec = task_spec(task)
    if isinstance(value, bool):
        if spec.reply == "yes_no":
            return "yes" if value else "no"
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InputError(
            f"the replier of LLM task '{task}' returned a {type(value).__name__}, which is not JSON-able: {e}"
        ) from None


def offline_reply(task: str, variables: Mapping[str, Any] | None) -> str:
    """The reply text of a plugin task's registered replier (``InputError`` when it has none)."""
    spec = task_spec(task)
    if spec.replier is None:
        raise InputError(
            f"LLM task '{task}' has no offline replier (registered by '{spec.origin or 'agentcir'}'); "
            f"give one with register_task(..., replier=fn) or register_replier('{task}', fn)"
        )
    return reply_text(task, spec.replier(check_variables(task, variables)))


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
        raise InputError(
            f"LLM task '{task}' needs variable(s) {', '.join(missing)}; given: {', '.join(sorted(values)) or '(none)'}"
        )
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
