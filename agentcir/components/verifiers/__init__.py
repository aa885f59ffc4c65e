"""verifiers."""
