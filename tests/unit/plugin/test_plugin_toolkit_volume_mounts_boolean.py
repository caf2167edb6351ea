"""The toolkit honours volume-mount requests only when its config sets the key to the boolean true (a TOML
bool field: an integer there is no `true` to it), so only `true` is reported; a 1 or a 1.0 is not the
setting that lets a container mount its way to GPUs."""

from __future__ import annotations

from driver.plugin.toolkit import ENVVAR_UNPRIVILEGED, VOLUME_MOUNTS, toolkit_findings

PACKAGE = "etc/nvidia-container-runtime/config.toml"


def _findings(tmp_path, value: str) -> list[str]:
    (tmp_path / PACKAGE).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / PACKAGE).write_text(f"{ENVVAR_UNPRIVILEGED} = false\n{VOLUME_MOUNTS} = {value}\n")
    return [f.setting for f in toolkit_findings(tmp_path)]


def test_only_the_boolean_true_is_reported(tmp_path) -> None:
    assert _findings(tmp_path, "true") == [VOLUME_MOUNTS]
    assert _findings(tmp_path, "1") == []
    assert _findings(tmp_path, "1.0") == []
