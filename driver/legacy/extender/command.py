"""`carve scheduler-extender`: the HTTP scheduler extender (filter, prioritize, bind) for legacy clusters.

Every flag has an env twin (`--addr` <-> CARVE_ADDR), applied by driver/cli.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING

from driver import names
from driver.cli import LOG_LEVELS, CliError
from driver.heap import freeze_startup_heap
from driver.plugin.logfmt import event, setup

if TYPE_CHECKING:
    from driver.cluster.leader import LeaderElector
    from driver.legacy.extender.state import ExtenderState

log = logging.getLogger(__name__)
DEFAULT_ADDR = "127.0.0.1:8888"


def add_arguments(p: argparse.ArgumentParser) -> None:
    # Loopback by default: the extender's HTTP API is unauthenticated and only the scheduler beside it (same
    # pod) calls it. Listening on every interface is a deliberate ':8888'.
    p.add_argument(
        "--addr",
        default=DEFAULT_ADDR,
        help=f"HTTP listen address [host]:port (default {DEFAULT_ADDR}: loopback)",
    )
    p.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "carve-system"),
        help="namespace of the assignment records and the leader Lease (default $POD_NAMESPACE)",
    )
    p.add_argument(
        "--default-memory", type=int, default=0, help="MiB per GPU when a pod names no memory (0: whole GPU)"
    )
    p.add_argument("--default-cores", type=int, default=0, help="percent of SMs when a pod names no cores")
    p.add_argument(
        "--default-gpu-num", type=int, default=1, help="GPUs for a container that asks memory/cores only"
    )
    p.add_argument("--node-scheduler-policy", default="binpack", help="binpack or spread, between nodes")
    p.add_argument(
        "--gpu-scheduler-policy", default="spread", help="binpack or spread, between a node's GPUs"
    )
    p.add_argument(
        "--default-priority",
        default="high",
        help="CARVE_PRIORITY (high or low) of a container naming no nvidia.com/priority; pods may ask "
        "this or lower",
    )
    p.add_argument(
        "--high-priority-namespaces",
        default="",
        help="comma list of namespaces whose pods may ask nvidia.com/priority 0 (high) above a low "
        "--default-priority ('*': all)",
    )
    p.add_argument(
        "--resync-interval",
        type=float,
        default=10.0,
        help="seconds between full re-lists (the watches keep the state current in between) and between "
        "the leader's collections of stale records",
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="elect a leader among replicas (Lease)",
    )
    p.add_argument("--lease-name", default="carve-scheduler-extender", help="the leader election Lease")
    p.add_argument(
        "--identity", default=os.environ.get("POD_NAME", socket.gethostname()), help="this replica's name"
    )
    p.add_argument(
        "--webhook-addr",
        default="",
        help="HTTPS address of the mutating webhook, e.g. ':8443' (default: off)",
    )
    p.add_argument("--webhook-cert-file", default="", help="TLS certificate of the webhook (PEM)")
    p.add_argument("--webhook-key-file", default="", help="TLS key of the webhook (PEM)")
    p.add_argument(
        "--scheduler-name", default=names.LEGACY_SCHEDULER_NAME, help="schedulerName the webhook sets"
    )
    p.add_argument(
        "--metrics-addr",
        default="",
        help="GET /metrics, /healthz and /readyz on this address, e.g. ':8081' (the verbs stay on --addr; "
        "default: off)",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log verbosity")


def _check(args: argparse.Namespace):
    from driver.legacy.request import POLICIES, PRIORITIES, Defaults

    _host, sep, port = args.addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--addr {args.addr!r}: expected [host]:port, e.g. '127.0.0.1:8888'")
    for flag, value in (
        ("--node-scheduler-policy", args.node_scheduler_policy),
        ("--gpu-scheduler-policy", args.gpu_scheduler_policy),
    ):
        if value not in POLICIES:
            raise CliError(f"{flag} {value!r}: expected one of {', '.join(POLICIES)}")
    if args.default_priority not in PRIORITIES:
        raise CliError(
            f"--default-priority {args.default_priority!r}: expected one of {', '.join(PRIORITIES)}"
        )
    if args.default_memory < 0 or not 0 <= args.default_cores <= 100 or args.default_gpu_num < 0:
        raise CliError("--default-memory >= 0, --default-cores 0..100, --default-gpu-num >= 0")
    if args.webhook_addr and not (args.webhook_cert_file and args.webhook_key_file):
        raise CliError(
            "--webhook-addr needs --webhook-cert-file and --webhook-key-file (the API server calls HTTPS)"
        )
    if not args.resync_interval > 0:
        raise CliError(f"--resync-interval {args.resync_interval}: must be more than 0 seconds")
    return Defaults(
        args.default_memory,
        args.default_cores,
        args.default_gpu_num,
        args.node_scheduler_policy,
        args.gpu_scheduler_policy,
        args.default_priority,
        tuple(n.strip() for n in args.high_priority_namespaces.split(",") if n.strip()),
    )


def collect_round(state: ExtenderState, elector: LeaderElector | None) -> int:
    """The leader's job, once: delete the records of pods gone or finished. With leader election, a replica
    that does not hold the Lease after this round's renewal (or could not read or write it) deletes nothing,
    so two replicas never race on deletes. Returns how many records went."""
    if elector is not None and not elector.try_acquire():
        return 0
    return state.collect()


def run(args: argparse.Namespace) -> int:
    setup(args.log_level)
    defaults = _check(args)
    from driver.cluster.base import ClusterError
    from driver.cluster.informer import Reflector
    from driver.cluster.kube import load_api_client
    from driver.cluster.leader import LeaderElector
    from driver.legacy.extender.http import ExtenderServer
    from driver.legacy.extender.state import ExtenderState
    from driver.legacy.extender.verbs import Extender
    from driver.legacy.kubeapi import KubeLegacyApi, Source

    try:
        api = KubeLegacyApi(load_api_client(args.kubeconfig or None))
    except ClusterError as e:
        raise CliError(f"--kubeconfig: {e}") from None
    state = ExtenderState(api, args.namespace)
    elector = (
        LeaderElector(api, args.namespace, args.lease_name, args.identity) if args.leader_elect else None
    )
    stop = threading.Event()
    reflectors = [
        Reflector(api, Source("nodes"), state.replace_nodes, state.node_event, args.resync_interval),
        Reflector(
            api,
            Source("configmaps", args.namespace, f"{names.LEGACY_RECORD_LABEL}=true"),
            state.replace_records,
            state.record_event,
            args.resync_interval,
        ),
        Reflector(api, Source("pods"), state.replace_pods, state.pod_event, args.resync_interval),
    ]

    def ready() -> str:
        waiting = [r.source.resource for r in reflectors if not r.synced.is_set()]
        return f"first list of {', '.join(waiting)} pending" if waiting else ""

    server = ExtenderServer(Extender(state, defaults), args.addr, ready=ready)
    probes = None
    if args.metrics_addr:
        from prometheus_client import Counter

        from driver.metrics.probes import ProbeServer

        registry = server.metrics.registry  # latency, errors, assignments, build info (legacy/metrics.py)
        requests = Counter(
            "carve_extender_requests",
            "Requests to the extender's HTTP verbs (/filter, /prioritize, /bind, probes), by answer code.",
            ["method", "path", "code"],
            registry=registry,
        )
        known = {"/filter", "/prioritize", "/bind", "/healthz", "/readyz"}
        server.observe = lambda method, path, code: requests.labels(
            method, path if path in known else "other", str(code)
        ).inc()
        probes = ProbeServer(args.metrics_addr, registry, ready)
        probes.start()

    def collect_loop() -> None:
        # The informers keep the state; the leader also deletes records of pods gone or finished.
        while not stop.wait(args.resync_interval):
            try:
                collect_round(state, elector)
            except ClusterError as e:
                event(log, logging.WARNING, "collect.failed", error=str(e), action="retrying")

    for r in reflectors:
        r.start(stop)
    threading.Thread(target=collect_loop, name="collect", daemon=True).start()
    server.start()
    webhook = None
    if args.webhook_addr:
        from driver.legacy.webhook import WebhookServer

        webhook = WebhookServer(
            args.webhook_addr,
            args.scheduler_name,
            args.default_gpu_num,
            args.webhook_cert_file,
            args.webhook_key_file,
            defaults,
        )
        webhook.start()
    frozen = freeze_startup_heap()  # docs/performance.md: a full collection mid-call
    event(log, logging.DEBUG, "extender.heap-frozen", objects=frozen)
    event(log, logging.INFO, "extender.started", addr=args.addr, port=server.port, namespace=args.namespace)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()
    if probes:
        probes.stop()
    if webhook:
        webhook.stop()
    return 0
