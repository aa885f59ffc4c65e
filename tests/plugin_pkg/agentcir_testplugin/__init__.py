"""A tiny third-party plugin used by agentcir's tests (installed into a temp dir by pip)."""
