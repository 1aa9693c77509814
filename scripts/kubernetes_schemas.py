#!/usr/bin/env python3
"""Write tests/fixtures/kubernetes/kubernetes-v1.31.0.definitions.json: the Kubernetes API's
definitions that the manifests of `sgdeploy export` use, from the package kubernetes-validate.

    pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv
    python3 scripts/kubernetes_schemas.py /tmp/kv/kubernetes_validate-1.37.0-py3-none-any.whl

kubernetes-validate ships, per Kubernetes release, the API's OpenAPI definitions converted to JSON
Schema (kubernetes-json-schema, "local-strict": every object closed to unknown fields, as
`kubectl apply --validate=strict` is). Kept here: the definitions reachable from the kinds sgdeploy
writes, without their descriptions (which validate nothing), so the file stays small. See
tests/fixtures/kubernetes/README.md.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

KUBERNETES = "v1.31.0"
SOURCE = f"kubernetes_validate/kubernetes-json-schema/{KUBERNETES}-local-strict/_definitions.json"
ROOTS = (
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.rbac.v1.Role",
    "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.core.v1.PodTemplateSpec",  # the pod templates of a LeaderWorkerSet
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
)
OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kubernetes" / f"kubernetes-{KUBERNETES}.definitions.json"
PREFIX = "#/$defs/"


def refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].removeprefix(PREFIX)} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(refs(v) for v in node))
    return set()


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main(wheel: str) -> int:
    with zipfile.ZipFile(wheel) as archive:
        definitions = json.loads(archive.read(SOURCE))["$defs"]
    keep: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo += sorted(refs(definitions[name]) - keep)
    document = {"$defs": {name: without_descriptions(definitions[name]) for name in sorted(keep)}}
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(keep)} of {len(definitions)} definitions")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
