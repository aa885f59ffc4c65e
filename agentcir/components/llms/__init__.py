"""llms."""
