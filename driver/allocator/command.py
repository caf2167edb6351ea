"""`carve allocate`: the allocator as a dry run over files, to answer "why does my claim not fit?".

Reads ResourceSlices, DeviceClasses and ResourceClaims from files or directories (kubectl -f style;
multi-document YAML, read through libyaml (yaml_load), or JSON; `kind: List` and `*List` kinds too; a
ResourceClaimTemplate counts as the claim it would create; objects of other kinds, such as the Pod
next to a template, are skipped with one note on stderr; an object given twice is an error naming
both places), allocates the claims in order (each allocated claim holds its devices for the next),
and prints a `List` of the claims with `status.allocation`, or with the annotation
allocate.carve.dev/reason when they do not fit. Exit codes: 0 all allocated, 1 some did not fit, 2 bad input.
A malformed claim (wrong field types, nested past decode.MAX_DEPTH) is bad input for that claim only: it is
named on stderr and listed with the reason `invalid claim: ...`, the other claims are still allocated,
and the exit code is 2; a malformed slice or class is bad input for the whole run.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from driver.allocator import quantity as q
from driver.allocator import yaml_load
from driver.allocator.allocator import Allocator, Unallocatable
from driver.allocator.model import ModelError, object_name, read_claim, read_class, read_slice
from driver.cli import CliError
from driver.cluster.decode import MAX_DEPTH, DecodeError, decode_list, too_deep
from driver.errors import not_text
from driver.names import ALLOCATE_REASON_ANNOTATION, DRIVER_NAME
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimRef, PrepareError, plan_claim

SLICE_KINDS = ("ResourceSlice",)
CLASS_KINDS = ("DeviceClass",)
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
FILE_SUFFIXES = (".yaml", ".yml", ".json")
UNDECODABLE = "carve.dev/undecodable"  # key of the stand-in for an object nested past decode.MAX_DEPTH
# libyaml's dumper when PyYAML was built with it (the wheels are); reading is yaml_load's job:
# parsing the slices of 100 nodes x 8 GPUs took 75% of a run with the pure-Python loader.
YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = "file or directory, repeatable; other kinds in it are skipped"
    parser.add_argument("--slices", action="append", required=True, metavar="PATH",
                        help=f"ResourceSlices ({where})")
    parser.add_argument("--classes", action="append", required=True, metavar="PATH",
                        help=f"DeviceClasses ({where})")
    parser.add_argument("--claims", action="append", required=True, metavar="PATH",
                        help=f"ResourceClaims or ResourceClaimTemplates to allocate, in order ({where})")
    parser.add_argument("--allocated", action="append", default=[], metavar="PATH",
                        help=f"claims that already carry status.allocation ({where})")
    parser.add_argument("--node", default=None,
                        help="allocate on this node only (default: the first node that fits)")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format")


def expand(paths: list[str], flag: str) -> list[str]:
    """kubectl -f style: a directory stands for its *.yaml, *.yml and *.json files (not recursive)."""
    out = []
    for path in paths:
        p = Path(path)
        if path != "-" and p.is_dir():
            files = sorted(str(f) for f in p.iterdir() if f.is_file() and f.suffix in FILE_SUFFIXES)
            if not files:
                raise CliError(f"{flag} {path}: directory holds no {', '.join(FILE_SUFFIXES)} files")
            out += files
        else:
            out.append(path)
    return out


def documents(path: str) -> Iterator[tuple[str, dict]]:
    """(where, object) for every object in the file; `where` is "FILE document N[ item M]"."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise CliError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CliError(not_text(path, e)) from None
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                loaded = json.loads(text)
            except RecursionError:  # one object nested past the decoder: decode the list item by item
                yield from _by_item(path, text)
                return
            docs = loaded if isinstance(loaded, list) else [loaded]
        else:
            docs = yaml_load.load_all(text)  # libyaml refuses nesting past 1000 levels: a YAMLError
    except (json.JSONDecodeError, yaml.YAMLError, DecodeError) as e:
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
                yield f"{where} item {j}", _bounded(item)
        else:
            yield where, _bounded(doc)


def _bounded(obj: dict) -> dict:
    """The object, or its undecodable stand-in when it nests deeper than carve reads (decode.MAX_DEPTH)."""
    path = too_deep(obj)
    if path is None:
        return obj
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return _stand_in(str(obj.get("kind") or ""), meta,
                     f"{path.lstrip('.')[:120]}: nested deeper than {MAX_DEPTH} levels")


def _stand_in(kind: str, meta: dict, reason: str) -> dict:
    keep = {k: meta[k] for k in ("name", "namespace") if isinstance(meta.get(k), str)}
    return {"kind": kind, "metadata": keep, UNDECODABLE: reason}


def _by_item(path: str, text: str) -> Iterator[tuple[str, dict]]:
    _, good, bad = decode_list(text)
    for j, item in enumerate(good, 1):
        yield f"{path} document 1 item {j}", item
    for b in bad:
        meta = {"name": b.name, "namespace": b.namespace} if b.namespace else {"name": b.name}
        yield f"{path} document 1 ({b.kind} {b.name})", _stand_in(b.kind, meta, b.reason)


class Loader:
    """Reads the files of each flag, keeps the kinds that flag takes, and remembers what it skipped
    (pods next to their claim templates, say) for one note at the end."""

    def __init__(self) -> None:
        self.skipped: list[str] = []

    def load(self, flag: str, paths: list[str], kinds: tuple[str, ...]) -> list[tuple[str, dict]]:
        out = []
        seen: dict[tuple[str, str], str] = {}
        for path in expand(paths, flag):
            for where, obj in documents(path):
                if UNDECODABLE in obj and flag != "--claims":
                    raise CliError(f"{where}: {obj[UNDECODABLE]}")  # slices, classes: the whole run's input
                kind = obj.get("kind") or kinds[0]  # a bare object is taken as the flag's kind
                if kind not in kinds:
                    self.skipped.append(f"{kind} {object_name(obj)} ({where})")
                    continue
                meta = obj.get("metadata")
                if not isinstance(meta, dict) or not meta.get("name"):
                    raise CliError(f"{where}: {kind}: metadata.name is missing")
                key = (kind, object_name(obj))
                if key in seen:
                    raise CliError(f"{where}: {kind} {key[1]} is given twice: here and in {seen[key]}")
                seen[key] = where
                out.append((where, obj))
        return out

    def note(self, shown: int = 3) -> None:
        if not self.skipped:
            return
        listed = "; ".join(self.skipped[:shown])
        more = f"; {len(self.skipped) - shown} more" if len(self.skipped) > shown else ""
        print(f"carve allocate: skipped {len(self.skipped)} object(s) of kinds it does not read: "
              f"{listed}{more}", file=sys.stderr)


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


# The fields of a request in resource.k8s.io/v1: anything else (a typo such as `capacity.request`) is an
# error, not a silent fallback to defaults (the API server prunes unknown fields; a claim written for
# `kubectl apply` must not quietly lose its quota).
_REQUEST_FIELDS = {"name", "exactly", "firstAvailable"}
_EXACT_FIELDS = {"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations",
                 "capacity"}
_SUB_FIELDS = (_EXACT_FIELDS - {"adminAccess"}) | {"name"}
_CAPACITY_FIELDS = {"requests"}
# HAMi counts `nvidia.com/gpumem` in MiB; a carve memory request is a Kubernetes quantity in bytes.
MIB = 1 << 20


def _unknown(where: str, obj: object, allowed: set[str]) -> None:
    if not isinstance(obj, dict):
        return
    extra = sorted(set(obj) - allowed)
    if extra:
        raise ModelError(f"{where}.{extra[0]}: unknown field; one of {', '.join(sorted(allowed))}")


def check_request_fields(claim: dict) -> None:
    """Refuse unknown fields in spec.devices.requests (ModelError naming the field path)."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    for i, req in enumerate(requests if isinstance(requests, list) else []):
        where = f"spec.devices.requests[{i}]"
        _unknown(where, req, _REQUEST_FIELDS)
        if not isinstance(req, dict):
            continue
        alternatives = [(f"{where}.exactly", req.get("exactly"), _EXACT_FIELDS)]
        subs = req.get("firstAvailable")
        alternatives += [(f"{where}.firstAvailable[{k}]", s, _SUB_FIELDS)
                         for k, s in enumerate(subs if isinstance(subs, list) else [])]
        for alt_where, alt, allowed in alternatives:
            _unknown(alt_where, alt, allowed)
            if isinstance(alt, dict):
                _unknown(f"{alt_where}.capacity", alt.get("capacity"), _CAPACITY_FIELDS)


def hami_memory_warnings(where: str, claim: dict) -> list[str]:
    """A memory request under 1Mi is almost surely HAMi's MiB written as a carve quantity (bytes)."""
    out = []
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    for i, req in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(req, dict):
            continue
        alts = [("exactly", req.get("exactly"))]
        alts += [(f"firstAvailable[{k}]", s) for k, s in enumerate(req.get("firstAvailable") or [])]
        for name, alt in alts:
            asked = ((alt or {}).get("capacity") or {}).get("requests") or {} if isinstance(alt, dict) else {}
            value = asked.get("memory") if isinstance(asked, dict) else None
            if value is None:
                continue
            try:
                amount = q.of(value).value
            except q.QuantityError:
                continue  # read_claim reports it
            if 0 < amount < MIB:
                out.append(f"{where}: spec.devices.requests[{i}].{name}.capacity.requests.memory: {value!r} "
                           f"is {amount} bytes; HAMi's nvidia.com/gpumem counts MiB, carve takes a quantity: "
                           f"write {value}Mi for {value} MiB")
    return out


def prepare_error(claim: dict, slices: list[dict]) -> str:
    """The error `carve plugin` would report when preparing this allocated claim, or "".

    Runs the plugin's own planner (driver/plugin/claims/plan.py: opaque configs parsed and bounded by the
    class's claimPolicy, one SliceConfig per claim, shareIDs, consumed capacity) on each pool's devices."""
    meta = claim.setdefault("metadata", {})
    ref = ClaimRef(meta.get("namespace") or "default", meta.get("name", ""), meta.get("uid") or "dry-run")
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    pools = sorted({r.get("pool", "") for r in results if r.get("driver") == DRIVER_NAME})
    for pool in pools:
        one = copy.deepcopy(claim)
        one["metadata"]["uid"] = ref.uid
        devices = one["status"]["allocation"]["devices"]
        devices["results"] = [r for r in devices["results"]
                              if r.get("driver") != DRIVER_NAME or r.get("pool") == pool]
        catalog = catalog_from_slices([s for s in slices if (s.get("spec") or {}).get("pool", {})
                                       .get("name") == pool and s["spec"].get("driver") == DRIVER_NAME])
        try:
            plan_claim(ref, one, pool, catalog)
        except PrepareError as e:
            return str(e)
    return ""


def run(args: argparse.Namespace) -> int:
    loader = Loader()
    slices = loader.load("--slices", args.slices, SLICE_KINDS)
    classes = loader.load("--classes", args.classes, CLASS_KINDS)
    claims = loader.load("--claims", args.claims, CLAIM_KINDS)
    allocated = loader.load("--allocated", args.allocated, ("ResourceClaim",))
    loader.note()
    if not claims:
        raise CliError(f"--claims {', '.join(args.claims)}: no ResourceClaim or ResourceClaimTemplate found")
    # Read each document alone first, so an error names its file and document; the allocator
    # takes the slices as read.
    parsed = []
    for where, obj in slices:
        try:
            parsed.append(read_slice(obj))
        except (ModelError, ValueError, KeyError, TypeError) as e:
            raise CliError(f"{where}: {e}") from None
    for where, obj in classes:
        try:
            read_class(obj)
        except ModelError as e:
            raise CliError(f"{where}: {e}") from None
    # A malformed claim fails that claim only: it is reported (and the exit status is 2, bad input),
    # the others are still allocated.
    invalid: dict[int, str] = {}
    for k, (where, obj) in enumerate(claims):
        if UNDECODABLE in obj:
            invalid[k] = f"{where}: {obj[UNDECODABLE]}"
            continue
        try:
            check_request_fields(as_claim(obj))
            read_claim(as_claim(obj))
        except (ModelError, ValueError, KeyError, TypeError, AttributeError) as e:
            invalid[k] = f"{where}: {e}"
    for k, (where, obj) in enumerate(claims):
        if k not in invalid:
            for warning in hami_memory_warnings(where, as_claim(obj)):
                print(f"carve allocate: warning: {warning}", file=sys.stderr)
    allocator = Allocator(parsed, [o for _, o in classes])
    for where, obj in allocated:
        try:
            allocator.add_allocated(obj)
        except (KeyError, TypeError, ValueError) as e:
            raise CliError(f"{where}: status.allocation: {e}") from None
    items = []
    failed = 0
    for k, (_, obj) in enumerate(claims):
        if k in invalid:
            print(f"carve allocate: {invalid[k]}", file=sys.stderr)
            bad = {key: value for key, value in obj.items() if key != UNDECODABLE}
            meta = bad.setdefault("metadata", {})
            meta.setdefault("annotations", {})[ALLOCATE_REASON_ANNOTATION] = f"invalid claim: {invalid[k]}"
            bad.pop("status", None)
            items.append(bad)
            continue
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
            refused = prepare_error(claim, [o for _, o in slices])
            if refused:
                # It would allocate, then the plugin would refuse it and the pod would sit in
                # ContainerCreating: report it as not allocatable, with prepare's own words.
                failed += 1
                claim.setdefault("metadata", {}).setdefault("annotations", {})[ALLOCATE_REASON_ANNOTATION] = (
                    f"prepare would fail: {refused}"
                )
                claim.pop("status", None)
                print(f"carve allocate: prepare would fail: {refused}", file=sys.stderr)
            else:
                allocator.add_allocated(claim)
        items.append(claim)
    out = {"apiVersion": "v1", "kind": "List", "items": items}
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print(yaml.dump(out, Dumper=YAML_DUMPER, sort_keys=False, width=1000), end="")
    return 2 if invalid else 1 if failed else 0

