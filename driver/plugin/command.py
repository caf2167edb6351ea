"""`carve plugin`: run the DRA kubelet plugin on this node until SIGTERM/SIGINT.

Every flag has an env twin (`--node-name` <-> CARVE_NODE_NAME), applied by driver/cli.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

from driver import names
from driver.cli import LOG_LEVELS, CliError
from driver.devices.base import DEFAULT_CONTEXT_RESERVE_QUANTITY
from driver.heap import freeze_startup_heap
from driver.plugin.logfmt import event, setup
from driver.plugin.placement import DEFAULT_PLACEMENT, PLACEMENTS

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name; also the pool name (default $NODE_NAME)",
    )
    p.add_argument("--gpus", default="nvml", help="'nvml' (real GPUs) or 'fake:2xA100-80GB,1xT4' (emulated)")
    p.add_argument(
        "--strategy",
        default=names.STRATEGY_EXCLUSIVE,
        help="strategy rules (docs/configuration.md): '<selector>=<strategy>' items, the selector a GPU "
        "index or a glob on the product name or model key, first match wins, plus one bare default: 'soft', "
        "'0=mig,1=soft,exclusive', '*A100*=mig,T4=soft,exclusive'",
    )
    p.add_argument(
        "--fallback-strategy",
        default=names.STRATEGY_SOFT,
        choices=[
            s
            for s in (
                names.STRATEGY_EXCLUSIVE,
                names.STRATEGY_SOFT,
                names.STRATEGY_SLOTS,
                names.STRATEGY_TIMESLICE,
            )
        ],
        help="strategy of a GPU that cannot run the one its rule gives (mig on a GPU without MIG, MIG mode "
        "NVML refuses); a warning, a StrategyFallback Node Event and a metric say so (default soft)",
    )
    p.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    p.add_argument(
        "--cluster",
        default="kube",
        help="'kube' (the API server) or 'file:<dir>' (a directory-backed fake cluster, for demos/tests)",
    )
    p.add_argument(
        "--plugin-dir", default=names.DEFAULT_PLUGIN_DIR, help="state dir: dra.sock, checkpoint.json, locks"
    )
    p.add_argument(
        "--run-dir",
        default=names.DEFAULT_RUN_DIR,
        help="per-boot state: claims/<uid> (region, limits file); a tmpfs such as /run (default "
        f"{names.DEFAULT_RUN_DIR}); claims an older plugin prepared under <plugin-dir>/claims stay there",
    )
    p.add_argument("--registry-dir", default=names.DEFAULT_REGISTRY_DIR, help="kubelet plugin registry dir")
    p.add_argument("--cdi-dir", default=names.DEFAULT_CDI_DIR, help="where CDI specs are written")
    p.add_argument("--driver-root", default="/", help="root of the NVIDIA driver files and device nodes")
    p.add_argument(
        "--host-driver-root",
        default="",
        help="the --driver-root directory as the host sees it: CDI mount sources (default: --driver-root)",
    )
    p.add_argument(
        "--proc-root",
        default="/proc",
        help="the host's /proc: MIG capability files (driver/nvidia/capabilities), devices, host pids",
    )
    p.add_argument(
        "--limiter-dir",
        default="",
        help=f"host dir holding {names.LIMITER_LIBRARY}, {names.HOOK_BINARY} and {names.LDCONFIG_BINARY} "
        "(default <plugin-dir>/lib)",
    )
    p.add_argument("--healthz-addr", default="", help="HTTP health endpoint, e.g. ':51515' (default: off)")
    p.add_argument(
        "--metrics-addr", default="", help="Prometheus /metrics endpoint, e.g. ':8080' (default: off)"
    )
    p.add_argument("--k8s-version", default="", help="Kubernetes minor version for API limits (default: ask)")
    p.add_argument("--split-count", type=int, default=10, help="shares per GPU for soft slices and slots")
    p.add_argument(
        "--soft-context-reserve",
        default=DEFAULT_CONTEXT_RESERVE_QUANTITY,
        help="GPU memory kept back per share (soft, slots) for the CUDA context the limiter does not count, "
        f"a quantity (default {DEFAULT_CONTEXT_RESERVE_QUANTITY})",
    )
    p.add_argument("--publish-interval", type=float, default=60.0, help="seconds between slice reconciles")
    p.add_argument(
        "--region-interval", type=float, default=2.0, help="seconds between passes over the claims' regions"
    )
    p.add_argument(
        "--kill-unenforced",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="SIGKILL GPU processes on soft-sliced GPUs that escape the limiter, exceed their claim's "
        "memory quota, or use more SM time than their claim's share allows, by NVML's count (default: "
        "report them only: Event on the claim, metrics)",
    )
    p.add_argument(
        "--boot-id-file",
        default="/proc/sys/kernel/random/boot_id",
        help="file holding the node's boot id (prepared state is void after a reboot)",
    )
    p.add_argument(
        "--node-partitioning",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="follow this node's NodePartitioning (the strategy controller's choice per GPU) over --strategy",
    )
    p.add_argument(
        "--memory-enforcement",
        default=names.MEMORY_ENFORCEMENT_AUTO,
        choices=(
            names.MEMORY_ENFORCEMENT_AUTO,
            names.MEMORY_ENFORCEMENT_DRIVER,
            names.MEMORY_ENFORCEMENT_LIMITER,
        ),
        help="who enforces the memory of shared GPUs: the driver's per-cgroup partition (driver), carve's "
        "limiter (limiter), or the driver where the GPU supports it (auto); docs/enforcement.md",
    )
    p.add_argument(
        "--mps-shm-dir",
        default="",
        help="host directory that is the MPS control daemons' /dev/shm (the chart mounts it there); mps "
        "clients get it at /dev/shm, as an MPS server and its clients exchange memory through it. '' = "
        "none: clients keep their own /dev/shm (the plugin runs on the host, or fake GPUs)",
    )
    p.add_argument(
        "--region-fs",
        default="auto",
        choices=("auto", "on", "off"),
        help="mount each claim's region directory as a tmpfs of its own, so a tenant fills at most its own "
        "share of the host (docs/security.md): auto = where the container runtime sees the mount (the "
        "plugin shares the node init's mount namespace, or the plugin directory's mount is shared), on, off",
    )
    p.add_argument(
        "--health-monitor",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="watch NVML (XIDs, GPU lost, ECC pages pending) and taint or withdraw unhealthy GPUs' devices",
    )
    p.add_argument(
        "--health-taint-effect",
        default="NoSchedule",
        help="effect of the gpu.carve.dev/unhealthy taint: NoSchedule, NoExecute, None (warning only, 1.35+)",
    )
    p.add_argument(
        "--health-lost-effect",
        default="NoSchedule",
        help="effect of the taint of a lost GPU: NoSchedule, NoExecute (evicts its pods) or None",
    )
    p.add_argument(
        "--health-recovery-seconds",
        type=float,
        default=300.0,
        help="a GPU is healthy again after this long without a bad signal (or when health.json is deleted)",
    )
    p.add_argument(
        "--health-ignore-xids",
        default="",
        help="XIDs to ignore besides the application errors (13,31,43,45,68,109), comma separated",
    )
    p.add_argument("--health-interval", type=float, default=1.0, help="seconds between NVML health probes")
    p.add_argument(
        "--claim-status",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="write the claim's status.devices (conditions, GPU/MIG UUIDs, limits) after prepare",
    )
    p.add_argument(
        "--toolkit-root",
        default="",
        help="the host's / as the plugin sees it, to check the NVIDIA container toolkit's config for "
        "settings that hand out GPUs past carve (a warning, a ContainerToolkitUnsafe Node Event, a metric); "
        "'' = off",
    )
    p.add_argument(
        "--placement",
        default=DEFAULT_PLACEMENT,
        choices=PLACEMENTS,
        help="order of the shareable (soft, mps) devices in this node's ResourceSlices, which the "
        "scheduler's first fit follows: index (GPU index order, whatever the load: fills GPU 0 first), "
        "binpack (the most loaded GPU first), spread (the least loaded first); re-published after "
        "prepares/unprepares (docs/allocate.md, Placement; default index)",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log verbosity")


def _cluster(args: argparse.Namespace):
    if args.cluster.startswith("file:"):
        from driver.plugin.filecluster import FileCluster

        return FileCluster(Path(args.cluster.removeprefix("file:")))
    if args.cluster != "kube":
        raise CliError(f"--cluster {args.cluster!r}: expected 'kube' or 'file:<dir>'")
    from driver.cluster.base import ClusterError
    from driver.cluster.kube import KubeCluster

    try:
        return KubeCluster.from_config(args.kubeconfig or None)
    except ClusterError as e:
        raise CliError(f"--kubeconfig: {e}") from None


def context_reserve(args: argparse.Namespace) -> int:
    """--soft-context-reserve in bytes; CliError for something that is not a whole number of bytes."""
    from driver.devices.attributes import quantity_bytes
    from driver.devices.base import ModelError

    try:
        return quantity_bytes(args.soft_context_reserve, "--soft-context-reserve")
    except ModelError as e:
        raise CliError(str(e)) from None


def _check_flags(args: argparse.Namespace, gpus) -> None:
    """Usage errors are one line and exit 2, before anything is started or changed on the node."""
    from driver.devices import Settings, limits_for
    from driver.devices.base import ModelError
    from driver.devices.rules import parse_rules

    try:
        # Only a malformed rule stops the plugin: a GPU that cannot run its strategy gets the fallback.
        parse_rules(args.strategy)
        Settings(split_count=args.split_count, soft_context_reserve=context_reserve(args))
        if args.k8s_version:
            limits_for(args.k8s_version)
    except ModelError as e:
        raise CliError(str(e)) from None
    from driver.plugin.enforcement.backends import EnforcementError, choose, probe_cgroup_v2

    try:
        choose(args.memory_enforcement, gpus, probe_cgroup_v2())
    except EnforcementError as e:
        raise CliError(str(e)) from None
    for flag, addr, example in (
        ("--healthz-addr", args.healthz_addr, ":51515"),
        ("--metrics-addr", args.metrics_addr, ":8080"),
    ):
        _host, sep, port = addr.rpartition(":")
        if addr and (not sep or not port.isdigit() or int(port) > 65535):
            raise CliError(f"{flag} {addr!r}: expected [host]:port, e.g. '{example}'")
    if not args.publish_interval > 0:
        raise CliError(f"--publish-interval {args.publish_interval}: must be more than 0 seconds")
    if not args.region_interval > 0:
        raise CliError(f"--region-interval {args.region_interval}: must be more than 0 seconds")
    shm = args.mps_shm_dir
    if shm and (not shm.startswith("/") or not os.path.normpath(shm).strip("/")):
        # It becomes a bind mount over every mps client's /dev/shm: never the host's root or a relative path.
        raise CliError(f"--mps-shm-dir {shm!r}: expected an absolute host directory other than /")
    from driver.plugin.health.policy import HealthConfigError, check_effect, parse_xids

    try:
        check_effect(args.health_taint_effect, "--health-taint-effect")
        check_effect(args.health_lost_effect, "--health-lost-effect")
        parse_xids(args.health_ignore_xids)
    except HealthConfigError as e:
        raise CliError(str(e)) from None
    if not args.health_recovery_seconds >= 0:
        raise CliError(f"--health-recovery-seconds {args.health_recovery_seconds}: must not be negative")
    if not args.health_interval > 0:
        raise CliError(f"--health-interval {args.health_interval}: must be more than 0 seconds")


def run(args: argparse.Namespace) -> int:
    setup(args.log_level)
    if not args.node_name:
        raise CliError("--node-name is required (or set CARVE_NODE_NAME / NODE_NAME)")
    plugin_dir = Path(args.plugin_dir)
    fake = args.gpus.startswith("fake:")
    if fake and not os.environ.get(names.ENV_FAKE_STATE):
        # Fake MIG instances must survive a plugin restart, as they do on hardware.
        plugin_dir.mkdir(parents=True, exist_ok=True)
        os.environ[names.ENV_FAKE_STATE] = str(plugin_dir / "fake-gpus.state")
    if fake and not os.environ.get(names.ENV_FAKE_PROC_ROOT):
        # The fake NVML writes MIG capability files there, as the kernel driver does under /proc.
        os.environ[names.ENV_FAKE_PROC_ROOT] = str(plugin_dir / "fake-proc")

    from driver.gpu import InventoryError, discover
    from driver.plugin.mig.ops import NvmlMig
    from driver.plugin.server import Plugin, PluginConfig
    from driver.plugin.state.checkpoint import read_boot_id

    try:
        gpus = discover(args.gpus, args.node_name)
        _check_flags(args, gpus)
    except InventoryError as e:
        raise CliError(str(e)) from None
    config = PluginConfig(
        node_name=args.node_name,
        plugin_dir=plugin_dir,
        run_dir=Path(args.run_dir),
        registry_dir=Path(args.registry_dir),
        cdi_dir=Path(args.cdi_dir),
        driver_root=Path(args.driver_root),
        host_driver_root=Path(args.host_driver_root) if args.host_driver_root else None,
        limiter_dir=Path(args.limiter_dir) if args.limiter_dir else None,
        proc_root=Path(args.proc_root),
        mig_proc_root=Path(os.environ[names.ENV_FAKE_PROC_ROOT]) if fake else None,
        driver_required=not fake,
        healthz_addr=args.healthz_addr,
        metrics_addr=args.metrics_addr,
        strategy=args.strategy,
        fallback_strategy=args.fallback_strategy,
        k8s_version=args.k8s_version,
        split_count=args.split_count,
        soft_context_reserve=context_reserve(args),
        publish_interval_s=args.publish_interval,
        region_interval_s=args.region_interval,
        kill_unenforced=args.kill_unenforced,
        boot_id=read_boot_id(Path(args.boot_id_file)),
        partitioning=args.node_partitioning,
        memory_enforcement=args.memory_enforcement,
        mps_shm_dir=args.mps_shm_dir,
        region_fs=args.region_fs,
        health_monitor=args.health_monitor,
        toolkit_root=Path(args.toolkit_root) if args.toolkit_root else None,
        health_taint_effect=args.health_taint_effect,
        health_lost_effect=args.health_lost_effect,
        health_recovery_s=args.health_recovery_seconds,
        health_ignore_xids=args.health_ignore_xids,
        health_interval_s=args.health_interval,
        claim_status=args.claim_status,
        placement=args.placement,
    )
    mig = NvmlMig()
    plugin = Plugin(config, _cluster(args), gpus, mig, mig)
    try:
        plugin.start()
    except Exception as e:
        event(log, logging.ERROR, "plugin.start-failed", exc_info=True, error=f"{type(e).__name__}: {e}")
        return 1
    frozen = freeze_startup_heap()
    event(log, logging.DEBUG, "plugin.heap-frozen", objects=frozen)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: plugin.request_stop())
    plugin.wait()
    plugin.stop()
    return 0
