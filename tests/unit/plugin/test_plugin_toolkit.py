"""The toolkit check (driver/plugin/toolkit.py), pure: which NVIDIA container toolkit settings let a
container get GPUs past carve, and when the GPU Operator's MIG manager owns MIG on a node (issue 29)."""

from __future__ import annotations

from driver.plugin.toolkit import (
    ENVVAR_UNPRIVILEGED,
    MIG_CONFIG_LABEL,
    VOLUME_MOUNTS,
    check_config,
    mig_manager,
    toolkit_findings,
)

# The toolkit's shipped config.toml has both keys commented out: its defaults apply.
SHIPPED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false

[nvidia-container-cli]
ldconfig = "@/sbin/ldconfig.real"

[nvidia-container-runtime]
mode = "auto"
"""
HARDENED = f"{ENVVAR_UNPRIVILEGED} = false\n{VOLUME_MOUNTS} = false\n" + SHIPPED


def settings(text: str) -> set[str]:
    return {f.setting for f in check_config(text, "/etc/nvidia-container-runtime/config.toml")}


def test_the_shipped_defaults_honour_the_env_of_unprivileged_containers():
    assert settings(SHIPPED) == {ENVVAR_UNPRIVILEGED}


def test_the_hardened_recipe_has_no_finding():
    assert settings(HARDENED) == set()


def test_volume_mount_requests_are_a_finding():
    text = f"{ENVVAR_UNPRIVILEGED} = false\n{VOLUME_MOUNTS} = true\n"
    assert settings(text) == {VOLUME_MOUNTS}


def test_a_broken_config_is_reported_not_raised():
    assert settings("accept-nvidia = = true") == {"unreadable"}


def test_configs_are_read_where_a_package_and_the_gpu_operator_put_them(tmp_path):
    (tmp_path / "etc/nvidia-container-runtime").mkdir(parents=True)
    (tmp_path / "etc/nvidia-container-runtime/config.toml").write_text(HARDENED)
    operator = tmp_path / "usr/local/nvidia/toolkit/.config/nvidia-container-runtime"
    operator.mkdir(parents=True)
    (operator / "config.toml").write_text(SHIPPED)
    found = toolkit_findings(tmp_path)
    assert [(f.setting, f.path) for f in found] == [
        (ENVVAR_UNPRIVILEGED, "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml")
    ]
    assert toolkit_findings(tmp_path / "absent") == []


def test_an_oversized_config_is_not_read_whole(tmp_path):
    (tmp_path / "etc/nvidia-container-runtime").mkdir(parents=True)
    (tmp_path / "etc/nvidia-container-runtime/config.toml").write_bytes(b"#" * (2 << 20))
    assert [f.setting for f in toolkit_findings(tmp_path)] == ["unreadable"]


def test_the_mig_manager_label_means_carve_keeps_off_mig():
    assert mig_manager({}) == "" and mig_manager(None) == ""
    why = mig_manager({MIG_CONFIG_LABEL: "all-1g.10gb"})
    assert "MIG manager" in why and "nvidia.com/mig.config=all-1g.10gb" in why
