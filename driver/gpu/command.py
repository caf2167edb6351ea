"""`carve inspect`: print this node's GPU inventory (NVML or fake GPUs) as a table, JSON or YAML."""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
from typing import Any

import yaml

from driver.cli import CliError
from driver.gpu import Gpu, InventoryError, discover

GI = 1024**3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", default="nvml", help="'nvml' (default) or 'fake:2xA100-80GB,1xT4'")
    parser.add_argument("--node-name", default=None, help="node name (seeds fake GPU identities)")
    parser.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table", help="output format"
    )


def inventory_document(gpus: list[Gpu], node_name: str) -> dict[str, Any]:
    """The inventory as plain data: every Gpu field, MIG profiles and instances included."""
    return {"node": node_name, "gpus": [dataclasses.asdict(g) for g in gpus]}


def _gib(n: int) -> str:
    return f"{n / GI:.1f}Gi"


def table(gpus: list[Gpu]) -> str:
    rows = [("GPU", "MINOR", "PRODUCT", "MEMORY", "SMS", "ARCH", "CC", "PCI", "MIG", "UUID")]
    for g in gpus:
        mig = ("on" if g.mig_enabled else "off") if g.mig_capable else "-"
        rows.append(
            (
                str(g.index),
                str(g.minor),
                g.product,
                _gib(g.memory_bytes),
                str(g.multiprocessors),
                g.architecture,
                g.cuda_compute_capability,
                g.pci_bus_id,
                mig,
                g.uuid,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if gpus:
        lines.append(f"driver {gpus[0].driver_version}, CUDA {gpus[0].cuda_driver_version}")
    for g in gpus:
        if g.mig_profiles:
            profiles = ", ".join(f"{p.name}x{len(p.placements)}" for p in g.mig_profiles)
            lines.append(f"gpu-{g.minor} MIG profiles (placements): {profiles}")
        for m in g.mig_instances:
            lines.append(
                f"gpu-{g.minor} MIG instance {m.profile_name} at {m.placement.start}:{m.placement.size} "
                f"gi={m.gpu_instance_id} ci={m.compute_instance_id} {m.uuid}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    node_name = args.node_name or socket.gethostname()
    try:
        gpus = discover(args.gpus, node_name)
    except InventoryError as e:
        raise CliError(str(e)) from None
    if args.output == "json":
        print(json.dumps(inventory_document(gpus, node_name), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(inventory_document(gpus, node_name), sort_keys=False), end="")
    else:
        print(table(gpus))
    return 0
