"""carve plugin."""
