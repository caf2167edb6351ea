"""Upgrades with live claims (issue 22): carve installed with `helm install` (plugin mode `helm`: one release,
one node, the carve image built here), pods of every kind running on it, then `helm upgrade` to a second
tag of the image with a changed value (the plugin's log level), which rolls the DaemonSet's pod, and
`helm rollback` to the first revision, which rolls it back. Across both:
- running pods are untouched (same containers, no restart), their claims stay allocated and reserved, and
  their CDI specs are the same bytes: the new plugin pod loads the prepared claims from the checkpoint on
  the host (its `plugin.started` event counts them) instead of preparing them again;
- the soft slice's quota still holds in its running container (the fake libcuda through the limiter);
- a new claim prepares with the new plugin; deleting a pod prepared by the old plugin unprepares it
  cleanly with the new one (CDI spec, claim directory, checkpoint entry and MIG instance gone);
- at the end, with every pod gone, nothing is left on the node.

Needs real containers (the plugin runs in the chart's pod): skipped, naming the runtime, on the fake CRI.
CARVE_E2E_UPGRADE=0 leaves it out (it starts a cluster of its own). docs/e2e.md, "Upgrades with live claims".
"""

from __future__ import annotations

import json
import os

import pytest

from e2e.cluster.chart import RELEASE
from e2e.kube import delete_namespace, wait
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
    release_session,
)

UPGRADE_TAG_SUFFIX = "-upgrade"


@pytest.fixture(scope="module")
def up():
    if os.environ.get("CARVE_E2E_UPGRADE", "1") == "0":
        pytest.skip("CARVE_E2E_UPGRADE=0")
    yield from release_session("upgrade")


@pytest.fixture(scope="module")
def upgraded(up: Upgrade) -> Upgrade:
    """`helm upgrade` to a second tag of the same image (imported into the node's containerd) with the
    plugin's log level changed: both change the DaemonSet's pod template, so its pod rolls."""
    assert up.c.image and up.node.containerd
    new_image = up.c.image.name + UPGRADE_TAG_SUFFIX
    up.node.containerd.ctr("images", "tag", "--force", up.c.image.name, new_image)
    tag = new_image.rsplit(":", 1)[1]
    up.roll(*up.upgrade_args(logLevel="debug"), "--set", f"image.tag={tag}")
    return up


@pytest.fixture(scope="module")
def rolled_back(upgraded: Upgrade) -> Upgrade:
    """`helm rollback` to revision 1, with the pods of before the upgrade and the one made after it live."""
    upgraded.roll("rollback", RELEASE, "1")
    return upgraded


def test_helm_upgrade_rolls_the_plugin_to_the_new_image_and_value(upgraded: Upgrade):
    pod = upgraded.plugin_pod()
    assert pod.metadata.owner_references[0].name == DS
    assert pod.spec.containers[0].image.endswith(UPGRADE_TAG_SUFFIX), pod.spec.containers[0].image
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get("CARVE_LOG_LEVEL") == "debug", env
    history = json.loads(upgraded.c.helm("history", RELEASE, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed", history
    # The new pod found the prepared claims in the checkpoint on the host: it started with all of them.
    assert_started_with(upgraded, pod, len(upgraded.live))


def test_running_pods_keep_their_devices_through_the_upgrade(upgraded: Upgrade):
    assert_untouched(upgraded, "after helm upgrade")


def test_quotas_hold_in_running_containers_after_the_upgrade(upgraded: Upgrade):
    assert_quota_holds(upgraded, "after helm upgrade")


def test_a_new_claim_prepares_after_the_upgrade(upgraded: Upgrade):
    # The time-sliced GPU takes more than one claim while the old pod still holds it.
    assert_prepares(upgraded, "new-timeslice", "timeslice")


def test_an_old_pod_unprepares_cleanly_after_the_upgrade(upgraded: Upgrade):
    # Prepared by the old plugin, unprepared by the new one (MIG: the instance the old one created).
    assert_unprepares(upgraded, "old-mig" if upgraded.gates_on else "old-whole")


def test_helm_rollback_rolls_the_plugin_back(rolled_back: Upgrade):
    pod = rolled_back.plugin_pod()
    assert rolled_back.c.image and pod.spec.containers[0].image == rolled_back.c.image.name
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get("CARVE_LOG_LEVEL") == "info", env
    assert len(set(rolled_back.plugin_uids)) == 3, rolled_back.plugin_uids
    history = json.loads(rolled_back.c.helm("history", RELEASE, "-o", "json").stdout)
    assert history[-1]["revision"] == 3 and "Rollback to 1" in history[-1]["description"], history
    assert_started_with(rolled_back, pod, len(rolled_back.live))


def test_running_pods_keep_their_devices_through_the_rollback(rolled_back: Upgrade):
    # Among them new-timeslice, prepared by the upgraded plugin.
    assert "new-timeslice" in rolled_back.live
    assert_untouched(rolled_back, "after helm rollback")
    assert_quota_holds(rolled_back, "after helm rollback")


def test_after_the_rollback_claims_prepare_and_unprepare(rolled_back: Upgrade):
    # Gates off: GPU 2 is free since the upgraded plugin unprepared old-whole (no MIG there).
    kind = "mig" if rolled_back.gates_on else "whole"
    assert_prepares(rolled_back, f"back-{kind}", kind)
    assert_unprepares(rolled_back, "new-timeslice")  # prepared by the upgraded plugin


def test_nothing_is_left_once_every_pod_is_gone(rolled_back: Upgrade):
    delete_namespace(rolled_back.api, NAMESPACE_WORK)
    wait(
        "nothing of the claims left on the node",
        lambda: not invariants.leaks(rolled_back.c, NAMESPACE_WORK),
        120,
    )
