"""Every folder of Python modules under agentcir/ is a package that setup.py installs."""

from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_folder_is_an_installed_package():
    installed = set(find_packages(where=str(ROOT), include=["agentcir", "agentcir.*"]))
    folders = {
        p.parent.relative_to(ROOT).as_posix().replace("/", ".")
        for p in (ROOT / "agentcir").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    missing = sorted(folders - installed)
    assert not missing, f"folders of modules without __init__.py (left out of a wheel): {missing}"
