"""JSON Schemas of the opaque config kinds, and `python -m api.v1alpha1.schema --out DIR` to export them.

The exported files are committed under api/v1alpha1/schemas/ (`<Kind>.json`) for the Helm chart and the
docs; a test fails when they differ from what the models produce.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from api.v1alpha1.config import json_schemas
from driver.fsutil import write_atomic

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def render(schema: dict[str, Any]) -> bytes:
    """The committed form: sorted keys, two-space indent, trailing newline (stable diffs)."""
    return (json.dumps(schema, indent=2, sort_keys=True) + "\n").encode()


def export(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, schema in json_schemas().items():
        path = out_dir / f"{kind}.json"
        write_atomic(path, render(schema))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.v1alpha1.schema", description="Export JSON Schemas.")
    parser.add_argument(
        "--out", type=Path, default=SCHEMA_DIR, help="output directory (default: api/v1alpha1/schemas)"
    )
    args = parser.parse_args(argv)
    for path in export(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
