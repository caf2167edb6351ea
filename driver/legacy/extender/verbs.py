"""The extender's three verbs (filter, prioritize, bind) on parsed arguments; the HTTP edge is http.py.

Wire names are the Go field names of k8s.io/kube-scheduler/extender/v1 (`Pod`, `NodeNames`, `FailedNodes`...).
Filter and prioritize never write; bind re-checks the fit under the node's lock against freshly read records,
writes the assignment record (the device plugin's only source of truth), copies it onto the pod for people,
and creates the Binding. A failed step undoes the earlier ones and returns `Error`, so the scheduler retries.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from driver.cluster.base import AlreadyExists, ClusterError, NotFound
from driver.legacy.extender.state import ExtenderState
from driver.legacy.fit import Fit, fit_pod, node_score
from driver.legacy.records import Assignment, pod_annotation, record_object
from driver.legacy.request import Defaults, PodRequest, RequestError, pod_request
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
# Nodes per filter call whose holders are read live before refusing (one pod LIST each, by node): enough
# for the node whose pod was just deleted in a small pool, bounded when a large pool is full.
CONFIRM_NODES = 4


class ArgsError(ValueError):
    """Extender arguments of the wrong shape; answered with HTTP 400 and this message."""


@dataclass
class Extender:
    state: ExtenderState
    defaults: Defaults = field(default_factory=Defaults)

    # --- filter --------------------------------------------------------------------------------------

    def filter(self, args: dict) -> dict:
        pod = _pod(args)
        names_given = args.get("NodeNames")
        nodes_given = args.get("Nodes")
        candidates = _candidates(args)
        try:
            request = pod_request(pod, self.defaults)
        except RequestError as e:
            return {
                "NodeNames": [],
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {n: str(e) for n in candidates},
                "Error": "",
            }
        if not request.wants_gpu:
            return _filter_result(names_given, nodes_given, candidates, {})
        failed = {}
        for node in candidates:
            fit = self._fit(request, node)
            if not fit.ok:
                failed[node] = fit.reason
        for node in [n for n in failed if self._refused_for_usage(request, n)][:CONFIRM_NODES]:
            try:
                freed = self.state.confirm_holders(node)
            except ClusterError as e:
                event(log, logging.WARNING, "share.confirm-failed", node=node, error=str(e))
                continue
            if freed and (fit := self._fit(request, node)).ok:
                del failed[node]
            elif freed:
                failed[node] = fit.reason
        return _filter_result(names_given, nodes_given, [n for n in candidates if n not in failed], failed)

    def _refused_for_usage(self, request: PodRequest, node: str) -> bool:
        """The node would take the pod if its GPUs were empty: other pods' shares are what refuse it."""
        view = self.state.view(node, exclude_uid=request.uid)
        return view.gpus is not None and bool(view.usage) and fit_pod(request, view.gpus, {}).ok

    def _fit(self, request: PodRequest, node: str) -> Fit:
        view = self.state.view(node, exclude_uid=request.uid)
        if view.gpus is None:
            return Fit(
                reason=view.error
                or f"node {node}: no carve GPU inventory (is `carve device-plugin` running there?)"
            )
        return fit_pod(request, view.gpus, view.usage)

    # --- prioritize ----------------------------------------------------------------------------------

    def prioritize(self, args: dict) -> list[dict]:
        pod = _pod(args)
        candidates = _candidates(args)
        try:
            request = pod_request(pod, self.defaults)
        except RequestError:
            return [{"Host": n, "Score": 0} for n in candidates]
        scores = []
        for node in candidates:
            score = 0
            if request.wants_gpu:
                view = self.state.view(node, exclude_uid=request.uid)
                fit = fit_pod(request, view.gpus, view.usage) if view.gpus else Fit(reason="no inventory")
                score = node_score(request, view.gpus, view.usage, fit) if fit.ok else 0
            scores.append({"Host": node, "Score": score})
        return scores

    # --- bind ----------------------------------------------------------------------------------------

    def bind(self, args: dict) -> dict:
        try:
            ns, name, uid, node = (str(args[k]) for k in ("PodNamespace", "PodName", "PodUID", "Node"))
        except KeyError as e:
            raise ArgsError(f"bind: {e.args[0]} is required") from None
        if not all((ns, name, uid, node)):
            raise ArgsError("bind: PodNamespace, PodName, PodUID and Node must be non-empty")
        try:
            pod = self.state.api.get_pod(ns, name)
        except ClusterError as e:
            return {"Error": f"bind pod {ns}/{name}: {e}"}
        if (pod.get("metadata") or {}).get("uid") != uid:
            return {"Error": f"bind pod {ns}/{name}: uid {uid} is gone (the pod was deleted and recreated)"}
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            # A repeated bind (its first answer was lost): never touch the record of a bound pod.
            if bound == node:
                return {"Error": ""}
            return {"Error": f"bind pod {ns}/{name} to {node}: already bound to {bound}"}
        try:
            request = pod_request(pod, self.defaults)
        except RequestError as e:
            return {"Error": f"bind: {e}"}
        if not request.wants_gpu:
            return self._bind_only(ns, name, uid, node)
        with self.state.node_lock(node):
            try:
                self.state.refresh_node(node)
            except ClusterError as e:
                return {"Error": f"bind pod {ns}/{name} to {node}: reading the node's assignments: {e}"}
            fit = self._fit(request, node)
            if not fit.ok:
                return {"Error": f"bind pod {ns}/{name} to {node}: no longer fits: {fit.reason}"}
            a = Assignment(namespace=ns, name=name, uid=uid, node=node, containers=fit.containers)
            try:
                self._record(a)
            except ClusterError as e:
                return {"Error": f"bind pod {ns}/{name}: writing the assignment record: {e}"}
            self.state.add(a)  # reserved before the lock is released: the next bind sees it
        return self._bind_recorded(a)

    def _record(self, a: Assignment) -> None:
        obj = record_object(a, self.state.namespace)
        try:
            self.state.api.create_configmap(obj)
        except AlreadyExists:
            # A record of this pod from an earlier attempt (the extender died before binding): replace it.
            self.state.api.delete_configmap(self.state.namespace, a.record_name)
            self.state.api.create_configmap(obj)

    def _bind_recorded(self, a: Assignment) -> dict:
        api = self.state.api
        try:
            api.patch_pod_annotations(a.namespace, a.name, pod_annotation(a))
            api.create_binding(a.namespace, a.name, a.uid, a.node)
        except ClusterError as e:
            if self._bound_anyway(a):
                return {"Error": ""}
            try:
                api.delete_configmap(self.state.namespace, a.record_name)
            except NotFound:
                pass
            except ClusterError as e2:
                event(
                    log,
                    logging.WARNING,
                    "bind.undo-failed",
                    uid=a.uid,
                    error=str(e2),
                    action="collected at resync",
                )
            self.state.drop(a.uid)
            event(
                log, logging.WARNING, "bind.failed", pod=f"{a.namespace}/{a.name}", node=a.node, error=str(e)
            )
            return {"Error": f"bind pod {a.namespace}/{a.name} to {a.node}: {e}"}
        event(
            log,
            logging.INFO,
            "bind.done",
            pod=f"{a.namespace}/{a.name}",
            uid=a.uid,
            node=a.node,
            gpus=[[d.uuid for d in c.devices] for c in a.containers],
        )
        return {"Error": ""}

    def _bound_anyway(self, a: Assignment) -> bool:
        """Did the Binding land although its answer was an error (a timeout after the server applied it)?"""
        try:
            pod = self.state.api.get_pod(a.namespace, a.name)
        except ClusterError:
            return (
                False  # unknown: undo; a bound pod without a record fails to start, it never runs unlimited
            )
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return meta.get("uid") == a.uid and spec.get("nodeName") == a.node

    def _bind_only(self, ns: str, name: str, uid: str, node: str) -> dict:
        try:
            self.state.api.create_binding(ns, name, uid, node)
        except ClusterError as e:
            return {"Error": f"bind pod {ns}/{name} to {node}: {e}"}
        return {"Error": ""}


def _pod(args: dict) -> dict:
    pod = args.get("Pod")
    if not isinstance(pod, dict):
        raise ArgsError("Pod: required, a Pod object")
    return pod


def _candidates(args: dict) -> list[str]:
    names_given = args.get("NodeNames")
    if names_given is not None:
        if not isinstance(names_given, list) or not all(isinstance(n, str) for n in names_given):
            raise ArgsError("NodeNames: expected a list of node names")
        return list(names_given)
    nodes = args.get("Nodes")
    if isinstance(nodes, dict):
        items = nodes.get("items") or []
        if not isinstance(items, list):
            raise ArgsError("Nodes.items: expected a list of Node objects")
        return [((n or {}).get("metadata") or {}).get("name", "") for n in items if isinstance(n, dict)]
    raise ArgsError("NodeNames or Nodes: one is required")


def _filter_result(names_given, nodes_given, ok: list[str], failed: dict[str, str]) -> dict:
    result: dict = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if names_given is not None:
        result["NodeNames"] = ok
    else:
        keep = set(ok)
        items = [
            n for n in nodes_given.get("items") or [] if ((n or {}).get("metadata") or {}).get("name") in keep
        ]
        result["Nodes"] = {**nodes_given, "items": items}
    return result
