"""`import agentcir` (and the CLI, registries and runner modules) must not import heavy packages."""

import subprocess
import sys

HEAVY = ("torch", "numba", "transformers", "open_clip", "faiss", "hydra", "onnxruntime", "triton")


def test_import_is_light():
    code = (
        "import sys, agentcir, agentcir.registry, agentcir.cli, agentcir.framework.runner, "
        "agentcir.framework.gallery, agentcir.framework.recipe\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"importing agentcir pulled in: {out}"


def test_lazy_lookup_imports_only_its_module():
    code = (
        "import sys\nfrom agentcir.registry import DATASETS\nDATASETS.get('demo')\n"
        "print('agentcir.framework.datasets.composed' in sys.modules, 'agentcir.framework.methods.baselines' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]
