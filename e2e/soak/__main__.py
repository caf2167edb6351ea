"""`python -m e2e.soak` (`make soak`): SOAK_MINUTES (default 10) of pods and faults; SOAK_SEED picks both.

The run: start the local cluster (CARVE_E2E_K8S, CARVE_E2E_GATES, CARVE_E2E_RUNTIME as for `make e2e`),
one long-lived soft-slice pod for the quota checks, then a loop: the workload creates and deletes pods,
the injector fires a fault at seeded random times (every 20-45 s), the capacity and quota invariants are
checked after every fault and every 30 s. A `plugin-outage` fault lasts SOAK_PLUGIN_OUTAGE_S (default 600,
cut to end a minute before the run does): the loop goes on creating pods meanwhile and draws no other fault.
At the end every pod is deleted, and once the API server holds no claim the nodes are checked for leaks.
The figures go to soak-report.json in the run's directory (and CARVE_SOAK_REPORT where set); the last line
is `soak: <pods> pods, <faults> faults, <violations> violations` and the exit code is 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

from kubernetes import client

from driver import names
from e2e import kube
from e2e.cluster.controller import StrategyController
from e2e.cluster.launcher import Cluster
from e2e.cluster.legacy import LegacyShim
from e2e.cluster.versions import resolve
from e2e.soak import faults, invariants
from e2e.soak.workload import SOFT_NODE, Workload, wait_gone


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m e2e.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "10")))
    p.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", "1")))
    p.add_argument("--fault-every", type=float, nargs=2, default=(20.0, 45.0), metavar=("MIN_S", "MAX_S"))
    p.add_argument(
        "--plugin-outage-s",
        type=float,
        default=float(os.environ.get("SOAK_PLUGIN_OUTAGE_S", "600")),
        help="how long a plugin-outage fault leaves the node's plugin down (issue 30: 10 minutes)",
    )
    p.add_argument(
        "--stop-after-outage",
        action="store_true",
        help="end the run once the first plugin-outage is over and checked (e2e/test_plugin_outage.py)",
    )
    p.add_argument(
        "--extras",
        default=os.environ.get("SOAK_EXTRAS", "legacy,controller"),
        help="what runs beside the DRA nodes so that its faults are drawn too (legacy, controller; '' none)",
    )
    p.add_argument(
        "--faults",
        default=os.environ.get("SOAK_FAULTS", ""),
        help="comma-separated fault kinds to draw from (default: every kind this cluster can take)",
    )
    return p.parse_args(argv)


def log(msg: str) -> None:
    print(f"soak {time.strftime('%H:%M:%S')} {msg}", flush=True)


def run(args: argparse.Namespace, c: Cluster, root: Path) -> int:
    # Two streams from the seed: the faults' sequence does not depend on how many pods were made before.
    rng = random.Random(args.seed)
    pod_rng = random.Random(args.seed + 1_000_003)
    api = c.api()
    gates_on = c.version.gates_on
    namespace = f"soak-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    fake = {
        names.ENV_FAKE_GPUS: c.nodes[SOFT_NODE].spec.gpus.removeprefix("fake:"),
        names.ENV_FAKE_SEED: SOFT_NODE,
    }
    extras = start_extras(c, gates_on, args.extras)
    work = Workload(api, namespace, pod_rng, gates_on, fake, legacy=extras.shim is not None)
    work.setup()
    violations: list[str] = []
    quota_pod = None
    if gates_on and c.runtime == "containerd":  # the soft slice with the limiter in a real container
        quota_pod = "soak-quota"
        kube.create(api, namespace, work.pod_spec(quota_pod, "soft"))
        kube.wait_running(api, namespace, quota_pod, timeout_s=180)
        violations += invariants.quota(c, namespace, quota_pod)
    kinds = faults.available(c, gates_on, extras)
    if args.faults:
        wanted = [k.strip() for k in args.faults.split(",") if k.strip()]
        if unknown := sorted(set(wanted) - set(kinds)):
            log(f"SOAK_FAULTS: {', '.join(unknown)} not among this cluster's faults {kinds}")
            return 2
        kinds = wanted
    log(f"seed {args.seed}, {args.minutes:g} min, pods {work.kinds()}, faults {kinds}")
    injected: list[faults.Fault] = []
    outage: faults.Outage | None = None  # the plugin-outage under way
    outages: list[dict] = []
    start = time.monotonic()
    end = start + args.minutes * 60
    next_fault = start + rng.uniform(*args.fault_every)
    next_check = start + 30
    while time.monotonic() < end:
        now = time.monotonic()
        try:
            work.step(now)
        except client.ApiException as e:  # the API server may be the fault of the moment
            log(f"workload: {e.status} {e.reason}")
        if outage is not None and now >= outage.ends_at:
            found = faults.end_outage(c, work, rng, outage)
            f = outage.fault
            outages.append({"node": f.target, **outage.figures, "violations": found})
            log(f"fault {f.kind} on {f.target} ended: {outage.figures} {f.error}")
            violations += found
            outage = None
            next_fault = time.monotonic() + rng.uniform(*args.fault_every)
            next_check = 0
            if args.stop_after_outage:
                violations += _checks(c, api, namespace, quota_pod)
                break
        if now >= next_fault and outage is None:
            kind = rng.choice(kinds)
            length = faults.outage_length(args.plugin_outage_s, end - now)
            if kind == faults.OUTAGE and length:
                outage = faults.begin_outage(c, work, rng, length)
                injected.append(outage.fault)
                log(f"fault {kind} on {outage.fault.target}: plugin down for {length:.0f}s")
            elif kind != faults.OUTAGE:
                f = faults.inject(c, kind, rng, extras)
                injected.append(f)
                log(f"fault {kind} on {f.target}: back in {f.recovery_s:.1f}s {f.error}")
                if f.error:
                    violations.append(f"fault {kind} on {f.target}: did not recover: {f.error}")
            next_fault = time.monotonic() + rng.uniform(*args.fault_every)
            next_check = 0  # check right after every fault
        if time.monotonic() >= next_check:
            found = _checks(c, api, namespace, quota_pod)
            for v in found:
                log(f"VIOLATION {v}")
            violations += found
            next_check = time.monotonic() + 30
        time.sleep(2)
    if outage is not None:  # the loop ran late: the plugin comes back (and is checked) before the cleanup
        found = faults.end_outage(c, work, rng, outage)
        outages.append({"node": outage.fault.target, **outage.figures, "violations": found})
        violations += found
    minutes = (time.monotonic() - start) / 60
    work.delete_all()
    if quota_pod:
        client.CoreV1Api(api).delete_namespaced_pod(quota_pod, namespace, grace_period_seconds=0)
    try:
        wait_gone(api, namespace)
        # the plugins unprepare as the kubelets tear the pods down: give the last ones a moment
        kube.wait("nothing of the soak's left on the nodes", lambda: not invariants.leaks(c, namespace), 180)
    except Exception as e:  # what is left is reported by the leak check below
        log(f"cleanup: {e}")
    violations += invariants.leaks(c, namespace) + invariants.outcomes(work.pods)
    corrupted: dict[str, int] = defaultdict(int)
    for f in injected:
        if f.kind == "corrupt-checkpoint":
            corrupted[f.target] += 1
    violations += invariants.plugin_logs(c, corrupted)
    report = _report(work, injected, violations, minutes, args.seed)
    report["plugin_outages"] = outages
    out = Path(os.environ.get("CARVE_SOAK_REPORT", root / "soak-report.json"))
    out.write_text(json.dumps(report, indent=1))
    for v in violations:
        log(f"VIOLATION {v}")
    log(f"report in {out}")
    print(f"soak: {len(work.pods)} pods, {len(injected)} faults, {len(violations)} violations", flush=True)
    return 1 if violations else 0


def start_extras(c: Cluster, gates_on: bool, wanted: str) -> faults.Extras:
    """SOAK_EXTRAS (default `legacy,controller`): the legacy shim (its node, device plugin, extender and
    carve-scheduler) and the strategy controller (its node and plugin), so their kills are among the faults;
    the controller only with the gates on (it repartitions into MIG)."""
    parts = {w.strip() for w in wanted.split(",") if w.strip()}
    if unknown := sorted(parts - {"legacy", "controller"}):
        raise SystemExit(f"SOAK_EXTRAS: {', '.join(unknown)} is not one of legacy, controller")
    extras = faults.Extras()
    t0 = time.monotonic()
    if "legacy" in parts:
        extras.shim = LegacyShim(c).start()
    if "controller" in parts and gates_on:
        extras.controller = StrategyController(c).start()
    if extras.shim or extras.controller:
        log(f"extras {sorted(parts)} up in {time.monotonic() - t0:.1f}s")
    return extras


def _checks(c: Cluster, api, namespace: str, quota_pod: str | None) -> list[str]:
    try:
        found = invariants.capacity(api)
        if quota_pod:
            found += invariants.quota(c, namespace, quota_pod)
        return found
    except Exception as e:  # a check that cannot run right after a fault is tried again at the next one
        log(f"check deferred: {type(e).__name__}: {e}")
        return []


def _report(work: Workload, injected: list[faults.Fault], violations: list[str], minutes: float, seed: int):
    per_kind: dict[str, list[float]] = defaultdict(list)
    for f in injected:
        if not f.error:
            per_kind[f.kind].append(f.recovery_s)
    ran = sum(1 for p in work.pods.values() if p.ran)
    return {
        "seed": seed,
        "minutes": round(minutes, 2),
        "pods": len(work.pods),
        "pods_ran": ran,
        "pods_per_minute": round(work.per_minute(minutes), 2),
        "never_ran_reasons": sorted({p.why_not for p in work.pods.values() if not p.ran}),
        "faults": len(injected),
        "recovery_s": {
            k: {
                "n": len(v),
                "p50": round(pct(v, 0.5), 2),
                "p99": round(pct(v, 0.99), 2),
                "mean": round(statistics.mean(v), 2),
            }
            for k, v in sorted(per_kind.items())
        },
        "violations": violations,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    version = resolve(os.environ.get("CARVE_E2E_K8S", "1.37"), os.environ.get("CARVE_E2E_GATES", "on"))
    root = Path(tempfile.mkdtemp(prefix=f"carve-soak-{version.minor}-"))
    # Each plugin's state directory on a small tmpfs of its own, so that the full-disk fault fills only it.
    c = Cluster(version, root, runtime=os.environ.get("CARVE_E2E_RUNTIME", "containerd"), state_tmpfs_mib=64)
    try:
        c.start()
        log(f"cluster {version.label} up in {root}")
        return run(args, c, root)
    finally:
        c.stop()
        if os.environ.get("CARVE_E2E_KEEP") != "1":
            c.unmount_all()
            report = root / "soak-report.json"
            if report.exists():
                shutil.copy(report, Path(tempfile.gettempdir()) / "carve-soak-report.json")
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
