"""The pure parts of the e2e's Kueue setup (e2e/cluster/kueue.py): which webhooks it registers and how,
its Configuration, and the pinned version."""

from __future__ import annotations

import re

import yaml

from e2e.cluster import kueue

MANIFESTS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  failurePolicy: Fail
  name: mjob.kb.io
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  name: mpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue}
  name: vclusterqueue.kb.io
  rules:
  - {apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [clusterqueues]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-apps-v1-deployment}}
  name: vdeployment.kb.io
  rules: [{apiGroups: [apps, batch], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  sideEffects: None
"""


def test_only_job_and_kueue_webhooks_are_registered_by_url_with_the_clusters_ca():
    mutating, validating = kueue.webhooks(MANIFESTS, "https://127.0.0.1:9443", "Q0E=")
    assert mutating["metadata"] == {"name": kueue.WEBHOOK_CONFIGS[0]}
    assert validating["metadata"] == {"name": kueue.WEBHOOK_CONFIGS[1]}
    # The pod webhook (core group "") and one that also covers apps are left out.
    assert [h["name"] for h in mutating["webhooks"]] == ["mjob.kb.io"]
    assert [h["name"] for h in validating["webhooks"]] == ["vclusterqueue.kb.io"]
    hook = mutating["webhooks"][0]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-batch-v1-job", "caBundle": "Q0E="}
    assert hook["failurePolicy"] == "Fail" and hook["rules"][0]["resources"] == ["jobs"]


def test_configuration_maps_carves_classes_and_runs_without_cluster_services(tmp_path):
    cfg = kueue.configuration(9443, tmp_path, 8081, 8080, {"carve.dev/gpu": ["gpu.carve.dev"]})
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and cfg["kind"] == "Configuration"
    assert cfg["resources"]["deviceClassMappings"] == [
        {"name": "carve.dev/gpu", "deviceClassNames": ["gpu.carve.dev"]}
    ]
    assert cfg["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["integrations"] == {"frameworks": ["batch/job"]}
    yaml.safe_dump(cfg)  # what the manager reads


def test_the_version_is_the_one_go_mod_requires():
    assert re.fullmatch(r"v\d+\.\d+\.\d+", kueue.version())
    assert kueue.binary().parts[-3:] == ("kueue", kueue.version(), "kueue")
    assert f"sigs.k8s.io/kueue {kueue.version()}" in kueue.GO_MOD.read_text()
