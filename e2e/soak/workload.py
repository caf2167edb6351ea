"""The soak's pods: one ResourceClaimTemplate per kind carve serves, pods created at a steady rate with a
seeded random kind and lifetime, deleted when their time is up; what became of each pod is recorded."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kubernetes import client

from driver import names
from e2e import kube

SOFT_NODE = "e2e-n1"  # DEFAULT_NODES: n1 has the MIG GPU 0 and soft GPUs 1, 2; n2 exclusive, timeslice, slots


def kinds(gates_on: bool) -> dict[str, list[dict]]:
    """Each kind's claim requests. Gates off: no soft or MIG devices are published (slots instead)."""
    whole = [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}]
    out = {
        "whole": whole,
        "timeslice": [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_TIMESLICE}}],
        "slot": [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_SLOT}}],
    }
    if gates_on:
        out["soft"] = kube.soft_or_slot(True)
        out["mig"] = kube.mig_profile("1g.10gb")
    mps_class = getattr(names, "CLASS_MPS", None)
    if mps_class:  # issue 20's strategy, where this build has it
        out["mps"] = [{"name": "gpu", "exactly": {"deviceClassName": mps_class}}]
    return out


@dataclass
class SoakPod:
    name: str
    kind: str
    created: float
    delete_at: float
    ran: bool = False
    deleted: bool = False
    why_not: str = ""  # for a pod that never ran: the reasons of its Events


@dataclass
class Workload:
    api: client.ApiClient
    namespace: str
    rng: random.Random
    gates_on: bool
    fake_env: dict[str, str]  # the soft node's fake-GPU env, so the limiter binds the claim's GPUs
    legacy: bool = False  # the legacy shim runs: pods asking for nvidia.com/gpu through carve-scheduler
    max_live: int = 8
    lifetime_s: tuple[float, float] = (20.0, 60.0)
    pods: dict[str, SoakPod] = field(default_factory=dict)
    _n: int = 0

    def setup(self) -> None:
        for kind, requests in kinds(self.gates_on).items():
            kube.create(self.api, self.namespace, kube.template(f"soak-{kind}", requests))

    def kinds(self) -> list[str]:
        return sorted([*kinds(self.gates_on), *(["legacy"] if self.legacy else [])])

    def pod_spec(self, name: str, kind: str) -> dict:
        if kind == "legacy":  # HAMi's resources: a share of one GPU, placed by the extender
            return kube.legacy_pod(name, 1, self.rng.choice((2000, 6000, 12000)), self.rng.choice((10, 30)))
        pod = kube.pod(name, claim_template=f"soak-{kind}", node=SOFT_NODE if kind == "soft" else None)
        if kind == "soft":  # the quota probe needs the glibc image and the node's fake GPUs
            c = pod["spec"]["containers"][0]
            c["image"] = "e2e/glibc"
            c["env"] = [{"name": k, "value": v} for k, v in self.fake_env.items()]
        return pod

    def step(self, now: float) -> None:
        """Create one pod if fewer than max_live are alive; delete those whose time is up."""
        core = client.CoreV1Api(self.api)
        for p in self.pods.values():
            if not p.deleted and now >= p.delete_at:
                self._observe(core, p)
                core.delete_namespaced_pod(p.name, self.namespace, grace_period_seconds=0)
                p.deleted = True
        live = sum(1 for p in self.pods.values() if not p.deleted)
        if live < self.max_live:
            kind = self.rng.choice(self.kinds())
            self._n += 1
            name = f"soak-{kind}-{self._n}"
            kube.create(self.api, self.namespace, self.pod_spec(name, kind))
            self.pods[name] = SoakPod(name, kind, now, now + self.rng.uniform(*self.lifetime_s))

    def observe_all(self) -> None:
        core = client.CoreV1Api(self.api)
        for p in self.pods.values():
            if not p.deleted:
                self._observe(core, p)

    def _observe(self, core: client.CoreV1Api, p: SoakPod) -> None:
        try:
            pod = core.read_namespaced_pod(p.name, self.namespace)
        except client.ApiException:
            return
        if pod.status.phase in ("Running", "Succeeded"):
            p.ran = True
        elif not p.ran:
            events = core.list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.name={p.name}"
            ).items
            p.why_not = ",".join(sorted({e.reason for e in events if e.reason}))

    def delete_all(self) -> None:
        core = client.CoreV1Api(self.api)
        self.observe_all()
        for p in self.pods.values():
            if not p.deleted:
                core.delete_namespaced_pod(p.name, self.namespace, grace_period_seconds=0)
                p.deleted = True

    def per_minute(self, minutes: float) -> float:
        return len(self.pods) / minutes if minutes else 0.0


def wait_gone(api: client.ApiClient, namespace: str, timeout_s: float = 300.0) -> None:
    core = client.CoreV1Api(api)
    resource = client.CustomObjectsApi(api)

    def empty() -> bool:
        pods = core.list_namespaced_pod(namespace).items
        claims = resource.list_namespaced_custom_object(kube.GROUP, kube.VERSION, namespace, "resourceclaims")
        return not pods and not claims["items"]

    kube.wait(f"every soak pod and claim in {namespace} gone", empty, timeout_s=timeout_s)
