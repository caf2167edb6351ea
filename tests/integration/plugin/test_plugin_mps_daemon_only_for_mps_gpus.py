"""A node whose GPUs are published under several strategies runs an MPS control daemon for its mps GPU only
(driver/plugin/server.py, `_mps_gpus`): a daemon is a root process on the GPU, and a soft-sliced or
exclusive GPU given one would have its contexts funnelled through a server no claim of it asked for. The
plugin's /status lists the daemons it runs, by GPU name."""

from __future__ import annotations

import json
import urllib.request

from driver import names


def _status(plugin) -> dict:
    port = plugin.wait_for_log(r"healthz=127\.0\.0\.1:(\d+)").group(1)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
        return json.loads(r.read())


def test_only_the_mps_gpu_gets_a_control_daemon(plugin_factory) -> None:
    # The rules text comes from argv, as the DaemonSet passes it: gpu-0 soft, gpu-2 mps, gpu-1 exclusive.
    plugin = plugin_factory("0=soft,2=mps,exclusive", extra=("--healthz-addr", "127.0.0.1:0"))
    status = _status(plugin)
    by_index = {g["index"]: g for g in status["gpus"]}
    assert {i: g["strategy"] for i, g in by_index.items()} == {
        0: names.STRATEGY_SOFT,
        1: names.STRATEGY_EXCLUSIVE,
        2: names.STRATEGY_MPS,
    }
    # The daemons were started before the servers, so /status already holds them.
    assert sorted(status["mps"]) == ["gpu-2"], status["mps"]
    assert status["mps"]["gpu-2"]["uuid"] == by_index[2]["uuid"]
