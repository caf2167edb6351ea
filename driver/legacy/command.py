"""`carve device-plugin`: the kubelet device plugin (v1beta1) for clusters without DRA, until SIGTERM/SIGINT.

Every flag has an env twin (`--node-name` <-> CARVE_NODE_NAME), applied by driver/cli.py.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
from pathlib import Path

from driver import names
from driver.cli import LOG_LEVELS, CliError
from driver.heap import freeze_startup_heap
from driver.plugin.logfmt import event, setup

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node-name", default=os.environ.get("NODE_NAME", ""), help="this node's name (default $NODE_NAME)"
    )
    p.add_argument("--gpus", default="nvml", help="'nvml' (real GPUs) or 'fake:2xA100-80GB,1xT4' (emulated)")
    p.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "carve-system"),
        help="namespace of the extender's assignment records (default $POD_NAMESPACE)",
    )
    p.add_argument(
        "--device-plugin-dir", default=names.DEVICE_PLUGIN_DIR, help="the kubelet's device-plugin dir"
    )
    p.add_argument(
        "--pod-resources-socket", default=names.POD_RESOURCES_SOCKET, help="the kubelet's PodResources socket"
    )
    p.add_argument(
        "--state-dir",
        default="/var/lib/carve/legacy",
        help="allocations' regions; the limiter and hooks in <state-dir>/lib by default",
    )
    p.add_argument("--cdi-dir", default=names.DEFAULT_CDI_DIR, help="where CDI specs are written")
    p.add_argument("--driver-root", default="/", help="root of the NVIDIA driver files and device nodes")
    p.add_argument("--host-driver-root", default="", help="the --driver-root directory as the host sees it")
    p.add_argument(
        "--limiter-dir",
        default="",
        help=f"host dir holding {names.LIMITER_LIBRARY} (default <state-dir>/lib)",
    )
    p.add_argument("--split-count", type=int, default=10, help="containers per GPU (device IDs per GPU)")
    p.add_argument(
        "--node-config", default="", help='JSON file {"<node>": {"splitCount": N}}: per-node overrides'
    )
    p.add_argument("--resource-name", default=names.LEGACY_GPU, help="the extended resource to register")
    p.add_argument(
        "--cdi-delivery",
        default="cdi-field",
        help="'cdi-field' (kubelet >= 1.29, or 1.28 with DevicePluginCDIDevices on) or 'cdi-annotation' "
        "(older kubelets; the runtime must resolve CDI annotations)",
    )
    p.add_argument("--health-interval", type=float, default=5.0, help="seconds between GPU health checks")
    p.add_argument(
        "--metrics-addr",
        default="",
        help="GET /metrics, /healthz and /readyz on this address, e.g. ':8082' (default: off)",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log verbosity")


def split_count(args: argparse.Namespace) -> int:
    split = args.split_count
    if args.node_config:
        try:
            overrides = json.loads(Path(args.node_config).read_text())
            split = int((overrides.get(args.node_name) or {}).get("splitCount", split))
        except (OSError, ValueError, AttributeError, TypeError) as e:
            raise CliError(f"--node-config {args.node_config}: {e}") from None
    if not 1 <= split <= 1000:
        raise CliError(f"--split-count {split}: must be 1..1000")
    return split


def run(args: argparse.Namespace) -> int:
    setup(args.log_level)
    if not args.node_name:
        raise CliError("--node-name is required (or set CARVE_NODE_NAME / NODE_NAME)")
    from driver.legacy.allocate import DELIVERIES

    if args.cdi_delivery not in DELIVERIES:
        raise CliError(f"--cdi-delivery {args.cdi_delivery!r}: expected one of {', '.join(DELIVERIES)}")
    if "/" not in args.resource_name:
        raise CliError(f"--resource-name {args.resource_name!r}: needs a domain, e.g. nvidia.com/gpu")
    split = split_count(args)
    if not args.health_interval > 0:
        raise CliError(f"--health-interval {args.health_interval}: must be more than 0 seconds")

    from driver.cluster.base import ClusterError
    from driver.cluster.kube import load_api_client
    from driver.gpu import InventoryError, discover
    from driver.legacy.deviceplugin import DevicePluginConfig, LegacyDevicePlugin
    from driver.legacy.kubeapi import KubeLegacyApi

    try:
        gpus = discover(args.gpus, args.node_name)
    except InventoryError as e:
        raise CliError(str(e)) from None
    try:
        api = KubeLegacyApi(load_api_client(args.kubeconfig or None))
    except ClusterError as e:
        raise CliError(f"--kubeconfig: {e}") from None
    config = DevicePluginConfig(
        node_name=args.node_name,
        record_namespace=args.namespace,
        device_plugin_dir=Path(args.device_plugin_dir),
        pod_resources_socket=Path(args.pod_resources_socket),
        state_dir=Path(args.state_dir),
        cdi_dir=Path(args.cdi_dir),
        driver_root=Path(args.driver_root),
        host_driver_root=Path(args.host_driver_root) if args.host_driver_root else None,
        limiter_dir=Path(args.limiter_dir) if args.limiter_dir else None,
        split_count=split,
        resource=args.resource_name,
        delivery=args.cdi_delivery,
        health_interval_s=args.health_interval,
        driver_required=not args.gpus.startswith("fake:"),
    )
    plugin = LegacyDevicePlugin(config, api, gpus)
    probes = None
    if args.metrics_addr:
        from prometheus_client import Counter

        from driver.legacy.metrics import DevicePluginMetrics
        from driver.metrics.probes import ProbeServer

        # The containers' usage (carve_claim_*, as DRA claims') and build info, with the kubelet calls.
        registry = DevicePluginMetrics(Path(args.state_dir) / "allocations", args.node_name).registry
        calls = Counter(
            "carve_legacy_device_plugin_calls",
            "Allocate and PreStartContainer calls from the kubelet, by result.",
            ["method", "result"],
            registry=registry,
        )
        plugin.observe_call = lambda method, result: calls.labels(method, result).inc()
        probes = ProbeServer(
            args.metrics_addr, registry, lambda: "" if plugin.started.is_set() else "starting"
        )
        probes.start()
    try:
        plugin.start()
    except Exception as e:
        event(
            log, logging.ERROR, "device-plugin.start-failed", exc_info=True, error=f"{type(e).__name__}: {e}"
        )
        return 1
    frozen = freeze_startup_heap()  # docs/performance.md: a full collection mid-call
    event(log, logging.DEBUG, "device-plugin.heap-frozen", objects=frozen)
    event(log, logging.INFO, "device-plugin.started", node=args.node_name, gpus=len(gpus), split=split)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: plugin.stopping.set())
    plugin.stopping.wait()
    plugin.stop()
    if probes:
        probes.stop()
    return 0
