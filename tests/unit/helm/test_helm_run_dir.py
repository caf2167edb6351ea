"""The plugin's run directory (--run-dir, per-boot claim files) in the chart: its own hostPath, mounted at
the same path with the propagation the claims' region tmpfs mounts need, reaching the plugin as
CARVE_RUN_DIR; a value that overlaps the plugin directory is refused."""

from __future__ import annotations

import argparse

import pytest
from helm_render import RenderError, env_of, one, plugin_container, render

from driver import cli, names
from driver.plugin import command as plugin_command


def _run_volume(objects):
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"]}
    mounts = {m["name"]: m for m in plugin_container(objects)["volumeMounts"]}
    return volumes["run"], mounts["run"], mounts["plugins"]


def test_run_dir_defaults_to_the_plugins_default_on_its_own_host_path():
    objects = render()
    volume, mount, plugins = _run_volume(objects)
    assert volume == {"path": names.DEFAULT_RUN_DIR, "type": "DirectoryOrCreate"}
    assert mount["mountPath"] == volume["path"]
    # The region tmpfs the plugin mounts in each claim's directory must reach the runtime on the host; the
    # plugin directory keeps it for the claims an older release prepared there.
    assert mount["mountPropagation"] == "Bidirectional" == plugins["mountPropagation"]
    assert env_of(plugin_container(objects))["CARVE_RUN_DIR"] == volume["path"]


def test_run_dir_value_reaches_the_plugin_as_its_flag(monkeypatch):
    env = env_of(plugin_container(render("--set", "plugin.runDir=/run/other/")))
    assert env["CARVE_RUN_DIR"] == "/run/other"
    monkeypatch.setenv("CARVE_RUN_DIR", env["CARVE_RUN_DIR"])
    args = cli.build_parser("plugin").parse_args(["plugin"])
    assert args.run_dir == "/run/other"


def test_plugin_flag_default_is_the_names_constant():
    parser = argparse.ArgumentParser()
    plugin_command.add_arguments(parser)
    assert parser.parse_args([]).run_dir == names.DEFAULT_RUN_DIR == "/run/carve"


@pytest.mark.parametrize(
    "args",
    [
        ("--set", "plugin.runDir=/var/lib/kubelet/plugins/gpu.carve.dev"),
        ("--set", "plugin.runDir=/var/lib/kubelet/plugins/gpu.carve.dev/run"),
        ("--set", "plugin.pluginDir=/run/carve/state"),
    ],
)
def test_run_dir_overlapping_the_plugin_dir_is_refused(args):
    with pytest.raises(RenderError, match=r"plugin\.runDir .* must not contain one another"):
        render(*args)


def test_run_dir_must_be_absolute():
    with pytest.raises(RenderError, match="plugin/runDir"):
        render("--set", "plugin.runDir=run/carve")
