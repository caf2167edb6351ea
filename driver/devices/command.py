"""`carve slices`: print the ResourceSlices a node would publish, as a `List`, in YAML or JSON."""

from __future__ import annotations

import argparse
import json
import socket
import sys

import yaml

from driver import names
from driver.cli import CliError
from driver.devices import LIMITS, ModelError, Settings, build_slices, limits_for
from driver.devices.attributes import quantity_bytes
from driver.devices.base import DEFAULT_CONTEXT_RESERVE_QUANTITY
from driver.devices.rules import can_run, parse_rules, resolve
from driver.gpu import InventoryError, discover

# Strategies whose fields sit behind feature gates that are off by default before 1.36.
_GATES = {
    names.STRATEGY_SOFT: ("DRAConsumableCapacity", "consumable_capacity_default"),
    names.STRATEGY_TIMESLICE: ("DRAConsumableCapacity", "consumable_capacity_default"),
    names.STRATEGY_MIG: ("DRAPartitionableDevices", "partitionable_devices_default"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", default=None, help="node (and pool) name; default: this host's name")
    parser.add_argument("--gpus", default="nvml", help="'nvml' (default) or 'fake:2xA100-80GB,1xT4'")
    parser.add_argument(
        "--strategy",
        default="exclusive",
        help="strategy rules as `carve plugin` takes them: 'soft', '0=mig,1=soft,exclusive', "
        "'*A100*=mig,T4=soft,exclusive' (docs/configuration.md)",
    )
    parser.add_argument(
        "--fallback-strategy",
        default=names.STRATEGY_SOFT,
        choices=(
            names.STRATEGY_EXCLUSIVE,
            names.STRATEGY_SOFT,
            names.STRATEGY_SLOTS,
            names.STRATEGY_TIMESLICE,
        ),
        help="strategy of a GPU that cannot run the one its rule gives, as `carve plugin` (default soft)",
    )
    parser.add_argument(
        "--k8s-version", default="1.34", help=f"target Kubernetes version: {', '.join(LIMITS)}"
    )
    parser.add_argument(
        "--split-count",
        type=int,
        default=Settings.split_count,
        help="shares per GPU for soft and slots (default 10)",
    )
    parser.add_argument(
        "--soft-context-reserve",
        default=DEFAULT_CONTEXT_RESERVE_QUANTITY,
        help=f"GPU memory kept back per share (soft, slots) for its CUDA context, as `carve plugin` "
        f"({DEFAULT_CONTEXT_RESERVE_QUANTITY})",
    )
    parser.add_argument("--generation", type=int, default=1, help="pool generation")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help="output format")


def run(args: argparse.Namespace) -> int:
    node_name = args.node_name or socket.gethostname()
    try:
        limits = limits_for(args.k8s_version)
        reserve = quantity_bytes(args.soft_context_reserve, "--soft-context-reserve")
        settings = Settings(split_count=args.split_count, soft_context_reserve=reserve)
        gpus = discover(args.gpus, node_name)
        rules = parse_rules(args.strategy)
        strategies = {}
        for gpu in gpus:
            r = resolve([gpu], rules)[gpu.index]
            why = can_run(gpu, r.strategy)
            strategies[gpu.index] = args.fallback_strategy if why else r.strategy
            if why:
                print(
                    f"carve slices: warning: {why}: rule {r.rule or '(built-in default)'!r} gives "
                    f"{r.strategy}; {gpu.name} is shown under --fallback-strategy {args.fallback_strategy}",
                    file=sys.stderr,
                )
        for text in rules.unmatched(gpus):
            print(f"carve slices: warning: rule {text!r} matches no GPU of this node", file=sys.stderr)
        slices = build_slices(node_name, gpus, strategies, settings, limits.version, args.generation)
    except (InventoryError, ModelError) as e:
        raise CliError(str(e)) from None
    for gate, field in sorted({_GATES[s] for s in strategies.values() if s in _GATES}):
        if not getattr(limits, field):
            print(
                f"carve slices: note: these slices need the {gate} feature gate, off by default on "
                f"Kubernetes {limits.version}; without it the API server drops those fields",
                file=sys.stderr,
            )
    document = {"apiVersion": "v1", "kind": "List", "items": slices}
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(yaml.safe_dump(document, sort_keys=False), end="")
    return 0
