"""`carve status` (also `kubectl carve status`): one row per allocated device of carve's driver.

Wiring only: read the objects (sources.py), join them (model.py), print a table, a wide table or JSON.
Without metrics (no metrics port, no pods/proxy right, a plugin down) the used columns show `-`.
"""

from __future__ import annotations

import argparse
import json
import sys

from driver.cli import CliError
from driver.cluster.base import ClusterError
from driver.cluster.kube import load_api_client
from driver.quota.budget import COUNTED_CLASSES, BudgetRow, budget_rows, show
from driver.status.model import Row, build_rows, short_uuid
from driver.status.sources import ApiReader, scrape

GI = 1 << 30


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)"
    )
    p.add_argument("--context", default="", help="kubeconfig context (default: the current one)")
    p.add_argument("-n", "--namespace", default="", help="only claims of this namespace (default: all)")
    p.add_argument("--node", default="", help="only devices of this node")
    p.add_argument("--pod", default="", help="only devices held by this pod (name)")
    p.add_argument("-o", "--output", default="table", choices=("table", "wide", "json"), help="output format")
    p.add_argument(
        "--metrics-url",
        action="append",
        default=[],
        metavar="URL",
        help="a plugin's /metrics URL to read usage from (repeatable); default: each plugin pod's `metrics` "
        "port through the API server's pods/proxy",
    )
    p.add_argument(
        "--budget-classes",
        default=",".join(sorted(COUNTED_CLASSES)),
        help="DeviceClasses whose capacity requests count against namespace budgets (as the controller's "
        "--budget-classes)",
    )
    p.add_argument(
        "--discover-metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="find the plugin pods (label app.kubernetes.io/component=kubelet-plugin) and read their metrics",
    )


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GI:.1f}Gi"


def _pct(n: float | None) -> str:
    return "-" if n is None else f"{n:g}%"


def table(rows: list[Row], wide: bool) -> str:
    head = [
        "NODE",
        "GPU",
        "STRATEGY",
        "DEVICE",
        "NAMESPACE",
        "POD",
        "CONTAINER",
        "CLAIM",
        "MEMORY",
        "CORES",
        "ENFORCEMENT",
    ]
    if wide:
        head[3:3] = ["SET BY"]
        head.append("WHY")
    lines = [head]
    for r in rows:
        gpu = f"{r.gpu_index if r.gpu_index is not None else '?'} {r.gpu_model} {short_uuid(r.gpu_uuid)}"
        if wide:
            gpu = f"{r.gpu_index if r.gpu_index is not None else '?'} {r.gpu_model} {r.gpu_uuid or '-'}"
        cells = [
            r.node,
            gpu,
            r.strategy,
            r.device,
            r.namespace,
            r.pod,
            r.container,
            r.claim,
            f"{_gib(r.memory_used_bytes)}/{_gib(r.memory_limit_bytes)}",
            f"{_pct(r.cores_used_percent)}/{_pct(r.cores_limit_percent)}",
            r.enforcement,
        ]
        if wide:
            cells[3:3] = [r.strategy_set_by]
            cells.append(r.strategy_why or "-")
        lines.append(cells)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def run(args: argparse.Namespace) -> int:
    try:
        reader = ApiReader(load_api_client(args.kubeconfig or None, args.context or None))
    except ClusterError as e:
        raise CliError(str(e)) from None
    slices = reader.slices(args.node)
    claims = reader.claims(args.namespace)
    partitionings = reader.partitionings()
    pods = {}
    for claim in claims:
        ns = (claim.get("metadata") or {}).get("namespace", "")
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource") != "pods" or (args.pod and ref.get("name") != args.pod):
                continue
            key = (ns, ref.get("name", ""))
            if key not in pods:
                pod = reader.pod(*key)
                if pod is not None:
                    pods[key] = pod
    samples, notes = scrape(reader, args.metrics_url, args.discover_metrics)
    rows = build_rows(slices, claims, pods, partitionings, samples)
    rows = [r for r in rows if (not args.node or r.node == args.node) and (not args.pod or r.pod == args.pod)]
    for note in notes:
        print(f"carve status: note: {note} (usage shown as -)", file=sys.stderr)
    budgets: list[BudgetRow] = []
    try:
        counted = frozenset(c.strip() for c in args.budget_classes.split(",") if c.strip())
        budgets = budget_rows(reader.budgeted_namespaces(args.namespace), claims, counted)
    except CliError as e:  # an older carve-viewer role without namespaces: the devices still show
        print(f"carve status: note: namespace budgets not shown: {e}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"devices": [r.as_dict() for r in rows], "budgets": [b.as_dict() for b in budgets]},
                         indent=2))
        return 0
    if rows:
        print(table(rows, wide=args.output == "wide"))
    else:
        print(
            "no allocated devices of gpu.carve.dev" + (" match" if args.node or args.pod else ""),
            file=sys.stderr,
        )
    if budgets:
        print(("\n" if rows else "") + budget_table(budgets))
    return 0


def budget_table(budgets: list[BudgetRow]) -> str:
    """Each budgeted namespace's GPU memory and cores asked by its claims against its budget labels."""
    lines = [["NAMESPACE", "BUDGET", "REQUESTED", "LIMIT", "REMAINING", "CLAIMS"]]
    for b in budgets:
        remaining = max(b.limit - b.used, 0)
        lines.append([b.namespace, b.resource, show(b.resource, b.used), show(b.resource, b.limit),
                      show(b.resource, remaining), str(b.claims)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    rendered = ("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)
    return "\n".join(rendered)
