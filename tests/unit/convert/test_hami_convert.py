"""HAMi manifests to DRA (driver/convert/hami.py): units as HAMi means them, counts, percentages, cores,
priority, selectors, several containers and init containers, every workload kind, refusals naming the object
and field; each converted template is valid (Kubernetes schema, `carve allocate`'s checks) and carve's own
allocator gives it what HAMi would have (memory, cores, distinct GPUs)."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.partitioning import node_slices

from driver import names
from driver.allocator.allocator import allocate
from driver.allocator.command import as_claim, check_request_fields
from driver.allocator.model import read_claim
from driver.cli import main
from driver.convert.hami import (
    ConvertError,
    GpuModel,
    Options,
    content_name,
    convert_object,
    models_from_slices,
)
from driver.simulate.cluster import device_classes

GPU, MEM, PCT, CORES, PRIO = (
    names.LEGACY_GPU,
    names.LEGACY_GPUMEM,
    names.LEGACY_GPUMEM_PERCENTAGE,
    names.LEGACY_GPUCORES,
    names.LEGACY_PRIORITY,
)
MI, GI = 1 << 20, 1 << 30
SLICES = node_slices("n1", "2xA100-80GB,1xT4", "soft")
MODELS = models_from_slices(SLICES)


def container(name: str = "main", **limits) -> dict:
    return {"name": name, "image": "busybox", "resources": {"limits": {**limits}}}


def pod(*containers: dict, annotations: dict | None = None, init: list | None = None) -> dict:
    meta: dict = {"name": "infer", "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    spec: dict = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def deployment(*containers: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": list(containers)}}
        },
    }


def check_valid(template: dict) -> dict:
    kubernetes_validate.validate(template, "1.36.0", strict=True)
    claim = as_claim(template)
    claim["metadata"].setdefault("namespace", "team-a")
    claim["metadata"].setdefault("uid", "uid-1")
    check_request_fields(claim)
    read_claim(claim)
    return claim


def allocated(template: dict, slices=SLICES) -> list[dict]:
    return allocate(check_valid(template), slices, device_classes())["devices"]["results"]


def test_gpumem_is_mib_and_gpucores_percent():
    done = convert_object(pod(container(**{GPU: 1, MEM: 4096, CORES: 30})))
    (t,) = done.templates
    exactly = t["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {
        "deviceClassName": names.CLASS_VGPU,
        "capacity": {"requests": {"memory": "4096Mi", "cores": "30"}},
    }
    (r,) = allocated(t)
    assert r["consumedCapacity"]["memory"] in ("4Gi", "4096Mi")
    assert r["consumedCapacity"]["cores"] == "30"


def test_the_container_loses_hami_resources_and_gains_the_claim():
    done = convert_object(pod(container(**{GPU: 1, MEM: 1024, "cpu": "1"})))
    spec = done.obj["spec"]
    (c,) = spec["containers"]
    assert c["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "main-gpu"}]}
    assert spec["resourceClaims"] == [{"name": "main-gpu", "resourceClaimTemplateName": "infer-main-gpu"}]
    assert done.templates[0]["metadata"] == {
        "name": "infer-main-gpu",
        "namespace": "team-a",
        "labels": {names.CONVERTED_LABEL: "hami"},
    }
    kubernetes_validate.validate(done.obj, "1.36.0", strict=True)


def test_gpu_alone_is_whole_gpus():
    (t,) = convert_object(pod(container(**{GPU: 2}))).templates
    assert t["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": names.CLASS_GPU,
        "count": 2,
    }
    whole = node_slices("n1", "2xA100-80GB", "exclusive")
    assert sorted(r["device"] for r in allocated(t, whole)) == ["gpu-0", "gpu-1"]


def test_a_count_above_one_is_that_many_shares_on_distinct_gpus():
    (t,) = convert_object(pod(container(**{GPU: 2, MEM: 2048}))).templates
    devices = t["spec"]["spec"]["devices"]
    assert devices["requests"][0]["exactly"]["count"] == 2
    assert devices["constraints"] == [{"requests": ["gpu"], "distinctAttribute": "gpu.carve.dev/uuid"}]
    results = allocated(t)
    assert len({r["device"] for r in results}) == 2


def test_a_percentage_becomes_one_alternative_per_gpu_model():
    (t,) = convert_object(pod(container(**{GPU: 1, PCT: 50})), Options(models=MODELS)).templates
    subs = t["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    by_model = {m.product: m.memory for m in MODELS}
    assert len(subs) == len(by_model) == 2
    for sub in subs:
        product = sub["selectors"][0]["cel"]["expression"].split(" == ")[1].strip('"')
        want = by_model[product] // 2 // (256 * MI) * (256 * MI)
        assert sub["capacity"]["requests"]["memory"] == f"{want // MI}Mi"
    (r,) = allocated(t)
    assert r["request"].startswith("gpu/")


def test_a_share_without_memory_takes_all_of_each_models_memory():
    """HAMi gives a share with gpucores but no gpumem the whole memory of its GPU."""
    (t,) = convert_object(pod(container(**{GPU: 1, CORES: 50})), Options(models=MODELS)).templates
    subs = t["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert {s["capacity"]["requests"]["cores"] for s in subs} == {"50"}
    for s in subs:
        (model,) = [m for m in MODELS if f'"{m.product}"' in s["selectors"][0]["cel"]["expression"]]
        assert s["capacity"]["requests"]["memory"] == f"{model.memory // (256 * MI) * 256}Mi"
    assert allocated(t)


def test_low_priority_becomes_the_share_config_and_is_what_the_plugin_parses():
    from api.v1alpha1.config import parse_config

    (t,) = convert_object(pod(container(**{GPU: 1, MEM: 1024, PRIO: 1}))).templates
    (config,) = t["spec"]["spec"]["devices"]["config"]
    assert parse_config(config["opaque"]["parameters"]).priority == "low"
    (t,) = convert_object(pod(container(**{GPU: 1, MEM: 1024, PRIO: 0}))).templates
    assert "config" not in t["spec"]["spec"]["devices"]


def test_hami_annotations_become_selectors_the_allocator_honours():
    ann = {names.HAMI_USE_GPUTYPE: "t4", names.HAMI_NOUSE_GPUUUID: "GPU-none"}
    (t,) = convert_object(pod(container(**{GPU: 1, MEM: 1024}), annotations=ann)).templates
    (r,) = allocated(t)
    assert r["device"] == "gpu-2"  # the T4, matched case-insensitively as HAMi does


def test_several_containers_and_init_containers_each_get_a_claim():
    p = pod(
        container("a", **{GPU: 1, MEM: 1024}),
        container("plain"),
        container("b", **{GPU: 1, MEM: 2048, CORES: 10}),
        init=[container("setup", **{GPU: 1, MEM: 512})],
    )
    done = convert_object(p)
    assert [t["metadata"]["name"] for t in done.templates] == [
        "infer-setup-gpu",
        "infer-a-gpu",
        "infer-b-gpu",
    ]
    spec = done.obj["spec"]
    assert [rc["name"] for rc in spec["resourceClaims"]] == ["setup-gpu", "a-gpu", "b-gpu"]
    assert spec["initContainers"][0]["resources"]["claims"] == [{"name": "setup-gpu"}]
    assert "claims" not in spec["containers"][1]["resources"]
    kubernetes_validate.validate(done.obj, "1.36.0", strict=True)


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Deployment", ("spec", "template", "spec")),
        ("StatefulSet", ("spec", "template", "spec")),
        ("DaemonSet", ("spec", "template", "spec")),
        ("Job", ("spec", "template", "spec")),
        ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
    ],
)
def test_workload_kinds_are_converted_in_their_pod_template(kind, path):
    inner = {"containers": [container(**{GPU: 1, MEM: 1024})]}
    obj: dict = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}}
    cur = obj
    for p in path[:-1]:
        cur = cur.setdefault(p, {})
    cur[path[-1]] = inner
    done = convert_object(obj)
    spec = done.obj
    for p in path:
        spec = spec[p]
    assert spec["resourceClaims"] == [{"name": "main-gpu", "resourceClaimTemplateName": "w-main-gpu"}]
    assert obj["spec"] != done.obj["spec"]  # the input is left alone


def test_other_kinds_and_pods_without_hami_pass_unchanged():
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    assert convert_object(svc).obj == svc and not convert_object(svc).changed
    plain = pod(container(cpu="1"))
    assert convert_object(plain).obj == plain and not convert_object(plain).templates


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {GPU: 1, MEM: "4x"},
            "Deployment web: spec.template.spec.containers[1]: container b: nvidia.com/gpumem: '4x' is not a "
            "quantity",
        ),
        (
            {GPU: 1, CORES: 150},
            "spec.template.spec.containers[1]: container b: nvidia.com/gpucores: 150 is over 100",
        ),
        ({GPU: "1.5"}, "containers[1]: container b: nvidia.com/gpu: '1.5' must be a whole number"),
        (
            {GPU: 1, PCT: 50},
            "Deployment web: spec.template.spec.containers[1].resources.limits.nvidia.com/gpumem-percentage: "
            "asks 50% of each GPU's memory; DRA requests absolute amounts and no GPU model is known",
        ),
    ],
)
def test_bad_or_ambiguous_specs_are_refused_naming_object_and_field(limits, message):
    with pytest.raises(ConvertError) as e:
        convert_object(deployment(container("a", **{GPU: 1, MEM: 1}), container("b", **limits)))
    assert message in str(e.value)


def test_a_percentage_too_small_for_a_step_is_refused():
    with pytest.raises(ConvertError, match=r"1% of Tesla T4's \d+Mi is under the 256Mi step"):
        convert_object(pod(container(**{GPU: 1, PCT: 1})), Options(models=MODELS))


def test_a_claim_name_in_use_is_refused():
    p = pod(container(**{GPU: 1, MEM: 1024}))
    p["spec"]["resourceClaims"] = [{"name": "main-gpu", "resourceClaimName": "mine"}]
    with pytest.raises(ConvertError, match="a claim named 'main-gpu' exists already"):
        convert_object(p)


def test_hami_scheduler_name_is_dropped():
    p = pod(container(**{GPU: 1, MEM: 1024}))
    p["spec"]["schedulerName"] = "hami-scheduler"
    assert "schedulerName" not in convert_object(p).obj["spec"]


def test_content_names_are_stable_and_differ_by_ask():
    a = convert_object(pod(container(**{GPU: 1, MEM: 1024}))).templates[0]["spec"]["spec"]
    b = convert_object(pod(container(**{GPU: 1, MEM: 2048}))).templates[0]["spec"]["spec"]
    assert content_name(a) == content_name(copy.deepcopy(a)) != content_name(b)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=3),
    mib=st.integers(min_value=1, max_value=70000),
    cores=st.one_of(st.none(), st.integers(min_value=0, max_value=100)),
)
def test_any_valid_share_converts_to_a_valid_claim_of_the_same_size(count, mib, cores):
    limits = {GPU: count, MEM: mib}
    if cores is not None:
        limits[CORES] = cores
    (t,) = convert_object(pod(container(**limits))).templates
    claim = check_valid(t)
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"]["requests"]["memory"] == f"{mib}Mi"
    assert exactly.get("count", 1) == count
    assert exactly["capacity"]["requests"].get("cores") == (str(cores) if cores else None)


def test_models_come_from_soft_and_mps_devices_only():
    mixed = node_slices("n2", "1xA100-80GB,1xT4", {0: "exclusive", 1: "soft"})
    assert [m.product for m in models_from_slices(mixed)] == ["Tesla T4"]
    assert all(isinstance(m, GpuModel) and m.memory >= 10 * GI for m in MODELS)


def test_carve_convert_reads_multi_document_yaml_and_prints_templates_first(tmp_path, capsys):
    src = tmp_path / "app.yaml"
    src.write_text(yaml.safe_dump_all([deployment(container(**{GPU: 1, MEM: 4096})), {"kind": "Service"}]))
    assert main(["convert", str(src)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ResourceClaimTemplate", "Deployment", "Service"]


def test_carve_convert_takes_gpu_models_from_slices(tmp_path, capsys):
    src = tmp_path / "p.yaml"
    src.write_text(yaml.safe_dump(pod(container(**{GPU: 1, PCT: 25}))))
    slices = tmp_path / "slices.yaml"
    slices.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": SLICES}))
    assert main(["convert", str(src), "--slices", str(slices)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert len(docs[0]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]) == 2


def test_carve_convert_refusal_is_one_line_naming_file_document_and_field(tmp_path, capsys):
    src = tmp_path / "app.yaml"
    src.write_text(yaml.safe_dump_all([{"kind": "Service"}, deployment(container(**{GPU: 1, MEM: "x"}))]))
    assert main(["convert", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"carve convert: {src} document 2: Deployment web: spec.template.spec.containers[0]"
    )
    assert "nvidia.com/gpumem: 'x' is not a quantity" in err and "\n" not in err
