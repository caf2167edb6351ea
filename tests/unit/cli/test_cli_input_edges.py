"""Input that used to end in a traceback (issue 29) is one line naming the file and the field, exit 2:
non-UTF-8 files, GPU counts too large to build, inf/nan times; a negative capacity request is refused."""

from __future__ import annotations

import pytest

from driver.cli import main

CLUSTER = "nodes:\n- name: a\n  gpus: 2xA100-80GB\n"


def run(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err.strip()


def test_a_non_utf8_file_is_named_with_the_byte(tmp_path, capsys) -> None:
    bad = tmp_path / "trace.yaml"
    bad.write_bytes(b"pods:\n- name: \xff\xfe\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    rc, err = run(capsys, "simulate", "--cluster", str(cluster), "--trace", str(bad))
    assert rc == 2 and err == "carve simulate: trace.yaml: not UTF-8 text: byte 0xff at offset 14"
    rc, err = run(capsys, "allocate", "--slices", str(bad), "--classes", str(bad), "--claims", str(bad))
    assert rc == 2 and err == f"carve allocate: {bad}: not UTF-8 text: byte 0xff at offset 14"


def test_a_non_utf8_kubeconfig_is_an_error_not_a_traceback(tmp_path, capsys) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_bytes(b"\xff\xfe\x00")
    rc, err = run(capsys, "status", "--kubeconfig", str(bad))
    assert rc == 2 and "not UTF-8 text" in err


@pytest.mark.parametrize("gpus", ["99999999999999999999xA100-80GB", "65xT4", "40xT4,40xL4"])
def test_a_huge_gpu_count_in_a_cluster_file_is_refused(tmp_path, capsys, gpus) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(f"nodes:\n- name: a\n  gpus: {gpus}\n")
    trace = tmp_path / "trace.yaml"
    trace.write_text("generate:\n  kind: inference\n  pods: 3\n")
    rc, err = run(capsys, "simulate", "--cluster", str(cluster), "--trace", str(trace))
    assert rc == 2 and "cluster.yaml: nodes[0].gpus: more than 64 GPUs on one node" in err


def test_a_huge_fake_gpu_count_is_refused(capsys) -> None:
    rc, err = run(capsys, "inspect", "--gpus", "fake:99999999999999999999xT4")
    assert rc == 2 and "more than 16 GPUs on one node" in err


@pytest.mark.parametrize(
    ("field", "value"),
    [("generate.interarrival_s", ".inf"), ("generate.interarrival_s", ".nan"),
     ("generate.interarrival_s", "1e300"), ("pods[0].arrival", ".inf"), ("pods[0].duration", ".nan")],
)
def test_inf_and_nan_times_are_refused(tmp_path, capsys, field, value) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    trace = tmp_path / "trace.yaml"
    if field.startswith("generate"):
        trace.write_text(f"generate:\n  kind: inference\n  pods: 3\n  interarrival_s: {value}\n")
    else:
        pod = {"arrival": "0", "duration": "60", field.split(".")[1]: value}
        trace.write_text(
            "pods:\n- name: p\n"
            f"  arrival: {pod['arrival']}\n  duration: {pod['duration']}\n"
            "  claims: [{deviceClassName: gpu.carve.dev}]\n"
        )
    rc, err = run(capsys, "simulate", "--cluster", str(cluster), "--trace", str(trace))
    assert rc == 2 and err.startswith(f"carve simulate: trace.yaml: {field}: "), err
