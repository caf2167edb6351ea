"""The chart renders, lints and validates, and its DaemonSet hands every plugin setting to `carve plugin`."""

from __future__ import annotations

import argparse
import json
import os

import kubernetes_validate
import pytest
from helm_render import (
    CHART,
    FAKE_VALUES,
    KUBE_VERSIONS,
    NAMESPACE,
    SCENARIOS,
    RenderError,
    env_of,
    one,
    plugin_container,
    render,
    run_helm,
)

from driver import cli
from driver.plugin import command as plugin_command
from driver.plugin.container.driverfiles import LIBRARY_SEARCH_DIRS

# Flags the chart leaves at the plugin's own default, and why.
NOT_FROM_CHART = {
    "--kubeconfig": "in a pod the in-cluster service account is the credential",
    "--cluster": "a deployed plugin always talks to the API server",
    "--boot-id-file": "the default (/proc/sys/kernel/random/boot_id) is right inside any pod",
}
# Flags rendered only when their value is set (empty means: let the plugin decide).
ONLY_WHEN_SET = {"--k8s-version": ("plugin.k8sVersion", "1.34")}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_helm_lint_strict_passes(scenario):
    done = run_helm("lint", "--strict", str(CHART), *SCENARIOS[scenario])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_object_is_valid_for_both_kubernetes_versions(scenario, kube_version):
    objects = render(*SCENARIOS[scenario], kube_version=kube_version)
    assert {o["kind"] for o in objects} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "DeviceClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Deployment",  # the strategy controller (test_helm_controller.py)
        "Role",
        "RoleBinding",
        "PartitioningPolicy",
        "Service",  # metrics (test_helm_operations.py)
        "PodDisruptionBudget",  # the controller's two replicas
    }
    for obj in objects:
        if obj["apiVersion"].startswith("carve.dev/"):
            continue  # not a Kubernetes kind: checked against its CRD in test_helm_controller.py
        for schema_version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, schema_version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(
                    f"{obj['kind']} {obj['metadata']['name']} invalid for {schema_version}: {e.message}"
                )


def test_chart_refuses_kubernetes_without_resource_v1():
    with pytest.raises(RenderError, match="kubeVersion"):
        render(kube_version="1.33.0")


def test_daemonset_env_has_the_twin_of_every_plugin_flag():
    parser = argparse.ArgumentParser()
    plugin_command.add_arguments(parser)
    flags = {
        o
        for a in parser._actions
        for o in a.option_strings if o.startswith("--") and not o.startswith("--no-") and o != "--help"
    }
    assert set(NOT_FROM_CHART) <= flags and set(ONLY_WHEN_SET) <= flags, "exemptions name flags that are gone"
    for scenario in SCENARIOS.values():
        extra = [a for _flag, (key, value) in ONLY_WHEN_SET.items() for a in ("--set", f"{key}={value}")]
        env = env_of(plugin_container(render(*scenario, *extra)))
        missing = [f for f in sorted(flags - set(NOT_FROM_CHART)) if cli.env_twin(f) not in env]
        assert not missing, f"flags without their env twin in the DaemonSet: {missing}"


# Every plugin value set to something other than its default -> what `carve plugin` must parse from env.
CUSTOM_VALUES = {
    "plugin.gpus": ("fake:1xH100-80GB", "gpus", "fake:1xH100-80GB"),
    "plugin.strategy": ("0=mig,soft", "strategy", "0=mig,soft"),
    "plugin.splitCount": (7, "split_count", 7),
    "plugin.softContextReserve": ("1Gi", "soft_context_reserve", "1Gi"),
    "plugin.publishInterval": (12.5, "publish_interval", 12.5),
    "plugin.regionInterval": (0.5, "region_interval", 0.5),
    "plugin.killUnenforced": (True, "kill_unenforced", True),
    "plugin.k8sVersion": ("1.35", "k8s_version", "1.35"),
    "plugin.pluginDir": (
        "/data/kubelet/plugins/gpu.carve.dev",
        "plugin_dir",
        "/data/kubelet/plugins/gpu.carve.dev",
    ),
    "plugin.registryDir": (
        "/data/kubelet/plugins_registry",
        "registry_dir",
        "/data/kubelet/plugins_registry",
    ),
    "plugin.cdiDir": ("/etc/cdi", "cdi_dir", "/etc/cdi"),
    "plugin.driverRoot": ("/run/nvidia/driver", "host_driver_root", "/run/nvidia/driver"),
    "plugin.limiterDir": ("/opt/carve/lib", "limiter_dir", "/opt/carve/lib"),
    "plugin.healthzPort": (9440, "healthz_addr", ":9440"),
    "plugin.metricsPort": (9100, "metrics_addr", ":9100"),
    "plugin.logLevel": ("debug", "log_level", "debug"),
    "plugin.health.enabled": (False, "health_monitor", False),
    "plugin.health.taintEffect": ("None", "health_taint_effect", "None"),
    "plugin.health.lostEffect": ("NoExecute", "health_lost_effect", "NoExecute"),
    "plugin.health.recoverySeconds": (60, "health_recovery_seconds", 60.0),
    "plugin.health.ignoreXids": ("74,92", "health_ignore_xids", "74,92"),
    "plugin.health.interval": (2.5, "health_interval", 2.5),
    "plugin.claimStatus": (False, "claim_status", False),
    "plugin.mpsShmDir": ("/run/shm-of-mps", "mps_shm_dir", "/run/shm-of-mps"),
    "plugin.regionFs": ("on", "region_fs", "on"),
    "plugin.placement": ("spread", "placement", "spread"),
}


def test_each_plugin_value_reaches_the_plugin_through_its_env_twin(monkeypatch):
    sets = [
        a for key, (raw, _, _) in CUSTOM_VALUES.items() for a in ("--set-json", f"{key}={json.dumps(raw)}")
    ]
    container = plugin_container(render(*sets))
    env = env_of(container)
    assert env["CARVE_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    for name in [n for n in os.environ if n.startswith("CARVE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("CARVE_") and isinstance(value, str):
            monkeypatch.setenv(name, value)
    # The same parser `carve plugin` builds, env twins applied: what the pod would run with.
    args = cli.build_parser("plugin").parse_args(["plugin"])
    for key, (_raw, dest, want) in CUSTOM_VALUES.items():
        assert getattr(args, dest) == want, f"{key}: the plugin would get {getattr(args, dest)!r}"


def test_defaults_match_the_plugin_defaults_where_the_chart_does_not_decide(monkeypatch):
    env = env_of(plugin_container(render()))
    parser = argparse.ArgumentParser()
    plugin_command.add_arguments(parser)
    defaults = vars(parser.parse_args([]))
    for name in (
        "gpus",
        "strategy",
        "split_count",
        "soft_context_reserve",
        "publish_interval",
        "placement",
        "plugin_dir",
        "registry_dir",
        "cdi_dir",
        "log_level",
    ):
        assert env[cli.env_twin("--" + name.replace("_", "-"))] == str(defaults[name]).removesuffix(".0"), (
            name
        )
    assert env["CARVE_LIMITER_DIR"] == defaults["plugin_dir"] + "/lib"  # the plugin's documented default


def test_host_driver_is_read_under_host_and_written_as_host_paths():
    # The host's /usr is mounted at /host/usr: the plugin scans /host, the CDI specs name the host's paths.
    env = env_of(plugin_container(render()))
    assert (env["CARVE_DRIVER_ROOT"], env["CARVE_HOST_DRIVER_ROOT"]) == ("/host", "/")
    env = env_of(plugin_container(render("--set", "plugin.driverRoot=/run/nvidia/driver")))
    assert (env["CARVE_DRIVER_ROOT"], env["CARVE_HOST_DRIVER_ROOT"]) == ("/run/nvidia/driver",) * 2


def test_pod_runs_privileged_in_the_host_pid_namespace_with_health_probes():
    ds = one(render(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = plugin_container([ds])
    assert pod["hostPID"] is True
    assert pod["priorityClassName"] == "system-node-critical"
    assert container["securityContext"]["privileged"] is True
    port = next(p for p in container["ports"] if p["name"] == "healthz")["containerPort"]
    assert env_of(container)["CARVE_HEALTHZ_ADDR"] == f":{port}"
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    # Fixed socket names: never two plugin pods on one node.
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_on_delete_update_strategy_carries_no_rolling_update_settings():
    ds = one(render("--set", "plugin.updateStrategy.type=OnDelete"), "DaemonSet")
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    kubernetes_validate.validate(ds, "1.34.0", strict=True)


def test_health_port_zero_turns_the_endpoint_and_probes_off():
    container = plugin_container(render("--set", "plugin.healthzPort=0"))
    assert "CARVE_HEALTHZ_ADDR" not in env_of(container)
    assert not {"startupProbe", "livenessProbe"} & set(container)
    assert [p["name"] for p in container["ports"]] == ["metrics"]


def test_metrics_port_is_exposed_and_zero_turns_it_off():
    container = plugin_container(render("--set", "plugin.metricsPort=9100"))
    assert env_of(container)["CARVE_METRICS_ADDR"] == ":9100"
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    container = plugin_container(render("--set", "plugin.metricsPort=0", "--set", "plugin.healthzPort=0"))
    assert "CARVE_METRICS_ADDR" not in env_of(container) and "ports" not in container


def _mounts(objects):
    ds = one(objects, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"]}
    mounts = {m["name"]: m for m in plugin_container(objects)["volumeMounts"]}
    return pod, volumes, mounts


def _pod_containers(objects):
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


def test_host_paths_are_mounted_at_the_same_path_in_the_container():
    _pod, volumes, mounts = _mounts(render())
    assert (
        volumes["registry"]["path"] == mounts["registry"]["mountPath"] == "/var/lib/kubelet/plugins_registry"
    )
    # Only the driver's own directory of the kubelet's plugins dir: other drivers' sockets stay out of reach.
    assert (
        volumes["plugins"]["path"]
        == mounts["plugins"]["mountPath"]
        == "/var/lib/kubelet/plugins/gpu.carve.dev"
    )
    assert volumes["plugins"]["type"] == "DirectoryOrCreate"
    # The regions' tmpfs mounts the plugin makes there must reach the runtime on the host.
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    all_mounts = [m["mountPath"] for c in _pod_containers(render()) for m in c.get("volumeMounts", [])]
    assert "/var/lib/kubelet/plugins" not in all_mounts
    assert volumes["cdi"]["path"] == mounts["cdi"]["mountPath"] == "/var/run/cdi"
    # A driver on the host: its /usr is looked at only to find NVML.
    assert volumes["driver-root"]["path"] == "/usr" and mounts["driver-root"]["mountPath"] == "/host/usr"
    assert mounts["driver-root"]["readOnly"] is True


def test_gpu_operator_driver_root_is_mounted_at_its_own_path_and_awaited():
    objects = render("--set", "plugin.driverRoot=/run/nvidia/driver")
    pod, volumes, mounts = _mounts(objects)
    assert volumes["driver-root"] == {"path": "/run/nvidia/driver", "type": "DirectoryOrCreate"}
    assert mounts["driver-root"]["mountPath"] == "/run/nvidia/driver"
    assert mounts["driver-root"]["mountPropagation"] == "HostToContainer"
    wait = next(c for c in pod["initContainers"] if c["name"] == "wait-for-driver")
    assert env_of(wait)["ROOT"] == "/run/nvidia/driver"
    script = wait["command"][-1]
    # the plugin's own search list, so a driver it would use is never missed
    for d in filter(None, LIBRARY_SEARCH_DIRS):
        assert f" {d} " in script or f" {d};" in script, d


def test_fake_gpus_mount_no_driver_and_run_the_plugin_directly():
    objects = render("-f", str(FAKE_VALUES))
    pod, volumes, mounts = _mounts(objects)
    assert "driver-root" not in volumes and "driver-root" not in mounts
    assert [c["name"] for c in pod["initContainers"]] == ["install-limiter", "mps-shm"]  # no driver wait
    container = plugin_container(objects)
    assert container["command"] == ["carve", "plugin"]
    assert env_of(container)["CARVE_GPUS"] == "fake:2xA100-80GB,1xT4"


def test_fake_gpus_with_an_emulated_driver_root_mount_it_read_only_at_its_own_path():
    objects = render("-f", str(FAKE_VALUES), "--set", "plugin.driverRoot=/srv/fake-driver")
    pod, volumes, mounts = _mounts(objects)
    assert volumes["driver-root"] == {"path": "/srv/fake-driver", "type": "Directory"}
    assert mounts["driver-root"]["mountPath"] == "/srv/fake-driver" and mounts["driver-root"]["readOnly"]
    env = env_of(plugin_container(objects))
    assert env["CARVE_DRIVER_ROOT"] == env["CARVE_HOST_DRIVER_ROOT"] == "/srv/fake-driver"
    # Still no wait for a real driver's NVML.
    assert [c["name"] for c in pod["initContainers"]] == ["install-limiter", "mps-shm"]  # no driver wait


def test_limiter_is_copied_from_the_image_into_the_limiter_dir():
    pod, _volumes, _ = _mounts(render())
    init = next(c for c in pod["initContainers"] if c["name"] == "install-limiter")
    assert env_of(init)["LIMITER_DIR"] == "/var/lib/kubelet/plugins/gpu.carve.dev/lib"
    assert "/usr/local/carve/lib/libcarve-limiter.so" in init["command"][-1]
    assert [m["mountPath"] for m in init["volumeMounts"]] == ["/var/lib/kubelet/plugins/gpu.carve.dev"]


def test_limiter_dir_outside_the_plugins_dir_gets_its_own_volume():
    objects = render("--set", "plugin.limiterDir=/opt/carve/lib")
    pod, volumes, mounts = _mounts(objects)
    assert volumes["limiter"] == {"path": "/opt/carve/lib", "type": "DirectoryOrCreate"}
    assert mounts["limiter"]["mountPath"] == "/opt/carve/lib"
    init = next(c for c in pod["initContainers"] if c["name"] == "install-limiter")
    assert [m["name"] for m in init["volumeMounts"]] == ["limiter"]


def test_mps_daemons_shm_dir_is_the_plugins_dev_shm_and_named_to_the_plugin():
    # The daemons are the plugin's children: their /dev/shm is the host directory that mps clients get at
    # theirs (the plugin's prepare mounts it there), so both name the same host path.
    pod, volumes, mounts = _mounts(render())
    assert volumes["mps-shm"] == {"path": "/run/carve/mps-shm", "type": "DirectoryOrCreate"}
    init = next(c for c in pod["initContainers"] if c["name"] == "mps-shm")  # clients of any uid write there
    assert init["command"] == ["chmod", "1777", "/dev/shm"]
    assert [(m["name"], m["mountPath"]) for m in init["volumeMounts"]] == [("mps-shm", "/dev/shm")]
    assert mounts["mps-shm"]["mountPath"] == "/dev/shm" and not mounts["mps-shm"].get("readOnly")
    assert env_of(plugin_container(render()))["CARVE_MPS_SHM_DIR"] == "/run/carve/mps-shm"
    objects = render("--set", "plugin.mpsShmDir=")
    pod, volumes, mounts = _mounts(objects)
    assert "mps-shm" not in volumes and "mps-shm" not in mounts
    assert "mps-shm" not in [c["name"] for c in pod["initContainers"]]
    assert env_of(plugin_container(objects))["CARVE_MPS_SHM_DIR"] == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (("--set", "plugin.mpsShmDir=/"), "plugin/mpsShmDir"),
        (("--set", "plugin.mpsShmDir=run/shm"), "plugin/mpsShmDir"),
        (("--set", "plugin.gpu=nvml"), "additional properties 'gpu'"),
        (("--set", "plugin.strategy=0=mig=soft"), "plugin/strategy"),
        (("--set", "plugin.gpus=cuda"), "plugin/gpus"),
        (("--set", "plugin.updateStrategy.rollingUpdate.maxSurge=1"), "maxSurge"),
        (("--set", "plugin.driverRoot=run/nvidia"), "plugin/driverRoot"),
        (("--set", "driverName=gpu.example.com"), "no flag to change that"),
        (("--set", "namespace=x"), "additional properties 'namespace'"),
    ],
)
def test_bad_values_are_refused_with_the_value_named(args, message):
    with pytest.raises(RenderError, match=message):
        render(*args)


def test_release_namespace_is_used_for_namespaced_objects():
    for obj in render():
        if obj["kind"] in ("ServiceAccount", "DaemonSet"):
            assert obj["metadata"]["namespace"] == NAMESPACE
