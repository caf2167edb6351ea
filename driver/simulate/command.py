"""`carve simulate`: run a workload trace on a modelled cluster and report how many GPUs it keeps busy.

Wiring only: read the two files, build the cluster per strategy, run the event loop, print the report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.cli import CliError
from driver.devices import Settings
from driver.fsutil import write_atomic
from driver.simulate import report_html
from driver.simulate.auto import AutoPlanner
from driver.simulate.cluster import AUTO, build_cluster
from driver.simulate.engine import SimResult, Simulation
from driver.simulate.generator import generate
from driver.simulate.inputs import (
    STRATEGY_NAMES,
    NodeGroup,
    SimulateError,
    TracePod,
    load_cluster,
    load_trace,
)
from driver.simulate.policies import POLICIES
from driver.simulate.report import as_json, table

# Every strategy, then `auto` (the controller's planner): the comparison that tells whether to run it.
COMPARED = ("exclusive", "mig", "soft", "slots", "timeslice", AUTO)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, type=Path, help="cluster.yaml: nodes and their GPUs")
    parser.add_argument("--trace", required=True, type=Path, help="trace.yaml: pods, or a generator")
    parser.add_argument("--strategy", default=AUTO, choices=(AUTO, *STRATEGY_NAMES),
                        help="strategy for every GPU; auto: each node's own, else mig where possible, "
                             "else soft")
    parser.add_argument("--node-policy", default="kube", choices=sorted(POLICIES),
                        help="kube: spread like the default scheduler; binpack: fullest node first")
    parser.add_argument("--compare", action=argparse.BooleanOptionalAction, default=False,
                        help=f"run the trace under {', '.join(COMPARED)} and print them side by side")
    parser.add_argument("--split-count", type=int, default=Settings().split_count,
                        help="soft shares / slots per GPU")
    parser.add_argument("-o", "--output", default="table", choices=("table", "json"), help="output format")
    parser.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write a self-contained HTML report with charts (no external scripts or fonts)",
    )


def simulate(groups: list[NodeGroup], pods: list[TracePod], strategy: str = AUTO, node_policy: str = "kube",
             settings: Settings | None = None, cluster_label: str = "cluster.yaml",
             trace_label: str = "trace.yaml", policy: PartitioningPolicySpec | None = None) -> SimResult:
    """One run: a fresh cluster, the trace, the result."""
    policy = policy or PartitioningPolicySpec()
    rule = policy.rule_for({})
    default = rule.default_strategy if rule else "soft"
    cluster = build_cluster(groups, strategy, settings, label=cluster_label, auto_default=default)
    auto = AutoPlanner(cluster, policy, settings) if strategy == AUTO else None
    return Simulation(cluster, POLICIES[node_policy], strategy, label=trace_label, auto=auto).run(pods)


def _warn_never_fit(result: SimResult, shown: int = 3) -> None:
    """Name a few pods that no empty node could take, with the allocator's reason: usually a claim to fix."""
    items = list(result.never_fit_reasons.items())
    for pod, reason in items[:shown]:
        print(f"carve simulate: [{result.strategy}] pod {pod} fits on no node, even empty: {reason}",
              file=sys.stderr)
    if len(items) > shown:
        print(f"carve simulate: [{result.strategy}] ... and {len(items) - shown} more such pods",
              file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        settings = Settings(split_count=args.split_count)
    except ValueError as e:
        raise CliError(f"--split-count: {e}") from None
    try:
        groups = load_cluster(args.cluster)
        trace = load_trace(args.trace)
        pods = trace if isinstance(trace, list) else generate(trace, settings)
        strategies = COMPARED if args.compare else (args.strategy,)
        results = [
            simulate(groups, pods, s, args.node_policy, settings, args.cluster.name, args.trace.name)
            for s in strategies
        ]
    except SimulateError as e:
        raise CliError(str(e)) from None
    for r in results:
        _warn_never_fit(r)
    reports = [r.report() for r in results]
    if args.html is not None:
        page = report_html.render(results, args.cluster.name, args.trace.name)
        try:
            write_atomic(args.html, page.encode())
        except OSError as e:
            raise CliError(f"--html {args.html}: cannot write: {e.strerror or e}") from None
    print(as_json(reports, args.compare) if args.output == "json" else table(reports))
    return 0
