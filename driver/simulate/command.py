"""`carve simulate`: run a workload trace on a modelled cluster and report how many GPUs it keeps busy.

Wiring only: read the two files, build the cluster per strategy, run the event loop, print the report.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.cli import CliError
from driver.controller.score import OBJECTIVES
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
from driver.simulate.portfolio import SEARCH_BUDGET, run_auto
from driver.simulate.report import as_json, sizing_table, table
from driver.simulate.sizing import Sizing, size

# Every strategy, then `auto` (the controller's planner): the comparison that tells whether to run it.
COMPARED = ("exclusive", "mig", "soft", "mps", "slots", "timeslice", AUTO)


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
    parser.add_argument("--size", action=argparse.BooleanOptionalAction, default=False,
                        help="answer how many GPUs the trace needs per strategy and under auto: the cluster "
                             "file's node groups scaled until p99 delay <= --p99-wait")
    parser.add_argument("--objective", default="balanced", choices=OBJECTIVES,
                        help="auto, when no layout is at or below the best single strategies on both "
                             "peak GPUs and mean delay (a trade-off): balanced keeps the best single "
                             "strategy's delay with the fewest GPUs, gpus takes the fewest GPUs, delay the "
                             "least delay")
    parser.add_argument("--search-budget", type=int, default=SEARCH_BUDGET, metavar="RUNS",
                        help="auto: simulations spent searching node-level mixes of strategies when no "
                             "layout tried reaches the best single strategies on both figures (0: none)")
    parser.add_argument("--p99-wait", type=float, default=300.0, metavar="SECONDS",
                        help="--size: the p99 delay to meet (wait + slowdown from time-slicing), seconds")
    parser.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write a self-contained HTML report with charts (no external scripts or fonts)",
    )


def simulate(groups: list[NodeGroup], pods: list[TracePod], strategy: str = AUTO, node_policy: str = "kube",
             settings: Settings | None = None, cluster_label: str = "cluster.yaml",
             trace_label: str = "trace.yaml", policy: PartitioningPolicySpec | None = None,
             known: dict[str, SimResult] | None = None, objective: str = "balanced",
             budget: int = SEARCH_BUDGET) -> SimResult:
    """One result: under `auto` the winner of every candidate layout (driver/simulate/portfolio.py),
    else one run of the trace on a fresh cluster under `strategy`."""
    policy = policy or PartitioningPolicySpec()

    def one(layout: list[NodeGroup], s: str, pol: PartitioningPolicySpec) -> SimResult:
        return simulate_once(layout, pods, s, node_policy, settings, cluster_label, trace_label, pol)

    if strategy == AUTO:
        return run_auto(groups, policy, one, known, objective, budget)
    return one(groups, strategy, policy)


def simulate_once(groups: list[NodeGroup], pods: list[TracePod], strategy: str = AUTO,
                  node_policy: str = "kube", settings: Settings | None = None,
                  cluster_label: str = "cluster.yaml", trace_label: str = "trace.yaml",
                  policy: PartitioningPolicySpec | None = None) -> SimResult:
    """One run: a fresh cluster, the trace, the result (`auto`: the reactive planner alone)."""
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
    if args.search_budget < 0:
        raise CliError(f"--search-budget: {args.search_budget} is not a number of runs >= 0")
    if args.size and not (math.isfinite(args.p99_wait) and args.p99_wait >= 0):
        raise CliError(f"--p99-wait: {args.p99_wait} is not a number of seconds >= 0")
    sizing: Sizing | None = None
    try:
        groups = load_cluster(args.cluster)
        trace = load_trace(args.trace)
        pods = trace if isinstance(trace, list) else generate(trace, settings)
        strategies = COMPARED if args.compare or args.size else (args.strategy,)
        results: list[SimResult] = []
        for s in strategies:
            known = {r.strategy: r for r in results}
            results.append(simulate(groups, pods, s, args.node_policy, settings, args.cluster.name,
                                    args.trace.name, known=known, objective=args.objective,
                                    budget=args.search_budget))
        if args.size:
            policy = PartitioningPolicySpec()

            def one(layout: list[NodeGroup], s: str, pol: PartitioningPolicySpec) -> SimResult:
                return simulate_once(layout, pods, s, args.node_policy, settings, args.cluster.name,
                                     args.trace.name, pol)

            known = {r.strategy: r for r in results if r.strategy != AUTO}
            for r in results:
                if r.strategy == AUTO:
                    known.update(r.candidate_results)
            sizing = size(groups, [s for s in COMPARED if s != AUTO], policy, one, args.p99_wait, known)
    except SimulateError as e:
        raise CliError(str(e)) from None
    for r in results:
        _warn_never_fit(r)
    reports = [r.report() for r in results]
    if args.html is not None:
        page = report_html.render(results, args.cluster.name, args.trace.name, sizing)
        try:
            write_atomic(args.html, page.encode())
        except OSError as e:
            raise CliError(f"--html {args.html}: cannot write: {e.strerror or e}") from None
    if args.output == "json":
        out = json.loads(as_json(reports, args.compare or args.size))
        if sizing is not None:
            out = {"runs": out, "sizing": sizing.report()}
        print(json.dumps(out, indent=2))
        return 0
    print(table(reports))
    auto = next((r for r in results if r.auto_why), None)
    if auto is not None:
        print(f"\nauto chose {auto.auto_why}")
    if sizing is not None:
        print()
        print(sizing_table(sizing))
    return 0
