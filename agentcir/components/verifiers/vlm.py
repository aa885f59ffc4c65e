"""``verifier=vlm``: yes/no and true/false judgements by the injected VLM (tasks ``verify``
and ``answer``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...framework.errors import InputError
from ...framework.interfaces import Verifier
from ...registry import VERIFIERS
from .answers import aask, ask, check_policy


@VERIFIERS.register("vlm")
class VLMVerifier(Verifier):
    """Asks the injected VLM; replies are parsed strictly (:mod:`.answers`).

    - ``verify(candidate, instruction, reference=..., reference_caption=...)``: task
      ``verify`` with images ``[reference, candidate]`` and prompt ``verify_prompt``;
      without a reference image, images ``[candidate]``, the reference described by
      ``reference_caption``, prompt ``verify_caption_prompt``. Needs the reference image
      or its caption.
    - ``check(statement, candidate=...)``: task ``answer`` on ``[candidate]``, true/false.

    Config:
        verify_prompt: prompt of ``verify`` with the reference image.
        verify_caption_prompt: prompt of ``verify`` with only the reference's caption.
        answer_prompt: prompt of ``check`` (task ``answer``).
        unclear: what an unclear reply counts as: ``no``, ``yes`` (both logged) or ``error``.
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    prompt_fields: ClassVar[tuple[str, ...]] = ("verify_prompt", "verify_caption_prompt", "answer_prompt")

    @dataclass
    class Config:
        verify_prompt: str = "tasks/verify"
        verify_caption_prompt: str = "verifier/verify_caption"
        answer_prompt: str = "tasks/answer"
        unclear: str = "no"

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        check_policy(self.cfg.unclear, "verifier 'vlm'")

    def _verify_request(self, candidate: Path, instruction: str, reference: Path | None,
                        reference_caption: str | None) -> tuple[dict, list[Path], str]:
        variables = {"modification": instruction, "reference_caption": reference_caption or "unknown"}
        if reference is not None:
            return variables, [Path(reference), Path(candidate)], self.cfg.verify_prompt
        if reference_caption:
            return variables, [Path(candidate)], self.cfg.verify_caption_prompt
        raise InputError("verifier 'vlm': verify needs the reference image or the reference's caption "
                         "(reference= or reference_caption=)")

    def verify(self, candidate: Path, instruction: str, *, reference: Path | None = None,
               caption: str | None = None, reference_caption: str | None = None) -> bool:
        """Does ``candidate`` show the reference changed by ``instruction``? (``caption``, the
        candidate's caption, is not used: the VLM looks at the image.)"""
        variables, images, prompt = self._verify_request(candidate, instruction, reference, reference_caption)
        return ask(lambda: self.llm.run_task("verify", variables, images=images, prompt=prompt), self.cfg.unclear,
                   what=f"yes/no answer of verifier 'vlm' for '{candidate}'")

    async def averify(self, candidate: Path, instruction: str, *, reference: Path | None = None,
                      caption: str | None = None, reference_caption: str | None = None) -> bool:
        """:meth:`verify` awaiting the LLM (no thread held while the endpoint answers)."""
        variables, images, prompt = self._verify_request(candidate, instruction, reference, reference_caption)
        return await aask(lambda: self.llm.arun_task("verify", variables, images=images, prompt=prompt),
                          self.cfg.unclear, what=f"yes/no answer of verifier 'vlm' for '{candidate}'")

    def check(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """Is ``statement`` true of the candidate image? (needs ``candidate``)"""
        if candidate is None:
            raise InputError("verifier 'vlm': check needs the candidate image (candidate=); "
                             "to judge a caption use verifier=entailment")
        return ask(lambda: self.llm.run_task("answer", {"statement": statement}, images=[Path(candidate)],
                                             prompt=self.cfg.answer_prompt),
                   self.cfg.unclear, what=f"true/false answer of verifier 'vlm' for '{candidate}'")

    async def acheck(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """:meth:`check` awaiting the LLM (no thread held while the endpoint answers)."""
        if candidate is None:
            return self.check(statement, candidate=candidate, caption=caption)  # raises the InputError
        return await aask(lambda: self.llm.arun_task("answer", {"statement": statement}, images=[Path(candidate)],
                                                     prompt=self.cfg.answer_prompt),
                          self.cfg.unclear, what=f"true/false answer of verifier 'vlm' for '{candidate}'")
