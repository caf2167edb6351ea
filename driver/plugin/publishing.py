"""The plugin process's publish half: the slice builder and the Publisher, MIG mode selection before each
publish, the republish loop, and the wake-ups an unprepare gives it.

A mixin of `Plugin` (driver/plugin/server.py), which owns the state it reads and writes (config, GPUs,
modes, the Preparer, health, placement, partitioning): `Plugin.__init__` sets every attribute used here.
It is split out to keep one job per module: server.py wires the process and its servers, this module
decides what the node offers.
"""

from __future__ import annotations

import logging
from pathlib import Path

from driver import names
from driver.devices import Settings, build_slices
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.logfmt import event
from driver.plugin.mig.modes import applied_strategies, apply_modes, prepared_per_gpu, read_modes
from driver.plugin.placement import order_devices
from driver.plugin.publisher import GATE_TAINTS, Publisher, PublishError

log = logging.getLogger(__name__)


class Publishing:
    """`Plugin`'s publish half (module docstring)."""

    def _start_publisher(self, strategies: dict[int, str]) -> None:
        """The slice builder and the publisher; the health monitor and the gate probe before any publish;
        the catalog recovery reads prepared devices from."""
        c = self.config
        settings = Settings(
            split_count=c.split_count,
            soft_context_reserve=c.soft_context_reserve,
            driver_memory=self.driver_memory,
        )
        version = self.k8s_version

        def build(
            chosen: dict[int, str], generation: int, layouts: bool = True, health: bool = True
        ) -> list[dict]:
            # Only the GPUs given a strategy are published (modes.py leaves out those not ready); a MIG GPU
            # with a migLayout publishes only the layout's devices (the one published: a new one waits for
            # the GPU to be idle).
            built = build_slices(
                c.node_name,
                [g for g in self.gpus if g.index in chosen],
                chosen,
                settings,
                version,
                generation,
                layouts=self.partitioning.published_layouts if layouts and self.partitioning else None,
                **(self.node_health.marks(version) if health else {}),
            )
            return order_devices(built, self._gpu_loads(), c.placement)

        self._build = build
        self.publisher = Publisher(
            self.cluster,
            c.node_name,
            build,
            strategies,
            select=self._select_modes,
            on_gates_off=self.announce.gates_off,
        )
        if c.health_monitor:
            # Before the first publish: a GPU found unhealthy (or remembered so) is never offered.
            self.node_health.start_monitor(
                Path(c.plugin_dir), c.health_recovery_s, c.health_ignore_xids, c.health_interval_s
            )
        self.node_health.observe_start()
        self.publisher.probe()
        # Every GPU under its effective strategy, every MIG placement (a layout may have changed since a
        # claim was prepared): what recovery needs to read back prepared devices.
        self._catalog = catalog_from_slices(build(self.publisher.effective, 1, layouts=False, health=False))
        self._all_devices = dict(self._catalog)

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
        if self.placement is not None:
            self.placement.published(stored)
        self._all_devices = catalog_from_slices(self._build(self.publisher.applied, 1, health=False))
        self.node_health.broadcast.publish()
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
                    self.strategies.announce_fallback(
                        gpu, m.desired, self.strategies.rules.get(m.index, ""), m.fallback
                    )
            if self.partitioning is not None:
                self.partitioning.select_layouts({g.index: prepared.get(g.uuid, 0) for g in self.gpus})
        self.metrics.observe_modes(list(self.modes.values()))
        return applied_strategies(self.modes)

    def _gpu_loads(self) -> dict:
        """GPU uuid -> Load of the claims prepared now (placement.py); {} under `index` or before state
        is recovered."""
        return self.placement.loads() if self.placement is not None else {}

    def _after_unprepare(self, record) -> None:
        """Clear the claim's status.devices entries; publish at once when the claim held up a mode change
        (or had a MIG GPU whole, MIG mode off)."""
        if self.placement is not None:
            self.placement.unprepared()
        if self._status_writer is not None:
            try:
                self._status_writer.clear(ClaimRef(record.namespace, record.name, record.uid))
            except Exception as e:  # a report: never fails the unprepare
                event(
                    log,
                    logging.WARNING,
                    "claim-status.failed",
                    uid=record.uid,
                    error=f"{type(e).__name__}: {e}",
                )
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

    def _taints_off(self) -> bool:
        """The cluster has no device taints (gates off): unhealthy devices are withdrawn instead. Asked only
        once the publisher exists: the health monitor, whose marks and changes ask it, starts after it."""
        return GATE_TAINTS in self.publisher.gates_off
