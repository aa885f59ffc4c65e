"""editors."""
