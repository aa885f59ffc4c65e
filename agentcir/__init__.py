"""agentcir: training-free agentic image retrieval (OCTOPUS, XR, ImageSeeker and baselines).

Importing the package is light: no torch, numba, transformers, open_clip, faiss or hydra.
Components are looked up through the registries in :mod:`agentcir.registry`, recipes are
composed with :func:`agentcir.framework.recipe.compose`, runs go through
:func:`agentcir.framework.runner.run_recipe` or the ``agentcir`` command.
"""

__version__ = "0.1.0"

from . import _threads  # noqa: E402  (thread policy: best before numpy loads OpenBLAS)

_threads.apply()
