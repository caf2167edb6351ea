"""A real Prometheus (Debian's `prometheus` package) beside the local cluster: scrapes the plugins' and the
controller's metrics endpoints on 127.0.0.1 every second and evaluates the chart's alert rules, so the
e2e can run the dashboard's queries and the alerts' expressions on what carve really exports
(e2e/test_monitoring.py).

It runs as a host process of the cluster's Supervisor (own process group, stopped by pid), with a config
and a TSDB directory of its own under the cluster's root, listening on a free port of 127.0.0.1. The binary
is required: `make test` installs it (hack/test_deps.sh); without it the e2e fails and says so.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.procs import Proc, StartError, Supervisor, free_port

SCRAPE_INTERVAL = "1s"  # a rate() over the dashboard's windows needs two samples: seconds, not minutes


def binary() -> str:
    found = shutil.which("prometheus")
    if not found:
        raise StartError(
            "prometheus is missing: `make test-deps` (hack/test_deps.sh, run by `make test`) installs "
            "Debian's `prometheus` package (apt-get install prometheus)"
        )
    return found


@dataclass(frozen=True)
class Target:
    job: str  # e.g. carve-plugin
    address: str  # host:port of its /metrics
    labels: dict[str, str] = field(default_factory=dict)  # e.g. {"node": "e2e-n1"}


def config(targets: list[Target], rule_files: list[Path]) -> dict[str, Any]:
    jobs: dict[str, list[Target]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append(t)
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "scrape_timeout": SCRAPE_INTERVAL,
                # carve's own `pod`/`pod_namespace` labels name the claim's consumer: keep them as exported
                # (docs/metrics.md: scrape the plugins with honor_labels).
                "honor_labels": True,
                "static_configs": [{"targets": [t.address], "labels": t.labels} for t in members],
            }
            for job, members in sorted(jobs.items())
        ],
    }


@dataclass
class Prometheus:
    root: Path
    sup: Supervisor
    port: int = 0
    proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, targets: list[Target], rule_files: list[Path] = ()) -> Prometheus:
        prometheus = binary()
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "prometheus.yml"
        path.write_text(yaml.safe_dump(config(targets, list(rule_files))))
        self.port = free_port()
        self.proc = self.sup.start(
            "prometheus",
            [
                prometheus,
                f"--config.file={path}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
        )
        self.sup.wait(self.proc, "ready endpoint", lambda: self._get("/-/ready") is not None, timeout_s=60)
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()
            with contextlib.suppress(ValueError):
                self.sup.procs.remove(self.proc)

    def _get(self, path: str, timeout_s: float = 10.0) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as r:
                return r.read()
        except OSError:
            return None

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>: the `data` of a success, else an AssertionError with Prometheus's error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(f"{self.url}/api/v1/{path}{query}")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422: a query Prometheus refused, with its reason
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(
                f"Prometheus /api/v1/{path} {params}: {body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector or scalar; a scalar comes back as one sample)."""
        data = self.api("query", query=promql)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        if data["resultType"] == "matrix":
            return [{"metric": s["metric"], "value": s["values"][-1]} for s in data["result"] if s["values"]]
        return data["result"]
