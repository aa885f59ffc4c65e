"""Concrete registered components, one folder per kind. Import nothing here: each module
is imported on demand when its registry key is looked up (see agentcir.registry)."""
