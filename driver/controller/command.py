"""`carve controller`: watch claims, slices, classes, NodePartitionings and the policy; plan; write specs.

Wiring only: the API client, the informers and reconciler (reconcile.py), leader election (leader.py),
the metrics server. Every flag has an env twin (`--policy` <-> CARVE_POLICY), applied by driver/cli.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import threading

from driver.cli import LOG_LEVELS, CliError
from driver.names import CLASS_VGPU
from driver.plugin.logfmt import event, setup
from driver.quota.budget import COUNTED_CLASSES

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    p.add_argument("--policy", default="default", help="name of the PartitioningPolicy to follow")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between plans when nothing changes")
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds a claim may be pending before the planner acts for it (the scheduler's turn)",
    )
    p.add_argument("--resync", type=float, default=600.0, help="seconds between full re-lists of each kind")
    p.add_argument("--max-changes", type=int, default=64, help="GPU strategy changes per plan, at most")
    p.add_argument(
        "--split-count",
        type=int,
        default=10,
        help="shares per GPU for soft slices and slots (as the plugins run)",
    )
    p.add_argument(
        "--leader-elect",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="hold a coordination.k8s.io Lease while acting, so replicas take turns",
    )
    p.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the leader Lease (default $POD_NAMESPACE)",
    )
    p.add_argument("--lease-name", default="carve-controller", help="name of the leader Lease")
    p.add_argument("--lease-duration", type=int, default=15, help="seconds a Lease holds without renewal")
    p.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME", "") or socket.gethostname(),
        help="this replica's name in the Lease (default $POD_NAME, else the host name)",
    )
    p.add_argument(
        "--metrics-addr", default="", help="Prometheus /metrics endpoint, e.g. ':8080' (default: off)"
    )
    p.add_argument(
        "--once",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="plan once, write it (unless --dry-run), print it as JSON",
    )
    p.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="with --once: print the plan, write nothing",
    )
    p.add_argument(
        "--plugin-strategy",
        default="",
        help="the plugins' --strategy rules (the chart passes plugin.strategy): GPUs a rule names by index "
        "or model are pinned (never changed); idle GPUs return to the rules' bare default when the policy "
        "allows it (default: none: only NodePartitioning pins and the plugins' status)",
    )
    p.add_argument(
        "--webhook-addr",
        default="",
        help="serve the admission webhooks (--budget-webhook, --hami-webhook) here, e.g. ':8443' "
        "(default: off)",
    )
    p.add_argument("--webhook-cert", default="", help="TLS certificate of the webhooks (PEM)")
    p.add_argument("--webhook-key", default="", help="TLS key of the webhooks (PEM)")
    p.add_argument(
        "--budget-webhook",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="validate ResourceClaims against their namespace's GPU budget labels (docs/quota.md)",
    )
    p.add_argument(
        "--budget-classes",
        default=",".join(sorted(COUNTED_CLASSES)),
        help="DeviceClasses whose capacity requests count against namespace budgets",
    )
    p.add_argument(
        "--hami-webhook",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="convert pods asking HAMi's nvidia.com/* resources to ResourceClaims "
        "(docs/migrate-from-hami.md)",
    )
    p.add_argument("--hami-share-class", default=CLASS_VGPU, help="DeviceClass of converted HAMi shares")
    p.add_argument(
        "--layout-interval",
        type=float,
        default=900.0,
        help="seconds between choices of the home layout (each idle GPU's strategy) by the portfolio of "
        "`carve simulate --strategy auto` over the claims seen; 0: never (idle GPUs go back to the "
        "policy's default)",
    )
    p.add_argument(
        "--layout-window",
        type=float,
        default=24 * 3600.0,
        help="seconds of ended claims the layout choice looks back over",
    )
    p.add_argument(
        "--objective",
        default="balanced",
        choices=("balanced", "gpus", "delay"),
        help="the layout choice when no layout is at or below the best single strategies on both peak GPUs "
        "and mean delay: balanced (the best single strategy's delay, fewest GPUs), gpus, delay",
    )
    p.add_argument(
        "--search-budget",
        type=int,
        default=16,
        help="simulations the layout choice may spend searching mixes of strategies (0: none)",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log verbosity")


def _config(args: argparse.Namespace):
    from driver.controller.reconcile import ReconcilerConfig
    from driver.devices import ModelError, Settings

    for flag, value in (("--interval", args.interval), ("--resync", args.resync)):
        if not value > 0:
            raise CliError(f"{flag} {value}: must be more than 0 seconds")
    if args.grace < 0:
        raise CliError(f"--grace {args.grace}: must not be negative")
    if not (args.layout_interval >= 0 and args.layout_window > 0):
        raise CliError(f"--layout-interval {args.layout_interval} / --layout-window {args.layout_window}: "
                       "the interval must be >= 0 seconds, the window > 0")
    if args.search_budget < 0:
        raise CliError(f"--search-budget {args.search_budget}: must not be negative")
    if args.max_changes < 1:
        raise CliError(f"--max-changes {args.max_changes}: must be at least 1")
    _check_webhook_flags(args)
    if not 2 <= args.lease_duration <= 3600:
        raise CliError(f"--lease-duration {args.lease_duration}: must be 2..3600 seconds")
    _host, sep, port = args.metrics_addr.rpartition(":")
    if args.metrics_addr and (not sep or not port.isdigit() or int(port) > 65535):
        raise CliError(f"--metrics-addr {args.metrics_addr!r}: expected [host]:port, e.g. ':8080'")
    try:
        settings = Settings(split_count=args.split_count)
    except ModelError as e:
        raise CliError(f"--split-count: {e}") from None
    from driver.devices.rules import RuleError, parse_rules

    try:
        rules = parse_rules(args.plugin_strategy, "--plugin-strategy") if args.plugin_strategy else None
    except RuleError as e:
        raise CliError(str(e)) from None
    return ReconcilerConfig(
        plugin_rules=rules,
        policy_name=args.policy,
        interval_s=args.interval,
        grace_s=args.grace,
        resync_s=args.resync,
        max_changes=args.max_changes,
        identity=args.identity,
        dry_run=args.dry_run,
        settings=settings,
        layout_interval_s=args.layout_interval,
        layout_window_s=args.layout_window,
        objective=args.objective,
        search_budget=args.search_budget,
    )


def plan_report(plan) -> dict:
    return {
        "changes": [
            {
                "node": c.node,
                "gpu": c.index,
                "uuid": c.uuid,
                "from": c.from_strategy,
                "to": c.to_strategy,
                "reason": c.reason,
                "claims": list(c.claims),
            }
            for c in plan.changes
        ],
        "pending": plan.reasons,
    }


def run(args: argparse.Namespace) -> int:
    setup(args.log_level)
    config = _config(args)
    from driver.cluster.base import ClusterError
    from driver.cluster.kube import KubeCluster
    from driver.cluster.leader import LeaderElector, ObjectLeases
    from driver.controller.reconcile import Reconciler
    from driver.metrics.exporter import MetricsServer

    try:
        api = KubeCluster.from_config(args.kubeconfig or None)
    except ClusterError as e:
        raise CliError(f"--kubeconfig: {e}") from None
    stop = threading.Event()
    reconciler = Reconciler(api, config)
    if not reconciler.start_informers(stop):
        event(
            log, logging.ERROR, "controller.sync-failed", detail="informers did not list every kind in 60 s"
        )
        stop.set()
        return 1
    webhooks = _webhooks(args, api, reconciler) if args.webhook_addr else None
    if args.once:
        plan = reconciler.reconcile_once()
        stop.set()
        print(json.dumps(plan_report(plan), indent=2))
        return 0
    server = None
    if args.metrics_addr:
        server = MetricsServer(args.metrics_addr, reconciler.metrics.registry)
        server.start()
    is_leader = lambda: True  # noqa: E731
    if args.leader_elect:
        elector = LeaderElector(
            ObjectLeases(api),
            args.lease_namespace,
            args.lease_name,
            args.identity,
            args.lease_duration,
            renew_s=max(1.0, args.lease_duration / 3),
        )

        def leading() -> bool:
            held = elector.is_leader
            reconciler.metrics.leader.set(1 if held else 0)
            return held

        threading.Thread(target=elector.run, args=(stop,), name="leader", daemon=True).start()
        is_leader = leading
    else:
        reconciler.metrics.leader.set(1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: (stop.set(), reconciler.dirty.set()))
    event(
        log,
        logging.INFO,
        "controller.started",
        identity=args.identity,
        policy=args.policy,
        leader_elect=args.leader_elect,
    )
    reconciler.dirty.set()
    reconciler.run(stop, is_leader)
    if server:
        server.stop()
    if webhooks:
        webhooks.stop()
    return 0


def _check_webhook_flags(args: argparse.Namespace) -> None:
    _host, sep, port = args.webhook_addr.rpartition(":")
    if args.webhook_addr and (not sep or not port.isdigit() or int(port) > 65535):
        raise CliError(f"--webhook-addr {args.webhook_addr!r}: expected [host]:port, e.g. ':8443'")
    if args.webhook_addr and not (args.budget_webhook or args.hami_webhook):
        raise CliError("--webhook-addr: no webhook to serve: add --budget-webhook or --hami-webhook")
    if (args.budget_webhook or args.hami_webhook) and not args.webhook_addr:
        raise CliError("--budget-webhook/--hami-webhook need --webhook-addr")
    if bool(args.webhook_cert) != bool(args.webhook_key):
        raise CliError("--webhook-cert and --webhook-key go together")
    if not [c for c in args.budget_classes.split(",") if c.strip()]:
        raise CliError("--budget-classes: empty")


def _webhooks(args: argparse.Namespace, api, reconciler):
    """The admission webhooks on --webhook-addr (driver/admission.py), reading the reconciler's informers:

    - POST /validate-budget[/memory|/cores]: namespace GPU budgets (driver/quota/webhook.py) for
      ResourceClaims and ResourceClaimTemplates; one path per webhook of the chart (one per budget label, as a
      namespaceSelector cannot say "either label"), each checking every budget of the namespace so they agree;
    - POST /mutate-hami: the HAMi pod conversion (driver/convert/webhook.py).
    The controller is where these belong: its informers of ResourceClaims, ResourceSlices and Namespaces give
    the sums and the GPU models from memory, not from a LIST per request, and it runs as two replicas.
    """
    from driver.admission import AdmissionServer
    from driver.cluster.base import AlreadyExists, ClusterError, NotFound
    from driver.convert.hami import Options, models_from_slices
    from driver.convert.webhook import HamiMutator, TemplateError
    from driver.quota.webhook import BudgetCheck

    informers = reconciler.informers
    routes = {}
    if args.budget_webhook:

        def namespace(name: str):
            found = informers["namespaces"].get(f"/{name}")
            if found is not None:
                return found
            try:  # labelled a moment ago: the informer may not have it yet
                return api.get_namespace(name)
            except NotFound:
                return None

        check = BudgetCheck(
            claims=informers["resourceclaims"].items,
            namespace=namespace,
            namespaces=informers["namespaces"].items,
            counted=frozenset(c.strip() for c in args.budget_classes.split(",") if c.strip()),
            registry=reconciler.metrics.registry,
        )
        # One path per webhook of the chart (one per budget label), each checking every budget the namespace
        # has: a namespace with both labels is sent to both, and they must agree, or a claim one admits and
        # the other refuses would sit in the first one's ledger as phantom use.
        for path in ("/validate-budget", "/validate-budget/memory", "/validate-budget/cores"):
            routes[path] = check.review
    if args.hami_webhook:

        def ensure(ns: str, obj: dict) -> None:
            try:
                api.create_object("resourceclaimtemplates", obj)
            except AlreadyExists:
                pass  # the same content, made for an earlier pod
            except ClusterError as e:
                raise TemplateError(str(e)) from None

        mutator = HamiMutator(
            models=lambda: models_from_slices(informers["resourceslices"].items()),
            ensure_template=ensure,
            options=Options(share_class=args.hami_share_class),
        )
        routes["/mutate-hami"] = mutator.review
    server = AdmissionServer(args.webhook_addr, routes, args.webhook_cert, args.webhook_key).start()
    event(log, logging.INFO, "controller.webhooks", addr=args.webhook_addr, paths=",".join(sorted(routes)))
    return server
