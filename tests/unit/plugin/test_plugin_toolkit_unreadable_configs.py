"""The toolkit check when a config cannot be read (driver/plugin/toolkit.py): the plugin reports the file as
"unreadable" with why, instead of failing its start or taking the toolkit's defaults silently, and still
checks the other config; a config of exactly the size bound is read, one byte more is not."""

from __future__ import annotations

from driver.plugin.toolkit import ENVVAR_UNPRIVILEGED, MAX_CONFIG_BYTES, toolkit_findings

PACKAGE = "etc/nvidia-container-runtime/config.toml"
OPERATOR = "usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"


def test_a_config_path_that_cannot_be_read_is_reported_and_the_next_one_still_checked(tmp_path):
    (tmp_path / PACKAGE).mkdir(parents=True)  # a directory where the file belongs: EISDIR
    (tmp_path / OPERATOR).parent.mkdir(parents=True)
    (tmp_path / OPERATOR).write_text(f"{ENVVAR_UNPRIVILEGED} = true\n")
    found = [(f.setting, f.path, f.detail) for f in toolkit_findings(tmp_path)]
    assert found == [
        ("unreadable", f"/{PACKAGE}", "cannot read: Is a directory"),
        (ENVVAR_UNPRIVILEGED, f"/{OPERATOR}", found[1][2]),
    ]


def test_a_config_at_the_size_bound_is_read_and_one_byte_more_is_not(tmp_path):
    (tmp_path / PACKAGE).parent.mkdir(parents=True)
    body = f"{ENVVAR_UNPRIVILEGED} = false\n"
    (tmp_path / PACKAGE).write_text(body + "#" * (MAX_CONFIG_BYTES - len(body)))
    assert toolkit_findings(tmp_path) == []
    (tmp_path / PACKAGE).write_text(body + "#" * (MAX_CONFIG_BYTES - len(body) + 1))
    ((setting, path, detail),) = [(f.setting, f.path, f.detail) for f in toolkit_findings(tmp_path)]
    assert (setting, path, detail) == ("unreadable", f"/{PACKAGE}", f"larger than {MAX_CONFIG_BYTES} bytes")
