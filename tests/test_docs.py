"""The documentation: the site builds in strict mode, the tutorials' code runs, the API
reference documents every public name it shows, and the pages describe the software (no
session narration, no references a reader cannot open, code paths that exist)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))
#: the pages checked for narration and references: the docs, the READMEs, the benchmark records
PAGES = sorted(
    [
        *DOCS.rglob("*.md"),
        ROOT / "README.md",
        *(ROOT / "agentcir").rglob("README.md"),
        *(ROOT / "benchmarks").rglob("*.md"),
        ROOT / "tests" / "README.md",
    ]
)
RUNNABLE = re.compile(r"<!-- runnable -->\n```python\n(.*?)```", re.S)

#: words that tell of the work that made the software rather than of the software
NARRATION = [
    r"\b(?:this|that|the same|a later|an earlier|the previous|the next|one|another) (?:work )?session\b",
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|\d+(?:st|nd|rd|th)) session\b",
    r"\bwork(?:ing)? sessions?\b",
    r"\bsessions? (?:that|which) (?:made|built|wrote|measured)\b",
    r"\bround \d+\b",
    r"\b(?:the|a|another|each|one|every) helper\b(?! (?:function|module|class|script|method|process|thread))",
    r"\bhelpers? (?:session|agent)s?\b",
]
#: references a reader of the repository cannot open
UNOPENABLE = [r"DESIGN\.md", r"\bissues? #\d+", r"\bissue \d+\b", r"\bissue-#\d+"]


def _mkdocs() -> bool:
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
    )


@pytest.mark.slow
@pytest.mark.skipif(
    not _mkdocs(),
    reason="mkdocs, mkdocs-material and mkdocstrings[python] are not installed (pip install 'agentcir[docs]')",
)
def test_site_builds_in_strict_mode(tmp_path):
    out = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    api = (out / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("compose", "run_recipe", "Searcher", "cosine_topk", "InputError"):
        assert name in api, f"the API reference lacks {name}"
    for page in TUTORIALS:
        assert (out / "tutorials" / page.stem / "index.html").is_file()


def _api_members() -> list[tuple[str, list[str] | None]]:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    found = re.findall(r"^::: ([\w.]+)(?:\n    options:\n      members: \[([^\]]*)\])?", text, re.M)
    return [(mod, [m.strip() for m in members.split(",")] if members else None) for mod, members in found]


def undocumented(module: str, members: list[str] | None) -> list[str]:
    """The public names the API reference would show for ``module`` that have no docstring."""
    mod = importlib.import_module(module)
    out = [] if mod.__doc__ else [module]
    if members is None:
        members = [
            n
            for n, o in vars(mod).items()
            if not n.startswith("_")
            and getattr(o, "__module__", None) == module
            and (inspect.isclass(o) or inspect.isfunction(o))
        ]
    for name in members:
        obj = getattr(mod, name)
        if not (obj.__doc__ if inspect.isclass(obj) else inspect.getdoc(obj)):
            out.append(f"{module}.{name}")
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if not attr.startswith("_") and inspect.isfunction(fn) and not fn.__doc__:
                    out.append(f"{module}.{name}.{attr}")
    return out


def test_the_api_reference_documents_every_name_it_shows():
    members = _api_members()
    assert members, "docs/api.md names no module"
    missing = [m for module, names in members for m in undocumented(module, names)]
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_a_missing_docstring_is_found(tmp_path, monkeypatch):
    (tmp_path / "undoc_mod.py").write_text(
        '"""A module."""\n\ndef documented():\n    """Yes."""\n\n\n'
        'def bare():\n    pass\n\n\nclass K:\n    """A class."""\n\n'
        "    def method(self):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert undocumented("undoc_mod", None) == ["undoc_mod.bare", "undoc_mod.K.method"]


@pytest.mark.slow
@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_code_runs(page, tmp_path):
    blocks = RUNNABLE.findall(page.read_text(encoding="utf-8"))
    assert blocks, f"{page.name} has no runnable code block"
    script = tmp_path / f"{page.stem}.py"
    script.write_text("\n\n".join(blocks), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"{page.name}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def narration(text: str) -> list[str]:
    """The phrases of ``text`` that narrate work sessions or cite what a reader cannot open."""
    return [m.group(0) for pat in NARRATION + UNOPENABLE for m in re.finditer(pat, text, re.I)]


def test_the_narration_check_finds_session_words():
    assert narration(
        "Measured in this session; the sixth session's runs; round 2; a helper wrote it; see DESIGN.md §5 and issue #14"
    ) == ["this session", "sixth session", "round 2", "a helper", "DESIGN.md", "issue #14"]
    assert narration("the agent's session memory; shared helpers of the backends; a helper function") == []


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_pages_describe_the_software(page):
    found = narration(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: {found}"


CODE_PATH = re.compile(r"`((?:agentcir|benchmarks|tests|docs)/[\w./-]*\w)(?:[:`]|::)")


def test_code_paths_in_the_docs_exist():
    missing = []
    for page in PAGES:
        for m in CODE_PATH.finditer(page.read_text(encoding="utf-8")):
            path = m.group(1)
            if not (ROOT / path).exists() and not (ROOT / path.split("::")[0]).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "paths that are not in the repository:\n" + "\n".join(missing)
