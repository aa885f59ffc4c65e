"""``llm=transformers``: a local language or vision-language model (Hugging Face ``transformers``).

For users with weights on disk (or in the local Hugging Face cache): nothing is downloaded
at run time. A model whose config has a ``vision_config`` (Qwen2.5-VL, InternVL3 in its
transformers format, SmolVLM / Idefics3, LLaVA-OneVision, ...) is an image-text-to-text
model: it loads with ``AutoProcessor`` + ``AutoModelForImageTextToText``, its messages keep
their image parts (in order) through the processor's chat template, and the images are
decoded by the project's loader (:func:`agentcir.framework.images.load_rgb`), so
``captioner=vlm``, ``verifier=vlm`` and ``detector=vlm`` run on one GPU without a server.
Any other model is a causal LM (``AutoTokenizer`` + ``AutoModelForCausalLM``), text only.
The model loads on first use; the prompt is the chat template (with ``tools`` when given),
or a plain ``Role: text`` transcript when the tokenizer has none. Decoding is greedy unless
``temperature > 0``. Tool calls are read from ``<tool_call>{...}</tool_call>`` blocks (the
Hermes / Qwen convention) or from a reply that is one JSON object with ``name`` and
``arguments``.

Needs the ``hf`` extra (``torch``, ``transformers``).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ...framework.errors import InputError, require
from ...framework.hashing import stable_hash
from ...framework.interfaces import ChatReply, ToolCall
from ...registry import LLMS, Choice
from ...registry.config import bounded
from .base import PromptedLLM
from ...framework.parsing import ReplyParseError, extract_json

_TOOL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_PARTIAL = 4 << 20  # bytes hashed at each end of a big weights file


def weights_identity(folder: Path) -> str:
    """A fingerprint of a model folder: every small file by content, big weight files by
    size and their first and last 4 MiB (full hashing of many GB would be slow)."""
    import hashlib

    files = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name.startswith("."):
            continue
        size = p.stat().st_size
        h = hashlib.sha256()
        with open(p, "rb") as f:
            if size <= 2 * _PARTIAL:
                h.update(f.read())
            else:
                h.update(f.read(_PARTIAL))
                f.seek(-_PARTIAL, 2)
                h.update(f.read())
        files[str(p.relative_to(folder))] = [size, h.hexdigest()]
    return stable_hash(files, n=24)


class DType(Choice):
    """The model's weight dtype (config field ``dtype``; ``auto``: the checkpoint's own)."""

    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


@LLMS.register("transformers")
class TransformersLLM(PromptedLLM):
    """A local causal LM through ``transformers`` (see the module docstring).

    Config:
        model: a folder with the weights and tokenizer, or a model id already in the local
            Hugging Face cache.
        revision: the cached revision to use (``None``: the default).
        device: ``cpu``, ``cuda``, ``cuda:1``, ``mps``.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        max_new_tokens: reply length cap.
        temperature: 0 decodes greedily; above 0 samples (with ``top_p`` and ``seed``).
        top_p: nucleus sampling mass when sampling.
        seed: sampling seed.
        local_files_only: never download (the default; set false only where downloads are allowed).
        trust_remote_code: allow the model folder's own Python code.
        chat_template: a Jinja chat template overriding the tokenizer's.
        parse_retries: times a task reply that does not parse is answered with a correction.
    """

    volatile_fields: ClassVar[tuple[str, ...]] = ("device", "parse_retries", "local_files_only", "progress")

    #: whether the model reads images is known once its config is read (``vision``)
    supports: ClassVar[tuple[str, ...]] = ("chat", "tools", "task:*")
    maybe_supports: ClassVar[tuple[str, ...]] = ("images",)

    @dataclass
    class Config:
        model: str = "Qwen/Qwen2.5-1.5B-Instruct"
        revision: str | None = None
        device: str = "cpu"
        dtype: DType = DType.auto
        max_new_tokens: int = 512
        temperature: float = 0.0
        top_p: float = bounded(1.0, 0.0, 1.0)
        seed: int = 0
        local_files_only: bool = True
        trust_remote_code: bool = False
        chat_template: str | None = None
        parse_retries: int = 1

    def __init__(self, cfg: Any = None, **deps: Any):
        super().__init__(cfg, **deps)
        if self.cfg.max_new_tokens < 1:
            raise InputError(f"llm 'transformers': max_new_tokens must be at least 1, got {self.cfg.max_new_tokens}")
        self._model = None
        self._tokenizer = None
        self._processor = None  # image-text-to-text models only
        self._vision: bool | None = None
        self._lock = threading.Lock()

    @property
    def vision(self) -> bool:  # type: ignore[override]
        """Whether the model reads images: its config has a ``vision_config`` (read from the
        config file alone; no weights load). A config that cannot be read counts as text-only;
        loading then fails with its own clear error."""
        if self._vision is None:
            transformers = require("transformers", "hf", feature="llm 'transformers'")
            c = self.cfg
            try:
                conf = transformers.AutoConfig.from_pretrained(
                    c.model,
                    revision=c.revision,
                    local_files_only=c.local_files_only,
                    trust_remote_code=c.trust_remote_code,
                )
                self._vision = getattr(conf, "vision_config", None) is not None
            except (OSError, ValueError):
                self._vision = False
        return self._vision

    # -- identity and loading ------------------------------------------------------------
    def _local_folder(self) -> Path | None:
        p = Path(self.cfg.model).expanduser()
        if p.is_dir():
            return p
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(self.cfg.model, revision=self.cfg.revision, local_files_only=True))
        except Exception:  # not in the cache (or no huggingface_hub): identified by name
            return None

    def model_identity(self) -> str:
        folder = self._local_folder()
        if folder is None:
            return f"hf:{self.cfg.model}@{self.cfg.revision or 'default'}"
        return f"weights:{weights_identity(folder)}"

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def _load(self):
        with self._lock:
            if self._model is not None:
                return self._model, self._tokenizer
            torch = require("torch", "hf", feature="llm 'transformers'")
            transformers = require("transformers", "hf", feature="llm 'transformers'")
            c = self.cfg
            kw = {
                "revision": c.revision,
                "local_files_only": c.local_files_only,
                "trust_remote_code": c.trust_remote_code,
            }
            try:
                dtype = "auto" if c.dtype == "auto" else getattr(torch, c.dtype)
                if self.vision:
                    self._processor = transformers.AutoProcessor.from_pretrained(c.model, **kw)
                    tok = self._processor.tokenizer
                    model = transformers.AutoModelForImageTextToText.from_pretrained(c.model, dtype=dtype, **kw)
                else:
                    tok = transformers.AutoTokenizer.from_pretrained(c.model, **kw)
                    model = transformers.AutoModelForCausalLM.from_pretrained(c.model, dtype=dtype, **kw)
            except OSError as e:
                raise InputError(
                    f"llm 'transformers': cannot load model '{c.model}' ({_first_line(e)}); point llm.model "
                    "at a folder holding the weights and tokenizer (nothing is downloaded at run time)"
                ) from None
            model.to(c.device).eval()
            if c.chat_template:
                (self._processor or tok).chat_template = c.chat_template
            self._model, self._tokenizer = model, tok
            return model, tok

    # -- prompting -----------------------------------------------------------------------
    def _messages(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """The messages as the chat template takes them, and the image paths in order: a
        VLM's image parts become ``{"type": "image"}`` placeholders, a text model refuses them."""
        out, images = [], []
        for i, m in enumerate(messages):
            content = m.get("content")
            if isinstance(content, list):
                has_image = any(isinstance(p, dict) and p.get("type") != "text" for p in content)
                if has_image and self._processor is None:
                    raise InputError(f"llm 'transformers' is text-only: message {i} holds an image")
                if has_image:
                    parts = []
                    for p in content:
                        if p.get("type") == "text":
                            parts.append({"type": "text", "text": str(p.get("text", ""))})
                        else:
                            images.append(str(p.get("image") or p.get("path") or p.get("url")))
                            parts.append({"type": "image"})
                    content = parts
                else:
                    content = "\n".join(str(p.get("text", "")) for p in content)
            msg = {"role": m.get("role", "user"), "content": content or ""}
            if m.get("tool_calls"):
                msg["tool_calls"] = [
                    {
                        "type": "function",
                        "function": {
                            "name": tc.get("name") or tc["function"]["name"],
                            "arguments": tc.get("arguments") or tc["function"]["arguments"],
                        },
                    }
                    for tc in m["tool_calls"]
                ]
            out.append(msg)
        return out, images

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt text the model sees for these messages (image parts as the template's
        image tokens)."""
        return self._render(messages, tools)[0]

    def _render(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[str, list[str]]:
        _, tok = self._load()
        msgs, images = self._messages(messages)
        templater = self._processor if getattr(self._processor, "chat_template", None) else tok
        if getattr(templater, "chat_template", None):
            kw = {"tools": tools} if tools else {}
            return templater.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw), images
        if images:
            raise InputError(
                f"llm 'transformers': model '{self.cfg.model}' has no chat template to place its "
                f"{len(images)} image(s); set llm.chat_template"
            )
        if len(msgs) == 1 and msgs[0]["role"] == "user" and not tools:
            return msgs[0]["content"], images
        lines = []
        if tools:
            lines.append(
                'System: You can call these tools by replying <tool_call>{"name": ..., "arguments": {...}}</tool_call>:\n'
                + json.dumps(tools, ensure_ascii=False)
            )
        lines += [f"{m['role'].capitalize()}: {m['content']}" for m in msgs]
        return "\n".join(lines) + "\nAssistant:", images

    def generate(self, prompt: str, images: list[str] | tuple = ()) -> str:
        """Decode a reply to ``prompt`` (greedy at temperature 0); ``images`` (paths, in the
        order of the prompt's image tokens) go through the VLM's processor."""
        model, tok = self._load()
        torch = require("torch", "hf")
        c = self.cfg
        if images:
            from ...framework.images import load_rgb

            enc = self._processor(text=prompt, images=[load_rgb(p) for p in images], return_tensors="pt").to(
                model.device
            )
            enc["pixel_values"] = enc["pixel_values"].to(model.dtype)
        else:
            has_template = bool(getattr(self._processor or tok, "chat_template", None))
            enc = tok(prompt, return_tensors="pt", add_special_tokens=not has_template).to(model.device)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        kw: dict[str, Any] = {"max_new_tokens": c.max_new_tokens, "pad_token_id": pad}
        if c.temperature > 0:
            torch.manual_seed(c.seed)
            kw.update(do_sample=True, temperature=c.temperature, top_p=c.top_p)
        else:
            kw.update(do_sample=False)
        with self._lock, torch.inference_mode():
            out = model.generate(**enc, **kw)
        return tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True).strip()

    @staticmethod
    def _tool_calls(text: str) -> tuple[str, list[ToolCall]]:
        calls = []
        for i, block in enumerate(_TOOL_BLOCK.findall(text)):
            try:
                obj = extract_json(block, expect=dict, what=f"tool call {i}")
            except ReplyParseError:
                continue
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):
                args = extract_json(args, expect=dict, what=f"arguments of tool call '{obj.get('name')}'")
            if obj.get("name"):
                calls.append(ToolCall(id=f"call_{i}", name=str(obj["name"]), arguments=args or {}))
        if calls:
            return _TOOL_BLOCK.sub("", text).strip(), calls
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                obj = extract_json(stripped, expect=dict)
            except ReplyParseError:
                return text, []
            if set(obj) >= {"name"} and ("arguments" in obj or "parameters" in obj) and len(obj) <= 3:
                args = obj.get("arguments", obj.get("parameters")) or {}
                if isinstance(args, dict):
                    return "", [ToolCall(id="call_0", name=str(obj["name"]), arguments=args)]
        return text, []

    def chat(self, messages: list[dict], *, tools: list[dict] | None = None, json_mode: bool = False) -> ChatReply:
        """One reply (blocking; the model loads on the first call)."""
        text = self.generate(*self._render(messages, tools))
        if tools:
            text, calls = self._tool_calls(text)
            return ChatReply(text=text, tool_calls=calls)
        return ChatReply(text=text)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
