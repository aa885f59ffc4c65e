"""refine_loop: plan a target description, retrieve, let the LLM critique the top candidates and
refine the description, a few rounds; then rank the gallery with the final description.

A worked example of an agentcir method plugin (``docs/writing-a-method.md``).
"""

__version__ = "0.1.0"
