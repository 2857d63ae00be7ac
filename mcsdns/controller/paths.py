"""Where the controller's objects live: the one function that builds their REST paths.

Each kind names its API version and resource once (in its contract); this builds the path.
"""

from __future__ import annotations

CORE = "v1"  # Services, Namespaces
DISCOVERY = "discovery.k8s.io/v1"  # EndpointSlices


def resource_path(api_version: str, resource: str, namespace: str | None = None,
                  name: str | None = None) -> str:
    """`/api/v1/...` for the core group, `/apis/<group>/<version>/...` otherwise; every
    namespace when `namespace` is None, the collection when `name` is None."""
    base = f"/api/{api_version}" if api_version == CORE else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{resource}"
    return f"{base}/{name}" if name else base
