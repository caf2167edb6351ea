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
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.grpc import dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc, pluginregistration_pb2_grpc
from driver import names
from driver.cluster.base import ObjectApi
from driver.devices import Settings, build_slices, limits_for
from driver.devices.base import DEFAULT_CONTEXT_RESERVE
from driver.devices.limits import LIMITS
from driver.devices.rules import (
    SOURCE_DEFAULT,
    SOURCE_FALLBACK,
    SOURCE_PINNED,
    RuleError,
    StrategyRules,
    can_run,
    parse_rules,
    resolve,
)
from driver.fsutil import ensure_private_dir
from driver.gpu.model import Gpu
from driver.metrics import MetricsServer, PluginMetrics, plugin_state
from driver.plugin.claims.catalog import NodeDevice, catalog_from_slices
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import DriverFilesError, HostLayout
from driver.plugin.enforcement.enforcer import Enforcer
from driver.plugin.enforcement.regions import DEFAULT_INTERVAL_S, RegionWatcher
from driver.plugin.health.endpoint import HealthServer, check_dra_socket
from driver.plugin.logfmt import event
from driver.plugin.mig.instances import MigOps
from driver.plugin.mig.modes import (
    GpuMode,
    MigModeSwitch,
    applied_strategies,
    apply_modes,
    prepared_per_gpu,
    read_modes,
)
from driver.plugin.mig.partitioning import NodePartitioningApplier
from driver.plugin.publisher import Publisher, PublishError
from driver.plugin.service import DraV1, DraV1beta1, Registration, RegistrationState
from driver.plugin.state.checkpoint import Checkpoint, read_boot_id
from driver.plugin.state.recovery import recover

log = logging.getLogger(__name__)


@dataclass
class PluginConfig:
    node_name: str
    plugin_dir: Path = Path(names.DEFAULT_PLUGIN_DIR)
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
    # Newer than any version we know: its limits are at least those of the newest one we know.
    return known[-1] if (major, minor) > tuple(int(x) for x in known[-1].split(".")) else known[0]


class Plugin:
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
        self.metrics = PluginMetrics(lambda: plugin_state(self))
        self.metrics_server: MetricsServer | None = None
        self.region_watcher: RegionWatcher | None = None
        self.rules: dict[int, str] = {}  # GPU index -> the rule that gave its strategy ("" built-in)
        self.sources: dict[int, str] = {}  # GPU index -> who set its strategy at start (rules.SOURCES)
        self.refused: dict[str, str] = {}  # GPU uuid -> why NVML refused MIG mode (modes.py fallback)
        self.fallbacks: dict[str, dict[str, str]] = {}  # GPU uuid -> the fallback announced for it
        c = config
        self.dra_socket = Path(c.plugin_dir) / names.DRA_SOCKET
        self.reg_socket = Path(c.registry_dir) / names.REGISTRATION_SOCKET
        self.limiter_dir = Path(c.limiter_dir) if c.limiter_dir else Path(c.plugin_dir) / "lib"

    # --- start / stop ----------------------------------------------------------------------------------

    def start(self) -> None:
        c = self.config
        ensure_private_dir(Path(c.plugin_dir))
        Path(c.registry_dir).mkdir(parents=True, exist_ok=True)
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

        version = _k8s_version(self.cluster, c.k8s_version)
        settings = Settings(split_count=c.split_count, soft_context_reserve=c.soft_context_reserve)
        strategies, pinned = self._strategies_from_rules()
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
            strategies = self.partitioning.start_strategies(strategies, pinned, self.sources)

        def build(chosen: dict[int, str], generation: int, layouts: bool = True) -> list[dict]:
            # Only the GPUs given a strategy are published (modes.py leaves out those not ready); a MIG GPU
            # with a migLayout publishes only the layout's devices (the one published: a new one waits for
            # the GPU to be idle).
            return build_slices(
                c.node_name,
                [g for g in self.gpus if g.index in chosen],
                chosen,
                settings,
                version,
                generation,
                layouts=self.partitioning.published_layouts if layouts and self.partitioning else None,
            )

        self.publisher = Publisher(self.cluster, c.node_name, build, strategies, select=self._select_modes)
        self.publisher.probe()
        # Every GPU under its effective strategy, every MIG placement (a layout may have changed since a
        # claim was prepared): what recovery needs to read back prepared devices.
        self._catalog = catalog_from_slices(build(self.publisher.effective, 1, layouts=False))

        boot_id = c.boot_id if c.boot_id is not None else read_boot_id()
        self.preparer = Preparer(
            PreparerSettings(c.node_name, Path(c.plugin_dir), Path(c.cdi_dir), self.limiter_dir),
            self.cluster,
            layout,
            self.mig,
            lambda: self._catalog,
            Checkpoint(Path(c.plugin_dir) / names.CHECKPOINT_FILE, boot_id),
        )
        self.preparer.after_unprepare = self._after_unprepare
        self.preparer.specs.ensure()
        recover(self.preparer)
        self._publish_once()
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

        dra = self._serve(
            self.dra_socket,
            lambda s: (
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1(self.preparer, self.metrics), s),
                dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
                    DraV1beta1(self.preparer, self.metrics), s
                ),
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

    # --- strategies: rules, node annotation, fallback ---------------------------------------------------

    def _annotation_rules(self) -> StrategyRules | None:
        """The node's `gpu.carve.dev/strategy` annotation as rules; None when absent, unreadable or invalid
        (then the chart's rules hold, and the log and a Node Event say why)."""
        node = self.config.node_name
        try:
            obj = self.cluster.get_object("nodes", node)
        except Exception as e:  # no API server, no RBAC for nodes, a file cluster: the chart's rules hold
            event(
                log,
                logging.DEBUG,
                "strategy.annotation-unreadable",
                node=node,
                error=f"{type(e).__name__}: {e}",
            )
            return None
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_STRATEGY)
        if text is None:
            return None
        try:
            return parse_rules(text, f"Node {node} annotation {names.ANNOTATION_STRATEGY}", pin_default=True)
        except RuleError as e:
            event(
                log, logging.ERROR, "strategy.annotation-invalid", node=node, error=str(e), action="ignored"
            )
            self._node_event("StrategyAnnotationInvalid", f"{e}; the chart's --strategy rules apply")
            return None

    def _strategies_from_rules(self) -> tuple[dict[int, str], set[int]]:
        """Each GPU's strategy from the node annotation and --strategy, with the fallback for a GPU that
        cannot run its own; and the GPUs those rules pin. Never raises for one GPU."""
        c = self.config
        chart = parse_rules(c.strategy)
        annotation = self._annotation_rules()
        for where, rules in (("--strategy", chart), (names.ANNOTATION_STRATEGY, annotation)):
            if rules is None:
                continue
            for text in rules.unmatched(self.gpus):
                event(
                    log,
                    logging.WARNING,
                    "strategy.rule-unmatched",
                    rule=text,
                    source=where,
                    gpus=[f"{g.index}:{g.product}" for g in self.gpus],
                )
            for text in rules.shadowed(self.gpus):
                event(
                    log,
                    logging.WARNING,
                    "strategy.rule-shadowed",
                    rule=text,
                    source=where,
                    detail="an earlier rule matches every GPU it matches (first match wins)",
                )
        strategies: dict[int, str] = {}
        pinned: set[int] = set()
        for gpu in self.gpus:
            r = resolve([gpu], chart, annotation)[gpu.index]
            self.rules[gpu.index] = r.rule
            if r.pinned:
                pinned.add(gpu.index)
            why = can_run(gpu, r.strategy)
            if why:
                strategies[gpu.index] = c.fallback_strategy
                self.sources[gpu.index] = SOURCE_FALLBACK
                self._announce_fallback(gpu, r.strategy, r.rule, why)
            else:
                strategies[gpu.index] = r.strategy
                self.sources[gpu.index] = SOURCE_PINNED if r.pinned else SOURCE_DEFAULT
        return strategies, pinned

    def _announce_fallback(self, gpu: Gpu, wanted: str, rule: str, why: str) -> None:
        """Once per GPU and wanted strategy: a warning line, a Node Event (StrategyFallback), the metric."""
        fallback = self.config.fallback_strategy
        if self.fallbacks.get(gpu.uuid, {}).get("wanted") == wanted:
            return
        self.fallbacks[gpu.uuid] = {
            "index": str(gpu.index),
            "wanted": wanted,
            "strategy": fallback,
            "rule": rule,
        }
        event(
            log,
            logging.WARNING,
            "strategy.fallback",
            gpu=gpu.name,
            uuid=gpu.uuid,
            product=gpu.product,
            rule=rule or "(built-in default)",
            wanted=wanted,
            strategy=fallback,
            reason=why,
        )
        self.metrics.observe_fallback(gpu.uuid, gpu.index, wanted, fallback)
        self._node_event(
            "StrategyFallback",
            f"GPU {gpu.index} ({gpu.product}, {gpu.uuid}): rule {rule or '(built-in default)'!r} gives "
            f"{wanted}, but {why}; it runs {fallback} (--fallback-strategy)",
        )

    def _node_event(self, reason: str, message: str) -> None:
        if not hasattr(self.cluster, "create_event"):
            return
        node = self.config.node_name
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{node}.", "namespace": "default"},
            # The kubelet names its Node Events' uid after the node too: `kubectl describe node` finds them.
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": "carve-kubelet-plugin", "host": node},
            "reportingComponent": f"{names.DRIVER_NAME}/kubelet-plugin",
            "reportingInstance": node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.cluster.create_event("default", body)
        except Exception as e:  # an Event is a courtesy: never stop the plugin for it
            event(
                log, logging.WARNING, "strategy.event-failed", reason=reason, error=f"{type(e).__name__}: {e}"
            )

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
        for socket in (self.reg_socket,):
            if socket.exists():
                socket.unlink()
        for server in self._servers:
            server.stop(grace_s).wait()
        if self.dra_socket.exists():
            self.dra_socket.unlink()
        if self.region_watcher:
            self.region_watcher.stop()
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

    # --- publishing ------------------------------------------------------------------------------------

    def _publish_once(self) -> bool:
        try:
            stored = self.publisher.publish()
        except PublishError as e:
            self.publish_error = str(e)
            self.metrics.observe_publish_failure()
            event(log, logging.ERROR, "publish.failed", error=str(e), action="retrying in the background")
            self._catalog = catalog_from_slices(self.publisher.desired())
            return False
        self.publish_error = ""
        self.metrics.observe_publish(self.config.node_name, stored)
        # What the server kept is what the scheduler allocates from.
        self._catalog = catalog_from_slices(stored)
        if self.partitioning is not None:
            try:
                self.partitioning.published()
            except Exception as e:  # the status is a report: never let it stop publishing
                event(
                    log,
                    logging.ERROR,
                    "partitioning.status-error",
                    exc_info=True,
                    error=f"{type(e).__name__}: {e}",
                )
        return True

    def _select_modes(self, _effective: dict[int, str]) -> dict[int, str]:
        """The publisher's `select`: switch MIG modes of idle GPUs, publish each GPU only as its mode fits.

        Under the node lock, so no claim is prepared on a GPU while its mode changes.
        """
        with self.preparer.node_lock.hold():
            self.preparer.sync()
            prepared = prepared_per_gpu(self.preparer.state.values())
            gpus = read_modes(self.gpus, self.switch)
            # requested + gates_off: modes.py applies the same fallback that gave `effective`.
            self.gpus, self.modes = apply_modes(
                gpus,
                self.publisher.requested,
                self.switch,
                self.publisher.gates_off,
                prepared,
                self.refused,
                self.config.fallback_strategy,
            )
            for m in self.modes.values():
                if m.fallback:
                    gpu = next(g for g in self.gpus if g.index == m.index)
                    self._announce_fallback(gpu, m.desired, self.rules.get(m.index, ""), m.fallback)
            if self.partitioning is not None:
                self.partitioning.select_layouts({g.index: prepared.get(g.uuid, 0) for g in self.gpus})
        self.metrics.observe_modes(list(self.modes.values()))
        return applied_strategies(self.modes)

    def _after_unprepare(self, record) -> None:
        """Publish at once when the claim held up a mode change (or had a MIG GPU whole, MIG mode off)."""
        waits = self.partitioning.layout_waits if self.partitioning else {}
        waiting = {m.uuid for m in self.modes.values() if m.pending or m.index in waits}
        mig = {m.uuid for m in self.modes.values() if m.effective == names.STRATEGY_MIG}
        whole = {d.gpu_uuid for d in record.devices if d.type == names.TYPE_GPU}
        if waiting & {d.gpu_uuid for d in record.devices} or whole & mig:
            self._wake.set()

    def _republish_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.config.publish_interval_s if not self.publish_error else 5.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._publish_once()

    # --- health ----------------------------------------------------------------------------------------

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
                "sources": self.partitioning.sources if self.partitioning else self.sources,
                "fallbacks": sorted(self.fallbacks.values(), key=lambda f: int(f["index"])),
                "gatesOff": sorted(self.publisher.gates_off),
            },
            "gpus": [m.status() for _, m in sorted(self.modes.items())],
            "claims": {uid: r.state for uid, r in self.preparer.state.items()},
        }
