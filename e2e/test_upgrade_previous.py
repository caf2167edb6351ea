"""Upgrading from the previous release to this tree, and rolling back, with live claims (docs/e2e.md,
"Upgrades with live claims"): carve installed with `helm install` from the chart and the image of an earlier
commit (CARVE_E2E_PREVIOUS_REF, default 6eae394: the last before 44e00a0 moved each prepared claim's
directory from `<plugin-dir>/claims/<uid>` to `<run-dir>/claims/<uid>`; e2e/cluster/previous.py builds it
with that commit's own Dockerfile and build script, cached), a pod of every kind on it (two soft slices),
then:

1. `helm upgrade` to this tree's chart and image: running pods untouched (same containers, no restart,
   same CDI spec bytes), the soft slice's quota still enforced in its container; a soft claim the old
   plugin prepared (its directory in the old place) and the MIG one unprepare cleanly with the new plugin;
   a new soft claim prepares under the run directory, quota enforced;
2. `helm rollback` to the previous release while that new claim is live. What the old plugin, which knows
   nothing of --run-dir, does with it (docs/install.md, "Rolling back"): it keeps the claim (checkpoint,
   CDI spec, the running container, its quota) and unprepares it without an error, but it does not watch
   it (its region watcher finds no limits file where it looks) and leaves its directory, with the region's
   tmpfs mounted, under the run directory;
3. `helm upgrade` to this tree again: the new plugin removes that leftover at start, and with every pod
   gone nothing is left on the node.

With a CARVE_E2E_PREVIOUS_REF whose chart already has plugin.runDir, step 2 asserts the claim's directory
is removed instead. Needs real containers; CARVE_E2E_UPGRADE_PREVIOUS=0 leaves the module out (it starts
a cluster of its own and, the first time, builds the previous image: minutes).
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from e2e.cluster import previous as previous_release
from e2e.cluster.chart import RELEASE
from e2e.cluster.images import ImageError
from e2e.kube import delete_namespace, delete_pod, wait
from e2e.soak import invariants
from e2e.upgrades import (
    DS,
    NAMESPACE_WORK,
    Upgrade,
    assert_prepares,
    assert_quota_holds,
    assert_started_with,
    assert_unprepares,
    assert_untouched,
    mounts_under,
    release_session,
)

ENV_OPT_OUT = "CARVE_E2E_UPGRADE_PREVIOUS"
# Claim UIDs the later steps look for after their pods are gone.
uids: dict[str, str] = {}
mounts: dict[str, list[str]] = {}  # pod -> the mounts under its claim's directory while it ran


@pytest.fixture(scope="module")
def previous() -> previous_release.PreviousRelease:
    if os.environ.get(ENV_OPT_OUT, "1") == "0":
        pytest.skip(f"{ENV_OPT_OUT}=0")
    runtime = os.environ.get("CARVE_E2E_RUNTIME", "containerd")
    if runtime != "containerd":  # before the build: it is for a containerd node only
        pytest.skip(f"the plugin's DaemonSet needs real containers; this session runs {runtime} on purpose")
    try:
        release = previous_release.build()
    except ImageError as e:
        pytest.fail(f"e2e: the previous release could not be built: {e}")
    print(
        f"\ne2e: previous release {release.ref} ({release.commit[:12]}, {release.version}): "
        f"{release.image.name}, chart {release.chart}; ready in {release.build_s:.1f}s"
    )
    return release


@pytest.fixture(scope="module")
def up(previous: previous_release.PreviousRelease):
    # old-soft stays through every step (its quota checked after each); old-soft-2 is unprepared after the
    # upgrade.
    yield from release_session("upgrade-previous", previous.chart, previous.image, extra=("soft",))


@pytest.fixture(scope="module")
def upgraded(up: Upgrade) -> Upgrade:
    up.roll(*up.upgrade_args())
    return up


@pytest.fixture(scope="module")
def rolled_back(upgraded: Upgrade) -> Upgrade:
    upgraded.roll("rollback", RELEASE, "1")
    return upgraded


@pytest.fixture(scope="module")
def rolled_forward(rolled_back: Upgrade) -> Upgrade:
    rolled_back.roll(*rolled_back.upgrade_args())
    return rolled_back


def _env(u: Upgrade) -> dict[str, str]:
    return {e.name: e.value for e in u.plugin_pod().spec.containers[0].env or []}


def _where(u: Upgrade, uid: str, run_dir: bool) -> None:
    """Claim `uid`'s directory is in one place only: the run directory, or the old place."""
    run, legacy = u.claim_dirs(uid)
    here, not_there = (run, legacy) if run_dir else (legacy, run)
    assert here.is_dir() and not not_there.exists(), (
        f"claim {uid}: directory expected at {here} ({here.exists()}) and not at {not_there} "
        f"({not_there.exists()})"
    )


def test_the_previous_release_prepares_under_the_plugin_directory(
    up: Upgrade, previous: previous_release.PreviousRelease
):
    assert up.plugin_pod().spec.containers[0].image == previous.image.name
    for name in ("old-soft", "old-soft-2"):
        _where(up, up.claim_uid(name), run_dir=previous.knows_run_dir)
    assert_quota_holds(up, "before the upgrade")


def test_helm_upgrade_from_the_previous_release_rolls_the_plugin_to_this_tree(upgraded: Upgrade):
    pod = upgraded.plugin_pod()
    assert pod.metadata.owner_references[0].name == DS
    assert upgraded.c.image and pod.spec.containers[0].image == upgraded.c.image.name
    assert _env(upgraded).get("CARVE_RUN_DIR") == str(upgraded.node.run_dir)
    history = json.loads(upgraded.c.helm("history", RELEASE, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed", history
    # The new plugin loaded every claim the old one prepared from the checkpoint the old one wrote.
    assert_started_with(upgraded, pod, len(upgraded.live))


def test_running_pods_keep_their_devices_through_the_upgrade(upgraded: Upgrade):
    assert_untouched(upgraded, "after helm upgrade from the previous release")
    assert_quota_holds(upgraded, "after helm upgrade from the previous release")


def test_claims_the_previous_release_prepared_unprepare_cleanly(
    upgraded: Upgrade, previous: previous_release.PreviousRelease
):
    uid = upgraded.claim_uid("old-soft-2")
    _where(upgraded, uid, run_dir=previous.knows_run_dir)
    old_place = upgraded.claim_dirs(uid)[0 if previous.knows_run_dir else 1]
    # Directory, CDI spec and checkpoint entry gone; its region tmpfs unmounted.
    assert_unprepares(upgraded, "old-soft-2")
    assert mounts_under(old_place) == [], mounts_under(old_place)
    # MIG: the instance the old plugin created and journaled is destroyed by the new one.
    assert_unprepares(upgraded, "old-mig" if upgraded.gates_on else "old-whole")


def test_a_new_claim_prepares_under_the_run_directory(upgraded: Upgrade):
    # new-soft is deleted after the rollback; new-soft-2 runs through the rollback and the next upgrade.
    for name in ("new-soft", "new-soft-2"):
        live = assert_prepares(upgraded, name, "soft")
        uids[name] = live.claim_uid
        _where(upgraded, live.claim_uid, run_dir=True)
        # Its region's own tmpfs (the chart's run directory propagates mounts both ways).
        mounts[name] = mounts_under(upgraded.claim_dirs(live.claim_uid)[0])
        assert mounts[name], f"{name}: no region tmpfs under the claim's directory"
        spec = upgraded.spec_path(live.claim_uid).read_text()
        assert str(upgraded.claim_dirs(live.claim_uid)[0]) in spec, f"{name}: no CDI mount from the run dir"
        assert_quota_holds(upgraded, "a claim prepared after the upgrade", name)


def test_helm_rollback_to_the_previous_release(
    rolled_back: Upgrade, previous: previous_release.PreviousRelease
):
    pod = rolled_back.plugin_pod()
    assert pod.spec.containers[0].image == previous.image.name
    if not previous.knows_run_dir:
        assert "CARVE_RUN_DIR" not in _env(rolled_back)
    history = json.loads(rolled_back.c.helm("history", RELEASE, "-o", "json").stdout)
    assert history[-1]["revision"] == 3 and "Rollback to 1" in history[-1]["description"], history
    # Every live claim, the one the new plugin prepared under the run directory among them, is loaded from
    # the checkpoint: the old plugin reads the checkpoint the new one wrote.
    assert "new-soft" in rolled_back.live
    assert_started_with(rolled_back, pod, len(rolled_back.live))


def test_running_pods_keep_their_devices_through_the_rollback(rolled_back: Upgrade):
    assert_untouched(rolled_back, "after helm rollback")
    assert_quota_holds(rolled_back, "after helm rollback")
    # The claim the new plugin prepared: its files are where its container's mounts come from, and the
    # old plugin, which does not look there, removed nothing under it.
    for name in ("new-soft", "new-soft-2"):
        assert_quota_holds(rolled_back, "after helm rollback", name)
        _where(rolled_back, uids[name], run_dir=True)


def test_the_previous_plugin_does_not_watch_a_claim_under_the_run_directory(
    rolled_back: Upgrade, previous: previous_release.PreviousRelease
):
    """The documented cost of such a rollback: the old plugin's region watcher looks for the claim's limits
    file under <plugin-dir>/claims, finds none and leaves the claim out (no core-share updates, no NVML
    cross-check for it) until it is unprepared."""
    if previous.knows_run_dir:
        return  # nothing to document: that release looks under the run directory
    uid = uids["new-soft"]
    pod = rolled_back.plugin_pod()

    def reported():
        return [
            line
            for line in rolled_back.plugin_log(pod).splitlines()
            if "regions.limits-unreadable" in line and uid in line
        ]

    lines = wait(f"the old plugin's region watcher on claim {uid}", reported, 60)
    assert "cannot open its directory" in lines[0], lines[0]
    print(f"\ne2e: the previous release's plugin on the run-dir claim: {lines[0]}")


def test_a_claim_the_new_plugin_prepared_unprepares_after_the_rollback(
    rolled_back: Upgrade, previous: previous_release.PreviousRelease
):
    u, uid = rolled_back, uids["new-soft"]
    run = u.claim_dirs(uid)[0]
    delete_pod(u.api, NAMESPACE_WORK, "new-soft")
    spec = u.spec_path(uid)
    # Unprepare succeeds for the kubelet: CDI spec and checkpoint entry gone.
    wait(f"claim {uid} unprepared", lambda: not spec.exists() and uid not in u.checkpoint_claims(), 120)
    if previous.knows_run_dir:
        wait(f"claim {uid}'s directory removed", lambda: not run.exists(), 30)
    else:
        # The documented leftover (docs/install.md): the old plugin removes the directory only where it
        # puts one, so this one stays, with its region tmpfs, until this tree's plugin starts again.
        time.sleep(2)
        assert run.is_dir(), f"{run}: the old plugin removed it (the documented behaviour changed)"
        assert mounts_under(run) == mounts["new-soft"], mounts_under(run)
        print(f"\ne2e: left by the previous release's unprepare: {run}, mounts {mounts_under(run)}")
    # And a new claim prepares with the old plugin again, in its own place.
    back = assert_prepares(u, "back-soft", "soft")
    _where(u, back.claim_uid, run_dir=previous.knows_run_dir)


def test_rolling_forward_again_removes_what_the_rollback_left(
    rolled_forward: Upgrade, previous: previous_release.PreviousRelease
):
    u, uid = rolled_forward, uids["new-soft"]
    run = u.claim_dirs(uid)[0]
    assert not run.exists() and mounts_under(run) == [], f"{run} is left: {mounts_under(run)}"
    log = u.plugin_log(u.plugin_pod())
    removed = [line for line in log.splitlines() if "claimdir.stray-removed" in line]
    # This tree's plugin removed the leftover at its start (and nothing else: every other claim is live);
    # a previous release that knows the run directory left none.
    expected = [] if previous.knows_run_dir else [uid]
    assert [re.search(r"\buid=(\S+)", line).group(1) for line in removed] == expected, removed
    print(f"\ne2e: this tree's plugin at start: {removed}")
    assert_untouched(u, "after helm upgrade again")
    assert_quota_holds(u, "after helm upgrade again")
    # The run-dir claim that was live all along: kept where it is, with its region's tmpfs, not a stray.
    _where(u, uids["new-soft-2"], run_dir=True)
    assert mounts_under(u.claim_dirs(uids["new-soft-2"])[0]) == mounts["new-soft-2"]
    assert_quota_holds(u, "after helm upgrade again", "new-soft-2")
    # back-soft: prepared in the old place by the rolled-back plugin, unprepared by this tree's.
    assert_unprepares(u, "back-soft")


def test_nothing_is_left_once_every_pod_is_gone(rolled_forward: Upgrade):
    u = rolled_forward
    delete_namespace(u.api, NAMESPACE_WORK)
    wait("nothing of the claims left on the node", lambda: not invariants.leaks(u.c, NAMESPACE_WORK), 120)
    for top in u.claim_dirs(""):
        assert mounts_under(top) == [], mounts_under(top)
