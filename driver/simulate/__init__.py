"""carve simulate."""
