"""When the region tmpfs cannot be mounted, the plugin's warning names the kernel's reason (mount(2)'s errno),
which is what an operator acts on (a missing directory, EPERM without CAP_SYS_ADMIN)."""

import errno
import logging
import os

from driver.plugin.container import regionfs


def test_a_failed_mount_is_reported_with_its_errno(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(regionfs, "_warned", [])
    with caplog.at_level(logging.WARNING, logger="driver.plugin.container.regionfs"):
        assert regionfs.cap(tmp_path / "gone" / "region", force=True) is False
    [warning] = [r for r in caplog.records if r.getMessage() == "regions.uncapped"]
    assert warning.fields["error"] == os.strerror(errno.ENOENT)
