"""What RBAC authorizes for a recorded request to an API stand-in: (apiGroup, resource[/subresource], verb),
derived from the method, path and query the way the API server's request-info resolver does. Tests compare
the set of a component's recorded requests with the rules the chart grants it."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

# Paths RBAC does not govern through a ClusterRole of ours: every authenticated user may read them
# (the system:public-info-viewer and system:discovery roles).
PUBLIC_PATHS = {"/version"}
_RESOURCE_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
# HTTP method -> RBAC verb, for a request on one named object and on a collection. A POST names an object
# only on a subresource (pods/<name>/binding, .../eviction): create.
_ON_OBJECT = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "POST": "create"}
_ON_COLLECTION = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}


def rbac_of(request: Any) -> tuple[str, str, str] | str:
    """(apiGroup, resource[/subresource], verb) that the API server authorizes for a request, the way its
    request-info resolver derives them; a non-resource path is returned as is."""
    m = _RESOURCE_PATH.match(unquote(request.path))
    if m is None:
        return request.path
    group = "" if m["core"] else m["group"]
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    if m["name"]:
        verb = _ON_OBJECT[request.method]
    elif request.method == "GET" and request.query.get("watch") in (["true"], ["1"]):
        verb = "watch"
    else:
        verb = _ON_COLLECTION[request.method]
    return group, resource, verb
