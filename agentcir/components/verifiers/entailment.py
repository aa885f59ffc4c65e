"""``verifier=entailment``: true/false by LLM entailment on the candidate's caption
(task ``entail``): a text-only LLM can verify without seeing images."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...framework.errors import InputError
from ...framework.interfaces import Verifier
from ...registry import VERIFIERS
from .answers import Unclear, ask


@VERIFIERS.register("entailment")
class EntailmentVerifier(Verifier):
    """Asks the injected LLM whether the candidate's caption entails a statement.

    - ``check(statement, caption=...)``: task ``entail`` with ``{statement, caption}``.
    - ``verify(candidate, instruction, caption=...)``: the same, with the instruction as
      the statement. A modification alone ("make it blue") is not a statement about the
      target, so callers pass a target description as ``instruction`` (OCTOPUS' and
      XR's target caption); the reference image and caption are not used.

    Both need the candidate's caption and fail naming it when it is missing.

    Config:
        prompt: prompt of the ``entail`` task.
        unclear: what an unclear reply counts as: ``no``, ``yes`` (both logged) or ``error``.
    """

    requires: ClassVar[tuple[str, ...]] = ("llm",)
    needs: ClassVar[dict[str, tuple[str, ...]]] = {"llm": ("task:entail",)}
    prompt_fields: ClassVar[tuple[str, ...]] = ("prompt",)

    @dataclass
    class Config:
        prompt: str = "tasks/entail"
        unclear: Unclear = Unclear.no

    def check(self, statement: str, *, candidate: Path | None = None, caption: str | None = None) -> bool:
        """Does ``caption`` (the candidate's) entail ``statement``?"""
        if not caption:
            raise InputError(
                f"verifier 'entailment' needs the candidate's caption (caption=) to judge "
                f"{statement!r}{f' for {candidate}' if candidate else ''}"
            )
        return ask(
            lambda: self.llm.run_task("entail", {"statement": statement, "caption": caption}, prompt=self.cfg.prompt),
            self.cfg.unclear,
            what="true/false answer of verifier 'entailment'",
        )

    def verify(
        self,
        candidate: Path,
        instruction: str,
        *,
        reference: Path | None = None,
        caption: str | None = None,
        reference_caption: str | None = None,
    ) -> bool:
        """Does the candidate's ``caption`` entail ``instruction`` (a target description)?"""
        return self.check(instruction, candidate=candidate, caption=caption)
