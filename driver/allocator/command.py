"""`carve allocate`: the allocator as a dry run over files, to answer "why does my claim not fit?".

Reads ResourceSlices, DeviceClasses and ResourceClaims (multi-document YAML or JSON, `kind: List`
and `*List` kinds too; a ResourceClaimTemplate counts as the claim it would create), allocates the
claims in order (each allocated claim holds its devices for the next), and prints a `List` of the
claims with `status.allocation`, or with the annotation allocate.carve.dev/reason when they do not
fit. Exit codes: 0 all allocated, 1 some did not fit, 2 bad input.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from driver.allocator.allocator import Allocator, Unallocatable
from driver.allocator.model import ModelError, read_class, read_slice
from driver.cli import CliError
from driver.names import ALLOCATE_REASON_ANNOTATION


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--slices", action="append", required=True, metavar="FILE",
                        help="ResourceSlices (repeatable)")
    parser.add_argument("--classes", action="append", required=True, metavar="FILE",
                        help="DeviceClasses (repeatable)")
    parser.add_argument("--claims", action="append", required=True, metavar="FILE",
                        help="ResourceClaims or ResourceClaimTemplates to allocate, in order (repeatable)")
    parser.add_argument("--allocated", action="append", default=[], metavar="FILE",
                        help="claims that already carry status.allocation (repeatable)")
    parser.add_argument("--node", default=None,
                        help="allocate on this node only (default: the first node that fits)")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format")


def documents(path: str) -> Iterator[tuple[str, dict]]:
    """(where, object) for every object in the file; `where` is "FILE document N[ item M]"."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise CliError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        if text.lstrip().startswith(("{", "[")):
            loaded = json.loads(text)
            docs = loaded if isinstance(loaded, list) else [loaded]
        else:
            docs = list(yaml.safe_load_all(text))
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CliError(f"{path}: not valid YAML or JSON: {first}") from None
    for i, doc in enumerate(docs, 1):
        where = f"{path} document {i}"
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise CliError(f"{where}: expected an object, got {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            for j, item in enumerate(doc["items"], 1):
                if not isinstance(item, dict):
                    raise CliError(f"{where} item {j}: expected an object")
                yield f"{where} item {j}", item
        else:
            yield where, doc


def _load(paths: list[str], kinds: tuple[str, ...]) -> list[tuple[str, dict]]:
    out = []
    for path in paths:
        for where, obj in documents(path):
            kind = obj.get("kind", kinds[0])
            if kind not in kinds:
                raise CliError(f"{where}: expected {' or '.join(kinds)}, got {kind}")
            out.append((where, obj))
    return out


def as_claim(obj: dict) -> dict:
    """A ResourceClaimTemplate becomes the claim it would create; a claim is copied."""
    if obj.get("kind") == "ResourceClaimTemplate":
        meta = obj.get("metadata") or {}
        template = (obj.get("spec") or {})
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {k: v for k, v in meta.items() if k in ("name", "namespace")}
                | dict(template.get("metadata") or {}),
                "spec": copy.deepcopy(template.get("spec") or {})}
    return copy.deepcopy(obj)


def run(args: argparse.Namespace) -> int:
    slices = _load(args.slices, ("ResourceSlice",))
    classes = _load(args.classes, ("DeviceClass",))
    claims = _load(args.claims, ("ResourceClaim", "ResourceClaimTemplate"))
    allocated = _load(args.allocated, ("ResourceClaim",))
    # Check each document alone first, so an error names its file and document.
    for docs, reader in ((slices, read_slice), (classes, read_class)):
        for where, obj in docs:
            try:
                reader(obj)
            except (ModelError, ValueError, KeyError, TypeError) as e:
                raise CliError(f"{where}: {e}") from None
    allocator = Allocator([o for _, o in slices], [o for _, o in classes])
    for where, obj in allocated:
        try:
            allocator.add_allocated(obj)
        except (KeyError, TypeError, ValueError) as e:
            raise CliError(f"{where}: status.allocation: {e}") from None
    items = []
    failed = 0
    for _, obj in claims:
        claim = as_claim(obj)
        try:
            allocation = allocator.allocate(claim, node=args.node)
        except Unallocatable as e:
            failed += 1
            meta = claim.setdefault("metadata", {})
            meta.setdefault("annotations", {})[ALLOCATE_REASON_ANNOTATION] = e.reason
            claim.pop("status", None)
        else:
            claim["status"] = {**(claim.get("status") or {}), "allocation": allocation}
            allocator.add_allocated(claim)
        items.append(claim)
    out = {"apiVersion": "v1", "kind": "List", "items": items}
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print(yaml.safe_dump(out, sort_keys=False, width=1000), end="")
    return 1 if failed else 0

