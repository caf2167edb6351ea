"""The plugin process's lifecycle: state recovery, publishing, the gRPC servers, health; start and stop.

Order at start matters: feature gates are probed (the fallback decided) first, then state is recovered (so
the node knows which GPUs hold prepared claims), then MIG modes are applied where a GPU is idle
(driver/plugin/mig/modes.py) and slices published, all before the DRA socket serves; the registration socket
appears last, because the kubelet calls us as soon as it sees that socket.
At stop the registration socket goes first, so the kubelet stops sending work before we close.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.grpc import dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc, pluginregistration_pb2_grpc
from driver import names
from driver.cluster.base import ObjectApi
from driver.devices import limits_for
from driver.devices.base import DEFAULT_CONTEXT_RESERVE
from driver.devices.limits import LIMITS
from driver.fsutil import ensure_private_dir
from driver.gpu.model import Gpu
from driver.metrics import MetricsServer, PluginMetrics, plugin_state
from driver.plugin.announce import Announcer
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.claims.status import ClaimStatusWriter, KubeletCalls, StatusQueue, device_statuses
from driver.plugin.container.edits import DriverFilesError, HostLayout
from driver.plugin.container.enforcement_edits import (
    MpsUserCheck,
    PartitionHost,
    mps_control_path,
    nvml_host_path,
)
from driver.plugin.enforcement.backends import EnforcementError, choose, probe_cgroup_v2
from driver.plugin.enforcement.enforcer import Enforcer
from driver.plugin.enforcement.regions import DEFAULT_INTERVAL_S, RegionWatcher
from driver.plugin.health.endpoint import HealthServer, check_dra_socket
from driver.plugin.health.policy import TaintPolicy
from driver.plugin.health.service import add_to_server as add_health_service
from driver.plugin.health.wiring import NodeHealth
from driver.plugin.logfmt import event
from driver.plugin.mig.instances import MigOps
from driver.plugin.mig.modes import (
    GpuMode,
    MigModeSwitch,
)
from driver.plugin.mig.partitioning import NodePartitioningApplier
from driver.plugin.mps.daemon import MpsDaemons
from driver.plugin.mps.daemon import watch as watch_mps
from driver.plugin.placement import DEFAULT_PLACEMENT
from driver.plugin.placement_wiring import PlacementWiring
from driver.plugin.publishing import Publishing
from driver.plugin.service import DraV1, DraV1beta1, Registration, RegistrationState
from driver.plugin.state.checkpoint import Checkpoint, read_boot_id
from driver.plugin.state.recovery import recover
from driver.plugin.strategies import NodeStrategies

log = logging.getLogger(__name__)


@dataclass
class PluginConfig:
    node_name: str
    plugin_dir: Path = Path(names.DEFAULT_PLUGIN_DIR)
    run_dir: Path | None = None  # claims/<uid> (per boot; the CLI's default /run/carve); None: plugin_dir
    registry_dir: Path = Path(names.DEFAULT_REGISTRY_DIR)
    cdi_dir: Path = Path(names.DEFAULT_CDI_DIR)
    driver_root: Path = Path("/")
    host_driver_root: Path | None = None  # None: the same path as driver_root
    limiter_dir: Path | None = None  # default: <plugin-dir>/lib
    healthz_addr: str = ""  # "" = no health server
    metrics_addr: str = ""  # "" = no Prometheus endpoint
    strategy: str = names.STRATEGY_EXCLUSIVE  # strategy rules (driver/devices/rules.py)
    fallback_strategy: str = names.STRATEGY_SOFT  # for a GPU that cannot run what its rule gives
    k8s_version: str = ""  # "" = ask the API server
    split_count: int = 10
    soft_context_reserve: int = DEFAULT_CONTEXT_RESERVE  # bytes per share, see driver/devices/base.py
    proc_root: Path = Path("/proc")  # host pids; MIG capability files and devices too, unless:
    mig_proc_root: Path | None = None  # where MIG capability files are read (fake GPUs: their fake proc)
    driver_required: bool = True  # real GPUs: a missing driver node or library fails the claim
    publish_interval_s: float = 60.0
    region_interval_s: float = DEFAULT_INTERVAL_S  # region watcher: limits files, host pids, NVML cross-check
    kill_unenforced: bool = False  # kill processes that escape the limiter or exceed quota/share (NVML)
    workers: int = 16
    boot_id: str | None = None  # None = read /proc/sys/kernel/random/boot_id
    partitioning: bool = True  # follow this node's NodePartitioning (driver/plugin/mig/partitioning.py)
    memory_enforcement: str = names.MEMORY_ENFORCEMENT_AUTO  # auto | driver | limiter (docs/enforcement.md)
    mps_shm_dir: str = ""  # host directory that is the MPS daemons' /dev/shm; "" = clients keep their own
    region_fs: str = "auto"  # each claim's region directory a tmpfs of its own: auto, on, off (regionfs.py)
    health_monitor: bool = True  # NVML health -> taints/withdrawal, Events, metrics, the kubelet's stream
    # The host's / as the plugin sees it, for the NVIDIA container toolkit's config
    # (driver/plugin/toolkit.py); None: not checked.
    toolkit_root: Path | None = None
    health_taint_effect: str = "NoSchedule"
    health_lost_effect: str = "NoSchedule"
    health_recovery_s: float = 300.0
    health_ignore_xids: str = ""
    health_interval_s: float = 1.0
    claim_status: bool = True  # write status.devices after prepare (driver/plugin/claims/status.py)
    # Order of the shareable devices in the published slices: index | binpack | spread (placement.py)
    placement: str = DEFAULT_PLACEMENT
    placement_coalesce_s: float = 0.5  # a burst of prepares/unprepares gives one re-publish


def _k8s_version(cluster, configured: str) -> str:
    if configured:
        limits_for(configured)  # validates
        return configured
    try:
        major, minor = cluster.server_version()
    except Exception as e:  # an unreachable API server must not stop the node from serving prepared claims
        event(log, logging.WARNING, "k8s-version.unknown", error=f"{type(e).__name__}: {e}", assumed="1.34")
        return "1.34"
    known = sorted(LIMITS, key=lambda v: tuple(int(x) for x in v.split(".")))
    wanted = f"{major}.{minor}"
    if wanted in LIMITS:
        return wanted
    # Newer than any version we know: its limits are at least those of the newest one we know. (The newest
    # is named once, so that the version compared with is always the one returned.)
    newest = known[-1]
    return newest if (major, minor) > tuple(int(x) for x in newest.split(".")) else known[0]


def _fake_dir() -> Path:
    from driver.gpu.nvml import fake_library_path

    return fake_library_path().parent


class Plugin(Publishing):
    def __init__(self, config: PluginConfig, cluster, gpus: list[Gpu], mig: MigOps, switch: MigModeSwitch):
        self.config = config
        self.cluster = cluster
        self.gpus = gpus
        self.mig = mig
        self.switch = switch
        self.modes: dict[int, GpuMode] = {}
        self.partitioning: NodePartitioningApplier | None = None
        self.registration = RegistrationState()
        self.publish_error = ""
        self._catalog: dict[str, NodeDevice] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()  # publish now: a GPU waiting for a mode change became idle
        self._servers: list[grpc.Server] = []
        self.health: HealthServer | None = None
        self.metrics = PluginMetrics(lambda: plugin_state(self), config.node_name)
        self.metrics_server: MetricsServer | None = None
        self.region_watcher: RegionWatcher | None = None
        self.strategies = NodeStrategies(
            config.node_name, config.strategy, config.fallback_strategy, cluster, self.metrics
        )
        self.refused: dict[str, str] = {}  # GPU uuid -> why NVML refused MIG mode (modes.py fallback)
        self.mps: MpsDaemons | None = None
        self.driver_memory: frozenset[str] = frozenset()
        self._status_writer: StatusQueue | None = None
        self.kubelet_calls = KubeletCalls()  # in flight on the DRA socket; the status reports yield to them
        # --placement binpack|spread (placement_wiring.py); None under index, and before start.
        self.placement: PlacementWiring | None = None
        self.announce = Announcer(self.metrics, self.strategies)  # toolkit findings, gates off
        self.node_health = NodeHealth(
            config.node_name,
            gpus,
            TaintPolicy(config.health_taint_effect, config.health_lost_effect),
            cluster,
            self.metrics,
            self._wake.set,
            self._taints_off,
            lambda: self._all_devices,
        )
        self.k8s_version = ""
        self._all_devices: dict[str, NodeDevice] = {}  # published or withdrawn: the health stream's list
        c = config
        self.dra_socket = Path(c.plugin_dir) / names.DRA_SOCKET
        self.reg_socket = Path(c.registry_dir) / names.REGISTRATION_SOCKET
        self.limiter_dir = Path(c.limiter_dir) if c.limiter_dir else Path(c.plugin_dir) / "lib"

    # --- start / stop ----------------------------------------------------------------------------------

    def start(self) -> None:
        c = self.config
        ensure_private_dir(Path(c.plugin_dir))
        if c.run_dir is not None:
            ensure_private_dir(Path(c.run_dir))  # root's only, as the plugin directory
        Path(c.registry_dir).mkdir(parents=True, exist_ok=True)
        layout = self._scan_layout()
        self.k8s_version = _k8s_version(self.cluster, c.k8s_version)
        fake_dir = None if c.driver_required else _fake_dir()
        partition_host = self._choose_memory_enforcement(layout, fake_dir)
        strategies, pinned = self.strategies.resolve(self.gpus)
        if c.toolkit_root is not None:
            self.announce.toolkit(c.toolkit_root)
        if c.partitioning and isinstance(self.cluster, ObjectApi):
            # The NodePartitioning (or a change recorded in progress) overrides the flag, GPU by GPU.
            self.partitioning = NodePartitioningApplier(
                self.cluster,
                c.node_name,
                Path(c.plugin_dir),
                lambda: self.gpus,
                lambda wanted: self.publisher.request(wanted),
                self._wake.set,
                lambda: self.modes,
            )
            strategies = self.partitioning.start_strategies(strategies, pinned, self.strategies.sources)
        self._start_publisher(strategies)
        self.preparer = self._make_preparer(layout, fake_dir, partition_host)
        recover(self.preparer)
        self._publish_once()
        self.mps.ensure(self._mps_gpus())
        watch_mps(self.mps, self._mps_gpus, self._stop)
        self._start_region_watcher()
        self._start_servers()
        threading.Thread(target=self._republish_loop, name="publisher", daemon=True).start()
        if self.partitioning is not None:
            self.partitioning.watch(self._stop)
        event(
            log,
            logging.INFO,
            "plugin.started",
            dra_socket=str(self.dra_socket),
            registration=str(self.reg_socket),
            healthz=f"{c.healthz_addr.rpartition(':')[0]}:{self.health.port}" if self.health else None,
            metrics=self.metrics_server.port if self.metrics_server else None,
            claims=len(self.preparer.state),
        )

    def _scan_layout(self) -> HostLayout:
        """The driver's files and device nodes as the plugin sees them; logs plugin.starting."""
        c = self.config
        layout = HostLayout.scan(
            Path(c.driver_root),
            Path(c.mig_proc_root or c.proc_root),
            c.host_driver_root,
            hook_dir=self.limiter_dir,
            driver_required=c.driver_required,
        )
        try:
            found = layout.driver_files()
            driver = {"driver": found.version, "driver_files": len(found.libraries)} if found else {}
        except DriverFilesError as e:  # each prepare checks again and fails its claim with this error
            event(log, logging.WARNING, "driver.missing", error=str(e))
            driver = {}
        event(
            log,
            logging.INFO,
            "plugin.starting",
            node=c.node_name,
            gpus=[g.name for g in self.gpus],
            dev_root=str(layout.dev_root),
            **driver,
        )
        return layout

    def _choose_memory_enforcement(self, layout: HostLayout, fake_dir: Path | None) -> PartitionHost | None:
        """Which GPUs' memory the driver enforces (self.driver_memory), and the host side of its hook."""
        c = self.config
        cgroup = probe_cgroup_v2()
        try:
            self.driver_memory = choose(c.memory_enforcement, self.gpus, cgroup)
        except EnforcementError as e:
            raise RuntimeError(str(e)) from None
        nvml = nvml_host_path(layout, fake_dir) if self.driver_memory else None
        # choose() takes no GPU on a node without a cgroup v2 mount (driver_capable): only the NVML
        # library the hook loads can still be missing here
        if self.driver_memory and nvml is None:
            event(
                log, logging.WARNING, "memory-enforcement.limiter", reason="no NVML library to hand the hook"
            )
            self.driver_memory = frozenset()
        event(
            log,
            logging.INFO,
            "memory-enforcement",
            mode=c.memory_enforcement,
            driver=sorted(g.name for g in self.gpus if g.uuid in self.driver_memory),
            cgroup=cgroup.mount if cgroup else None,
        )
        if not (self.driver_memory and nvml and cgroup):
            return None
        return PartitionHost(
            self.limiter_dir / names.HOOK_BINARY, nvml, cgroup.mount, fake=not c.driver_required
        )

    def _make_preparer(
        self, layout: HostLayout, fake_dir: Path | None, partition_host: PartitionHost | None
    ) -> Preparer:
        """The Preparer with its enforcement hosts, MPS daemons, status reports and placement hooks."""
        c = self.config
        boot_id = c.boot_id if c.boot_id is not None else read_boot_id()
        run_dir = Path(c.run_dir) if c.run_dir is not None else None
        preparer = Preparer(
            PreparerSettings(c.node_name, Path(c.plugin_dir), Path(c.cdi_dir), self.limiter_dir, run_dir),
            self.cluster,
            layout,
            self.mig,
            lambda: self._catalog,
            Checkpoint(Path(c.plugin_dir) / names.CHECKPOINT_FILE, boot_id),
        )
        preparer.after_unprepare = self._after_unprepare
        preparer.partition_host = partition_host
        self.mps = MpsDaemons(
            mps_control_path(Path(c.driver_root), fake_dir),
            Path(c.plugin_dir) / "mps",
            {k: v for k, v in os.environ.items() if k.startswith("CARVE_FAKE_")},
        )
        preparer.mps_pipe_dir = self.mps.pipe_dir
        preparer.mps_state_dir = self.mps.state_dir
        if self.mps.control is not None:
            # MPS serves one uid per GPU: the hook refuses a container of another uid while it has clients.
            preparer.mps_user_check = MpsUserCheck(
                self.limiter_dir / names.HOOK_BINARY, layout.host_path(self.mps.control)
            )
        preparer.mps_shm_dir = Path(c.mps_shm_dir) if c.mps_shm_dir else None
        preparer.region_fs = c.region_fs
        if c.claim_status and hasattr(self.cluster, "update_resource_claim_status"):
            # Reports go out from a thread of their own: the kubelet's answer never waits on them.
            writer = StatusQueue(ClaimStatusWriter(self.cluster), calls=self.kubelet_calls)
            preparer.after_prepare = lambda plan, record, limits: writer.write(
                plan.ref, device_statuses(plan, record, limits), plan.claim
            )
            self._status_writer = writer
        self.placement = PlacementWiring.for_flag(
            c.placement, preparer.claims_dir, lambda: preparer.state, self._wake.set, c.placement_coalesce_s
        )
        if self.placement is not None:
            preparer.after_prepare = self.placement.after_prepare(preparer.after_prepare)
        preparer.specs.ensure()
        return preparer

    def _start_region_watcher(self) -> None:
        c = self.config
        enforcer = Enforcer(
            c.node_name,
            self.cluster if hasattr(self.cluster, "create_event") else None,
            c.kill_unenforced,
            proc_root=Path(c.proc_root),
        )
        self.region_watcher = RegionWatcher(
            lambda: self.preparer.state,
            self.preparer.claims_dir,
            c.region_interval_s,
            Path(c.proc_root),
            enforcer,
            self.cluster if hasattr(self.cluster, "get_resource_claim") else None,
        )
        self.region_watcher.start()

    def _start_servers(self) -> None:
        """The DRA socket, then the registration socket (the kubelet calls as soon as it sees that one);
        the health and metrics endpoints."""
        c = self.config
        dra = self._serve(
            self.dra_socket,
            lambda s: (
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(
                    DraV1(self.preparer, self.metrics, self.kubelet_calls), s
                ),
                dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
                    DraV1beta1(self.preparer, self.metrics, self.kubelet_calls), s
                ),
                add_health_service(self.node_health.broadcast, s),
            ),
        )
        reg = self._serve(
            self.reg_socket,
            lambda s: pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
                Registration(str(self.dra_socket), self.registration), s
            ),
        )
        self._servers = [reg, dra]
        if c.healthz_addr:
            self.health = HealthServer(c.healthz_addr, self.check_health, self.status)
            self.health.start()
        if c.metrics_addr:
            self.metrics_server = MetricsServer(c.metrics_addr, self.metrics.registry)
            self.metrics_server.start()

    def _serve(self, socket: Path, add) -> grpc.Server:
        if socket.exists() or socket.is_symlink():
            socket.unlink()  # left by a previous process; binding would fail
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="grpc")
        )
        add(server)
        old = os.umask(0o177)  # the socket is born 0600: no window where others can connect
        try:
            server.add_insecure_port(f"unix://{socket}")
            server.start()
        finally:
            os.umask(old)
        os.chmod(socket, 0o600)
        return server

    def stop(self, grace_s: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        if self.placement is not None:
            self.placement.stop()
        self.node_health.stop()  # first: ends the kubelet's health streams, so the servers stop at once
        for socket in (self.reg_socket,):
            if socket.exists():
                socket.unlink()
        for server in self._servers:
            server.stop(grace_s).wait()
        if self.dra_socket.exists():
            self.dra_socket.unlink()
        if self._status_writer is not None:
            self._status_writer.close(grace_s)  # the reports of the last calls still go out
        if self.region_watcher:
            self.region_watcher.stop()
        if self.mps:
            self.mps.stop()
        if self.health:
            self.health.stop()
        if self.metrics_server:
            self.metrics_server.stop()
        event(log, logging.INFO, "plugin.stopped", node=self.config.node_name)

    def wait(self) -> None:
        self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # --- health endpoint --------------------------------------------------------------------------------

    def check_health(self) -> str:
        if self.registration.status == "refused":
            return f"registration refused by the kubelet: {self.registration.error}"
        return check_dra_socket(str(self.dra_socket))

    def status(self) -> dict:
        return {
            "node": self.config.node_name,
            "registration": {"status": self.registration.status, "error": self.registration.error},
            "publishing": {
                "error": self.publish_error,
                "generation": self.publisher.generation,
                "strategies": self.publisher.applied,
                "sources": self.partitioning.sources if self.partitioning else self.strategies.sources,
                "fallbacks": sorted(self.strategies.fallbacks.values(), key=lambda f: int(f["index"])),
                "gatesOff": sorted(self.publisher.gates_off),
            },
            "gpus": [m.status() for _, m in sorted(self.modes.items())],
            "unhealthy": {str(i): cause for i, cause in sorted(self.node_health.unhealthy().items())},
            "claims": {uid: r.state for uid, r in self.preparer.state.items()},
            "memoryEnforcement": {
                "mode": self.config.memory_enforcement,
                "driver": sorted(g.name for g in self.gpus if g.uuid in self.driver_memory),
            },
            "mps": self.mps.health() if self.mps else {},
        }

    def _mps_gpus(self) -> list[tuple[str, str]]:
        """(uuid, name) of the GPUs published under the mps strategy: each gets a control daemon."""
        effective = self.publisher.effective
        return [(g.uuid, g.name) for g in self.gpus if effective.get(g.index) == names.STRATEGY_MPS]
