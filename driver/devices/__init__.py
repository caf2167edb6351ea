"""carve devices."""
