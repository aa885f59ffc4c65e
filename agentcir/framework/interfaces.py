"""The component kinds: what a method may call on each.

Concrete backends live in :mod:`agentcir.components` and register under a key in
:mod:`agentcir.registry`. Methods receive built components (never build them) and
call them through :meth:`agentcir.framework.runner.RunContext.call`, which caches
every call by content.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from .component import Component
from .images import Skipped, decode_many, report_skipped
from .prompts import find_prompt, load_prompt

log = logging.getLogger(__name__)


def _progress(total: int, desc: str, enabled: bool | None, min_total: int):
    from tqdm.auto import tqdm

    disable = (not enabled) if enabled is not None else total < min_total
    return tqdm(total=total, desc=desc, unit="img" if "image" in desc else "it", disable=disable, leave=False)


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``x`` scaled to unit L2 norm, as float32 (``eps`` guards zero rows)."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


class Encoder(Component):
    """A vision-language dual encoder: images and texts into one L2-normalised space.

    Backends implement ``dim``, ``_embed_images(list[PIL.Image]) -> [n,d]`` and
    ``_embed_texts(list[str]) -> [n,d]``; this class batches, decodes, skips broken
    images (reported by path, counted) and normalises.
    """

    kind: ClassVar[str] = "encoder"
    dim: int = 0
    default_batch_size: int = 64

    def _embed_images(self, images: list) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _embed_texts(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _batch(self, batch_size: int | None) -> int:
        b = int(batch_size or getattr(self.cfg, "batch_size", 0) or self.default_batch_size)
        if b <= 0:
            raise ValueError(f"batch_size must be positive, got {b}")
        return b

    def encode_images(
        self,
        images: Sequence,
        batch_size: int | None = None,
        *,
        progress: bool | Callable[[int], None] | None = None,
        skipped: list[Skipped] | None = None,
        normalize: bool = True,
    ) -> np.ndarray:
        """Embed images (paths or PIL images) -> float32 ``[n_ok, dim]``, L2-normalised
        (``normalize=False``: the model's output as it is, for formulas that add unnormalised
        features, e.g. Paracosm's mental image + description).

        Images that fail to decode are skipped, logged by path with a count, and
        appended to ``skipped`` when a list is given (their ``index`` is the
        position in ``images``), so the caller can align rows. ``progress``: a bar on
        stderr (True, or None: for long inputs), or a callable given the images done
        after each batch (a caller's own bar, e.g. a gallery build's).
        """
        b = self._batch(batch_size)
        out: list[np.ndarray] = []
        bad: list[Skipped] = []
        report = progress if callable(progress) else None
        with _progress(len(images), f"{self.describe()}: images", False if report else progress, 4 * b) as bar:
            for start in range(0, len(images), b):
                chunk = images[start : start + b]
                decoded, _, sk = decode_many(chunk)
                bad.extend(Skipped(s.index + start, s.path, s.reason) for s in sk)
                if decoded:
                    emb = self._embed_images(decoded)
                    out.append(l2_normalize(emb) if normalize else np.asarray(emb, np.float32))
                bar.update(len(chunk))
                if report is not None:
                    report(len(chunk))
        report_skipped(bad)
        if skipped is not None:
            skipped.extend(bad)
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def encode_texts(
        self,
        texts: Sequence[str],
        batch_size: int | None = None,
        *,
        progress: bool | None = None,
        normalize: bool = True,
    ) -> np.ndarray:
        """Embed texts -> float32 ``[n, dim]``, L2-normalised (``normalize=False``: as the model gives them)."""
        if isinstance(texts, str):
            raise TypeError("encode_texts takes a list of strings, not a single string")
        b = self._batch(batch_size)
        out = []
        with _progress(len(texts), f"{self.describe()}: texts", progress, 16 * b) as bar:
            for start in range(0, len(texts), b):
                chunk = [str(t) for t in texts[start : start + b]]
                emb = self._embed_texts(chunk)
                out.append(l2_normalize(emb) if normalize else np.asarray(emb, np.float32))
                bar.update(len(chunk))
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)


@dataclass
class ToolCall:
    """A tool call of a chat reply: ``name(**arguments)``, answered by a tool message of ``id``."""

    id: str
    name: str
    arguments: dict

    @classmethod
    def from_json(cls, d: dict) -> "ToolCall":
        """The tool call stored by :meth:`to_json` (missing fields read as empty)."""
        args = d.get("arguments")
        return cls(
            str(d.get("id") or ""), str(d.get("name") or ""), dict(args) if isinstance(args, dict) else (args or {})
        )


@dataclass
class ChatReply:
    """What ``LLM.chat`` returns (also when ``ctx.call`` reads it from the call cache)."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)

    def to_json(self) -> dict:
        """The reply as a JSON-ready dict (text and tool calls)."""
        return {"text": self.text, "tool_calls": [vars(t) for t in self.tool_calls]}

    @classmethod
    def from_json(cls, d: dict) -> "ChatReply":
        """The reply stored by :meth:`to_json` (a bad value is an ``InputError`` naming it)."""
        from .errors import InputError

        if not isinstance(d, dict) or not isinstance(d.get("tool_calls", []), list):
            raise InputError(f"a chat reply must be {{'text': str, 'tool_calls': [...]}}, got {d!r:.200}")
        return cls(str(d.get("text") or ""), [ToolCall.from_json(t) for t in d.get("tool_calls") or []])


def user_message(text: str, images: Sequence[Path | str] = ()) -> dict:
    """A chat message; images are local paths (backends encode them as they need)."""
    if not images:
        return {"role": "user", "content": text}
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}, *({"type": "image", "image": str(p)} for p in images)],
    }


def assistant_message(reply: "ChatReply") -> dict:
    """The assistant turn of ``reply`` (its text and tool calls), to append to a conversation."""
    msg: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        msg["tool_calls"] = [{"id": t.id, "name": t.name, "arguments": t.arguments} for t in reply.tool_calls]
    return msg


def tool_message(call_id: str, content: Any) -> dict:
    """The result of the tool call ``call_id`` (text, or any JSON-able value)."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def default_task_prompt(task: str) -> str:
    """The prompt a task runs when the caller names none: the registered task's, else ``tasks/<task>``."""
    from .tasks import find_task

    spec = find_task(task)
    return spec.prompt_name if spec is not None else f"tasks/{task}"


class LLM(Component):
    """A (vision-)language model.

    ``chat`` is the raw interface. ``run_task`` is what methods call: a named task
    (``target_caption``, ``questions``, ...) whose prompt file is rendered with the
    task's variables; offline backends may implement tasks directly instead of
    reading the prompt (and say so).
    """

    kind: ClassVar[str] = "llm"

    def chat(self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False) -> ChatReply:
        """Answer a chat ``messages`` list (OpenAI format), optionally with ``tools`` to call or in JSON mode."""
        raise NotImplementedError

    async def achat(
        self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False
    ) -> ChatReply:
        """:meth:`chat` as a coroutine (by default on a worker thread)."""
        return await asyncio.to_thread(self.chat, messages, tools=tools, json_mode=json_mode)

    def run_task(
        self,
        task: str,
        variables: dict[str, Any],
        *,
        prompt: str | None = None,
        images: Sequence[Path | str] = (),
        json_mode: bool = False,
    ) -> str:
        """Render the prompt file of ``task`` (or ``prompt``) with ``variables`` and return the reply's text."""
        text = load_prompt(prompt or default_task_prompt(task)).render(variables)
        return self.chat([user_message(text, images)], json_mode=json_mode).text

    async def arun_task(
        self,
        task: str,
        variables: dict[str, Any],
        *,
        prompt: str | None = None,
        images: Sequence[Path | str] = (),
        json_mode: bool = False,
    ) -> str:
        """Async :meth:`run_task` (what :meth:`RunContext.call` awaits); a thread by default."""
        return await asyncio.to_thread(
            self.run_task, task, variables, prompt=prompt, images=images, json_mode=json_mode
        )

    def call_prompts(self, op: str, inputs: dict[str, Any]) -> list[str]:
        """A task call reads ``prompt`` or, by default, the task's prompt (``tasks/<task>``, or the
        one a plugin task registered; when that file exists): that file is in the call's cache key."""
        if op in ("run_task", "arun_task") and inputs.get("task") and not inputs.get("prompt"):
            default = default_task_prompt(str(inputs["task"]))
            return [default] if find_prompt(default) is not None else []
        return super().call_prompts(op, inputs)


class Captioner(Component):
    """Describes an image in one caption."""

    kind: ClassVar[str] = "captioner"

    def caption(self, image: Path) -> str:
        """The caption of ``image``."""
        raise NotImplementedError


class Generator(Component):
    """Makes a visual proxy of a target description (an image path), or ``None``.

    A method calls ``gen = generator.bind(state.gallery)`` once, then
    ``gen.generate(description, reference=path)`` per query (through ``ctx.call``).
    Generators that need the gallery (``retrieval``) return a bound copy whose identity
    includes the gallery; the others return themselves.
    """

    kind: ClassVar[str] = "generator"

    def bind(self, gallery: Any) -> "Generator":
        """This generator for ``gallery`` (default: the generator itself; it needs none)."""
        return self

    def generate(self, description: str, *, reference: Path | None = None) -> Path | None:
        """An image file for ``description`` (the visual proxy), or ``None`` when none is made."""
        raise NotImplementedError


class Editor(Component):
    """Edits an image by an instruction: the reference image changed as the text asks.

    A method calls ``ctx.call(editor, "edit", image=path, instruction=text)`` per query; the
    result is an image file written under the editor's ``output_dir`` with a content-addressed
    name (the same edit is the same file), cached by the call cache like every model call, so
    a rerun reuses the file without calling the model.
    """

    kind: ClassVar[str] = "editor"

    def edit(self, image: Path, instruction: str) -> Path:
        """The file of ``image`` edited as ``instruction`` asks."""
        raise NotImplementedError


class Detector(Component):
    """Lists the objects in an image: ``[{"label": str, "score": float, "box": [x0,y0,x1,y1] | None}]``."""

    kind: ClassVar[str] = "detector"

    def detect(self, image: Path) -> list[dict]:
        """The objects found in ``image``, one dict each (at least a ``label``)."""
        raise NotImplementedError


class Verifier(Component):
    """Yes/no judgements on candidates.

    ``verify`` answers "is this candidate the reference changed by the instruction?"
    (OCTOPUS' and XR's final yes/no pass); ``check`` answers "is this statement true of
    the candidate?" (XR's true/false questions, asked on the image and on its caption).
    Backends use what they can see: a VLM the images, an entailment LLM the captions,
    the encoder contrast the candidate's embedding; each says which inputs it needs and
    fails naming a missing one.
    """

    kind: ClassVar[str] = "verifier"

    def verify(
        self,
        candidate: Path,
        instruction: str,
        *,
        reference: Path | None = None,
        caption: str | None = None,
        reference_caption: str | None = None,
    ) -> bool:
        """Is ``candidate`` what ``instruction`` asks for?

        Args:
            candidate: the candidate image.
            instruction: the modification text (or a target description).
            reference: the reference image, when there is one.
            caption: the candidate's caption.
            reference_caption: the reference's caption.
        """
        raise NotImplementedError

    def check(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """Is the true/false ``statement`` true of the candidate (its image and/or caption)?"""
        raise NotImplementedError


class Memory(Component):
    """Stores what a method or agent keeps between calls (cache, subsets, context)."""

    kind: ClassVar[str] = "memory"
