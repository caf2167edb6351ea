"""`carve plugin` with strategy rules on a mixed node (2x A100 + T4, fake NVML): a GPU that cannot run its
strategy gets --fallback-strategy with a log line and a StrategyFallback Node Event, never an exit; the
Node annotation gpu.carve.dev/strategy comes before --strategy."""

from __future__ import annotations

import json

from driver import names


def _events(node) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((node.cluster_dir / "events").glob("*.json"))]


def _types(node) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in node.devices():
        a = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
        out.setdefault(str(a["index"]), set()).add(a["type"])
    return out


def _annotate(node, value: str) -> None:
    path = node.cluster_dir / "nodes" / f"{node.node_name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"name": node.node_name, "resourceVersion": "1", "annotations": {names.ANNOTATION_STRATEGY: value}}
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": meta}))


def test_mig_for_every_gpu_puts_the_t4_on_its_fallback(node, plugin_factory):
    plugin = plugin_factory("mig")
    plugin.wait_for_log(r"event=strategy\.fallback gpu=gpu-2")
    assert _types(node) == {"0": {"gpu", "mig"}, "1": {"gpu", "mig"}, "2": {"vgpu"}}
    fallbacks = [e for e in _events(node) if e["reason"] == "StrategyFallback"]
    assert len(fallbacks) == 1
    event = fallbacks[0]
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node.node_name,
        "uid": node.node_name,
    }
    assert event["type"] == "Warning"
    assert "GPU 2 (Tesla T4" in event["message"] and "rule 'mig'" in event["message"]
    assert "runs soft" in event["message"]


def test_the_fallback_strategy_flag_is_used(node, plugin_factory):
    plugin_factory("*=mig", extra=("--fallback-strategy", "timeslice"))
    assert _types(node)["2"] == {"timeslice"}


def test_the_node_annotation_comes_before_the_flag(node, plugin_factory):
    _annotate(node, "2=exclusive,timeslice")
    plugin_factory("*A100*=mig,soft")
    assert _types(node) == {"0": {"timeslice"}, "1": {"timeslice"}, "2": {"gpu"}}


def test_a_malformed_annotation_is_ignored_with_an_event(node, plugin_factory):
    _annotate(node, "2=turbo")
    plugin = plugin_factory("soft")
    plugin.wait_for_log(r"event=strategy\.annotation-invalid")
    assert _types(node) == {"0": {"vgpu"}, "1": {"vgpu"}, "2": {"vgpu"}}
    [bad] = [e for e in _events(node) if e["reason"] == "StrategyAnnotationInvalid"]
    assert "'2=turbo': unknown strategy 'turbo'" in bad["message"]


def _label(node, labels: dict[str, str]) -> None:
    path = node.cluster_dir / "nodes" / f"{node.node_name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"name": node.node_name, "resourceVersion": "1", "labels": labels}
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": meta}))


def test_a_node_whose_mig_the_gpu_operator_manages_keeps_mig_off(node, plugin_factory):
    # Issue 29: the GPU Operator's MIG manager applies its own layout (label nvidia.com/mig.config) and
    # undid carve's MIG changes; carve now leaves MIG to it and runs the fallback, saying why.
    _label(node, {"nvidia.com/mig.config": "all-disabled"})
    plugin = plugin_factory("mig")
    plugin.wait_for_log(r"event=strategy\.fallback gpu=gpu-1")
    assert _types(node) == {"0": {"vgpu"}, "1": {"vgpu"}, "2": {"vgpu"}}
    messages = [e["message"] for e in _events(node) if e["reason"] == "StrategyFallback"]
    assert any("MIG manager" in m and "GPU 0" in m for m in messages), messages


def test_the_mig_managers_label_leaves_every_other_strategy_alone(node, plugin_factory):
    # Only MIG is the MIG manager's: GPUs given another strategy run it, without a fallback or its Event.
    _label(node, {"nvidia.com/mig.config": "all-disabled"})
    plugin = plugin_factory("0=mig,timeslice")
    plugin.wait_for_log(r"event=strategy\.fallback gpu=gpu-0")
    assert _types(node) == {"0": {"vgpu"}, "1": {"timeslice"}, "2": {"timeslice"}}
    fallbacks = [e["message"] for e in _events(node) if e["reason"] == "StrategyFallback"]
    assert len(fallbacks) == 1 and "GPU 0" in fallbacks[0], fallbacks


def test_toolkit_settings_that_hand_out_gpus_are_reported(node, plugin_factory, tmp_path):
    host = tmp_path / "host"
    config = host / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[nvidia-container-runtime]\nmode = "auto"\n')  # the toolkit's defaults apply
    plugin = plugin_factory("soft", extra=("--toolkit-root", str(host)))
    plugin.wait_for_log(r"event=toolkit\.unsafe setting=accept-nvidia-visible-devices-envvar-when")
    unsafe = [e for e in _events(node) if e["reason"] == "ContainerToolkitUnsafe"]
    assert len(unsafe) == 1 and "/etc/nvidia-container-runtime/config.toml" in unsafe[0]["message"]
