"""`carve convert`: HAMi-style Pods and workloads (multi-document YAML, a file or stdin) to
ResourceClaimTemplates plus the rewritten manifests, printed as YAML (docs/migrate-from-hami.md).

Wiring only: read, convert each document with driver/convert/hami.py, print. Documents that ask for no
HAMi resource are printed unchanged, so a whole directory's manifests can go through it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from driver import names
from driver.cli import CliError
from driver.errors import not_text, yaml_error

MI = 1 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default="-", help="manifest file, or - for stdin (default: -)")
    p.add_argument(
        "--slices",
        default="",
        help="ResourceSlices (YAML/JSON, e.g. `kubectl get resourceslices -o yaml`): the GPU models whose "
        "memory turns nvidia.com/gpumem-percentage into amounts",
    )
    p.add_argument(
        "--gpu-model",
        action="append",
        default=[],
        metavar="PRODUCT=MEMORY",
        help="a GPU model and the memory a share of it may take, e.g. 'NVIDIA A100-SXM4-80GB=81408Mi' "
        "(repeatable; as --slices)",
    )
    p.add_argument(
        "--share-class",
        default=names.CLASS_VGPU,
        help="DeviceClass of shares (gpumem, percentage, cores): vgpu.carve.dev, vgpu-strict.carve.dev, "
        "mps.carve.dev",
    )
    p.add_argument(
        "--whole-class", default=names.CLASS_GPU, help="DeviceClass of whole GPUs (nvidia.com/gpu alone)"
    )
    p.add_argument("-o", "--output", default="yaml", choices=("yaml", "json"), help="output format")


def _load(path: str, what: str) -> list[Any]:
    label = "stdin" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except FileNotFoundError:
        raise CliError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{what} {path}: is a directory") from None
    except UnicodeDecodeError as e:
        raise CliError(not_text(label, e)) from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise CliError(yaml_error(label, e)) from None


def _models(args: argparse.Namespace):
    from driver.allocator import quantity
    from driver.convert.hami import GpuModel, models_from_slices

    models: list[GpuModel] = []
    if args.slices:
        docs = _load(args.slices, "--slices")
        items = [i for d in docs if isinstance(d, dict) for i in (d.get("items") or [d])]
        models += models_from_slices(i for i in items if isinstance(i, dict))
    for raw in args.gpu_model:
        product, sep, memory = raw.rpartition("=")
        try:
            value = int(quantity.parse(memory).value) if sep and product else 0
        except quantity.QuantityError:
            value = 0
        if value < MI:
            raise CliError(f"--gpu-model {raw!r}: expected PRODUCT=MEMORY, e.g. 'Tesla T4=15104Mi'")
        models.append(GpuModel(product, value))
    return tuple(models)


def run(args: argparse.Namespace) -> int:
    from driver.convert.hami import ConvertError, Options, convert_object

    options = Options(share_class=args.share_class, whole_class=args.whole_class, models=_models(args))
    label = "stdin" if args.file == "-" else args.file
    out: list[Any] = []
    for n, doc in enumerate(_load(args.file, "file"), 1):
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else None
        try:
            if not isinstance(doc, dict):
                raise ConvertError("not a Kubernetes object (a mapping with kind)")
            if items is not None:
                for item in items:
                    done = convert_object(item, options)
                    out += [*done.templates, done.obj]
                continue
            done = convert_object(doc, options)
        except ConvertError as e:
            raise CliError(f"{label} document {n}: {e}") from None
        out += [*done.templates, done.obj]
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2))
    else:
        print(yaml.safe_dump_all(out, sort_keys=False), end="")
    return 0
