"""HAMi manifests to DRA: the pure conversion (hami.py) and `carve convert` (command.py)."""
