"""Every module logs under its own name, below the one parent logger ``agentcir``."""

import ast
import importlib
import logging
from pathlib import Path

import agentcir

PACKAGE = Path(agentcir.__file__).parent
# the parent logger is configured by name (the CLI sets its level); exif.py quiets a library's logger
NAMED = {"cli.py": {"agentcir"}, "framework/methods/imageseeker/exif.py": {"exifread"}}


def _logger_names(path: Path) -> list[str]:
    """The arguments of every ``logging.getLogger(...)`` call in ``path``, as source text."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger" and node.args:
            arg = node.args[0]
            out.append(arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg))
    return out


def test_modules_log_under_their_own_name():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for name in _logger_names(path):
            if name != "__name__" and name not in NAMED.get(rel, ()):
                wrong.append(f"{rel}: getLogger({name!r})")
    assert not wrong, "use logging.getLogger(__name__):\n" + "\n".join(wrong)


def test_a_module_logger_reaches_the_agentcir_logger(caplog):
    gallery = importlib.import_module("agentcir.framework.gallery")
    assert gallery.log.name == "agentcir.framework.gallery"
    with caplog.at_level(logging.WARNING, logger="agentcir"):
        gallery.log.warning("a warning from the gallery module")
    assert [r.name for r in caplog.records] == ["agentcir.framework.gallery"]
    with caplog.at_level(logging.ERROR, logger="agentcir"):  # the parent's level governs its children
        gallery.log.warning("not shown")
    assert len(caplog.records) == 1
