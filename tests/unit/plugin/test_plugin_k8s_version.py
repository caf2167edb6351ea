"""The plugin's Kubernetes version: asked of the API server (1.37 and 1.38 are known), or set by flag."""

from __future__ import annotations

import pytest

from driver.devices import ModelError
from driver.plugin.server import _k8s_version


class Server:
    def __init__(self, major: int, minor: int):
        self.version = (major, minor)  # ints, as Cluster.server_version returns them

    def server_version(self):
        return self.version


@pytest.mark.parametrize(
    ("minor", "expected"),
    [(34, "1.34"), (36, "1.36"), (37, "1.37"), (38, "1.38"), (39, "1.38"), (33, "1.34")],
)
def test_the_api_servers_minor_picks_the_limits(minor, expected):
    assert _k8s_version(Server(1, minor), "") == expected


def test_a_configured_version_wins_and_is_checked():
    assert _k8s_version(Server(1, 34), "1.37") == "1.37"
    with pytest.raises(ModelError, match=r"unsupported Kubernetes version '1\.33'; one of .*1\.37, 1\.38"):
        _k8s_version(Server(1, 37), "1.33")
