"""PreStartContainer's work: establish the pod, then write the allocation's files and CDI spec.

Runs before every start of a container (the kubelet calls it because the plugin sets pre_start_required), so
what the Allocate response names exists again after a reboot wiped /var/run/cdi, even when the kubelet
reuses its checkpointed response without calling Allocate. Allocate itself removes any leftover spec of
the same key, so a runtime can never resolve an earlier holder's spec for a new container.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from driver import names
from driver.cdi.store import SpecStore
from driver.fsutil import fsync_dir
from driver.gpu.model import Gpu
from driver.legacy.allocate import allocation_uid, cdi_names, container_limits
from driver.legacy.edits_adapter import allocation_spec
from driver.legacy.identity import IdentityError, PodResourcesClient, resolve
from driver.legacy.kubeapi import LegacyApi
from driver.legacy.metrics import AllocationOwner, write_owner
from driver.plugin.container import regionfs
from driver.plugin.container.claimfiles import write_claim_files
from driver.plugin.container.edits import ClaimFiles, HostLayout
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AllocationSettings:
    node_name: str
    state_dir: Path  # allocations/<uid>/region
    cdi_dir: Path
    limiter_dir: Path
    record_namespace: str
    resource: str = names.LEGACY_GPU


class Allocations:
    def __init__(
        self,
        settings: AllocationSettings,
        layout: HostLayout,
        gpus: list[Gpu],
        api: LegacyApi,
        pod_resources: PodResourcesClient,
    ) -> None:
        self.settings = settings
        self.layout = layout
        self.gpus = {g.uuid: g for g in gpus}
        self.api = api
        self.pod_resources = pod_resources
        self.specs = SpecStore(settings.cdi_dir)
        self.root = Path(settings.state_dir) / "allocations"
        self._lock = threading.Lock()  # one writer per node: allocations of one key never interleave

    def files(self, uid: str) -> ClaimFiles:
        return ClaimFiles(self.root / uid)

    def forget_stale(self, ids: list[str]) -> None:
        """At Allocate: no spec of an earlier holder of these IDs may survive until PreStartContainer."""
        uid = allocation_uid(ids)
        with self._lock:
            self.specs.remove(uid)

    def prepare(self, ids: list[str]) -> str:
        """Resolve the holder of `ids` and write its files and spec; returns the CDI spec's uid."""
        s = self.settings
        resolved = resolve(ids, s.resource, s.node_name, self.pod_resources, self.api, s.record_namespace)
        uid = allocation_uid(ids)
        limits = container_limits(
            resolved.namespace, resolved.pod, ids, resolved.container, self.gpus, s.node_name
        )
        files = self.files(uid)
        minors = [self.gpus[d.uuid].minor for d in resolved.container.devices]  # PCI order, as the limits
        owner = AllocationOwner(
            resolved.namespace,
            resolved.pod,
            resolved.container.name,
            tuple((d.uuid, self.gpus[d.uuid].minor) for d in resolved.container.devices),
        )
        with self._lock:
            self.specs.ensure()
            write_claim_files(files, s.limiter_dir, limits)
            write_owner(files.root, owner)  # for the metrics: whose usage the region holds
            self.specs.write(
                uid, allocation_spec(uid, cdi_names(ids), self.layout, files, s.limiter_dir, limits, minors)
            )
        event(
            log,
            logging.INFO,
            "prestart.done",
            pod=f"{resolved.namespace}/{resolved.pod}",
            uid=resolved.pod_uid,
            container=resolved.container.name,
            allocation=uid,
            gpus=[d.uuid for d in resolved.container.devices],
            limits=[(d.memory_bytes, d.cores_percent) for d in limits.devices],
        )
        return uid

    def collect(self, min_age_s: float = 60.0) -> int:
        """Remove the files and specs of allocations no container holds any more; returns how many.

        Only those older than `min_age_s`: a container may be admitted between our List and our removal.
        """
        try:
            held = {allocation_uid(sorted(s)) for s in self.pod_resources.allocated(self.settings.resource)}
        except Exception as e:  # the kubelet away: collect next time
            event(log, logging.DEBUG, "collect.skipped", error=f"{type(e).__name__}: {e}")
            return 0
        removed = 0
        with self._lock:
            present = {p.name for p in self.root.iterdir()} if self.root.is_dir() else set()
            present |= {u for u in self.specs.claim_uids() if u.startswith(names.LEGACY_CDI_PREFIX)}
            for uid in sorted(present - held):
                if not self._older(uid, min_age_s):
                    continue
                self.specs.remove(uid)
                if (self.root / uid).exists():
                    regionfs.release_under(self.root / uid)
                    shutil.rmtree(self.root / uid)
                    fsync_dir(self.root)
                removed += 1
        if removed:
            event(log, logging.INFO, "collect.done", removed=removed)
        return removed

    def _older(self, uid: str, age_s: float) -> bool:
        now = time.time()
        for path in (self.root / uid, self.specs.path(uid)):
            try:
                if now - path.stat().st_mtime < age_s:
                    return False
            except FileNotFoundError:
                pass
        return True


__all__ = ["AllocationSettings", "Allocations", "IdentityError"]
