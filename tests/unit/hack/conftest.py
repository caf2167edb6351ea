"""The generated-mutation runner is the package hack/mutation (not installed: hack/ holds scripts)."""

import sys
from pathlib import Path

HACK = str(Path(__file__).resolve().parents[3] / "hack")
if HACK not in sys.path:
    sys.path.insert(0, HACK)
