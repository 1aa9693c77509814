"""`sgdeploy export PROFILE --to kubernetes` (docs/kubernetes.md): the manifests against reviewed
snapshots and against the Kubernetes API's schema and LeaderWorkerSet's, the same launch as the unit
(argv, environment, start and stop timeouts), validation for the cluster with validate's own
findings, and secrets only by reference.

No cluster runs here. The schemas (tests/fixtures/kubernetes/README.md says where they come from)
are checked with `jsonschema`, every object closed to unknown fields as `kubectl apply
--validate=strict` is. Regenerate the snapshots with `SGDEPLOY_UPDATE_SNAPSHOTS=1 pytest
tests/test_kubernetes.py` and review them with git diff.
"""

from __future__ import annotations

import difflib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from sgdeploy import cli
from sgdeploy.deploy.kubernetes import (
    DRAIN_SCRIPT,
    SecretInManifest,
    manifest_secrets,
    manifests,
)
from sgdeploy.deploy.render import render_unit, unit_environment
from sgdeploy.profile.inventory import image_sglang_version
from sgdeploy.profile.model import LoadedProfile, load_profile
from sgdeploy.profile.validate import InventoryContext
from sgdeploy.sglang.catalog import load_catalog

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "kubernetes"
INVENTORY = FIXTURES / "inventory.toml"
SNAPSHOTS = ROOT / "tests" / "snapshots" / "kubernetes"
UPDATE_ENV = "SGDEPLOY_UPDATE_SNAPSHOTS"
REFERENCE = ROOT / "profiles" / "qwen36-mtp3.toml"
MULTINODE = FIXTURES / "profiles" / "deepseek-v3-2x8.toml"
SECRETS = FIXTURES / "profiles" / "qwen3-8b-secrets.toml"
# LWS's own CRD, where the steering repository's shared/ folder carries it (it cannot be kept here)
# (SGDEPLOY_LWS_CRD names another copy)
LWS_CRD = Path(os.environ.get("SGDEPLOY_LWS_CRD")
               or ROOT.parent / "shared" / "kubernetes" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml")

# (snapshot, profile, extra arguments)
EXPORTS = [
    ("qwen36-mtp3.k8s-a6000.yaml", REFERENCE, ["--cluster", "k8s-a6000"]),
    ("deepseek-v3-2x8.k8s-h100.yaml", MULTINODE, []),
    ("qwen3-8b-secrets.k8s-h100.yaml", SECRETS, []),
]


def export(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["export", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def exported(profile: Path, extra: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, err = export(str(profile), "--inventory", str(INVENTORY), *extra, capsys=capsys)
    assert code == 0, err
    return list(yaml.safe_load_all(out))


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The installed entry point, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "SGDEPLOY_INVENTORY"}
    return subprocess.run([sys.executable, "-m", "sgdeploy", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def write_inventory(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(INVENTORY.read_text(encoding="utf-8") + extra, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- snapshots
@pytest.mark.parametrize(("snapshot", "profile", "extra"), EXPORTS, ids=[e[0] for e in EXPORTS])
def test_export_matches_snapshot(snapshot: str, profile: Path, extra: list[str],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = export(str(profile), "--inventory", str(INVENTORY), *extra, capsys=capsys)
    assert code == 0, err
    path = SNAPSHOTS / snapshot
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != out:
            path.write_text(out, encoding="utf-8")
            pytest.skip(f"{UPDATE_ENV}=1: wrote {path.relative_to(ROOT)}; review it with git diff")
    assert path.exists(), f"no snapshot at {path}; create it with {UPDATE_ENV}=1 and review it"
    expected = path.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(expected.splitlines(True), out.splitlines(True), snapshot, "exported"))
    assert out == expected, f"the manifests changed; if intended, rerun with {UPDATE_ENV}=1\n{diff}"


def test_export_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = export(str(MULTINODE), "--inventory", str(INVENTORY), capsys=capsys)
    assert first == export(str(MULTINODE), "--inventory", str(INVENTORY), capsys=capsys)


# --------------------------------------------------------------------------- schemas
def _closed(schema: Any) -> Any:
    """Every object schema that lists properties closed to others (the API server's strict field
    validation); the definitions from kubernetes-validate are closed already."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


DEFINITIONS_FILE = "kubernetes-v1.31.0.definitions.json"
DEFINITIONS = _load(DEFINITIONS_FILE)
LWS_SCHEMA = _load("leaderworkerset-v1.schema.json")
REGISTRY = Registry().with_resources([
    (DEFINITIONS_FILE, Resource.from_contents(DEFINITIONS, default_specification=DRAFT202012)),
    ("leaderworkerset-v1.schema.json", Resource.from_contents(LWS_SCHEMA, default_specification=DRAFT202012)),
])
KINDS = {(f"{g['group']}/{g['version']}" if g["group"] else g["version"], g["kind"]): name
         for name, schema in DEFINITIONS["$defs"].items()
         for g in schema.get("x-kubernetes-group-version-kind", [])}


def validator_for(obj: dict[str, Any]) -> jsonschema.protocols.Validator:
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"):
        schema: dict[str, Any] = {"$ref": "leaderworkerset-v1.schema.json"}
    else:
        assert key in KINDS, f"no schema for {key} in {DEFINITIONS_FILE}"
        schema = {"$ref": f"{DEFINITIONS_FILE}#/$defs/{KINDS[key]}"}
    return jsonschema.Draft202012Validator(schema, registry=REGISTRY)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator_for(obj).iter_errors(obj)]


DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _labels(obj: Any) -> list[str]:
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("labels", "matchLabels", "selector", "nodeSelector") and isinstance(value, dict) \
                    and all(isinstance(v, str) for v in value.values()):
                found += list(value.values())
            found += _labels(value)
    elif isinstance(obj, list):
        for item in obj:
            found += _labels(item)
    return found


@pytest.mark.parametrize(("snapshot", "profile", "extra"), EXPORTS, ids=[e[0] for e in EXPORTS])
def test_every_manifest_passes_the_api_schemas(snapshot: str, profile: Path, extra: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    objects = exported(profile, extra, capsys)
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert schema_errors(obj) == [], where
        assert DNS_LABEL.match(obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63, where
        assert DNS_LABEL.match(obj["metadata"]["namespace"]), where
        bad = [v for v in _labels(obj) if len(v) > 63 or not LABEL_VALUE.match(v)]
        assert bad == [], f"{where}: label values Kubernetes refuses: {bad}"


def test_the_schemas_catch_a_wrong_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    """The check is real: an unknown field, a wrong type, a missing required key are each found,
    in the Kubernetes definitions and in LeaderWorkerSet's (pod templates included)."""
    deployment = exported(REFERENCE, ["--cluster", "k8s-a6000"], capsys)[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["startupProbe"]["failureTreshold"] = 3
    container["resources"]["limits"]["nvidia.com/gpu"] = ["2"]
    del deployment["spec"]["selector"]
    errors = "\n".join(schema_errors(deployment))
    assert "failureTreshold" in errors and "selector" in errors and "nvidia.com/gpu" in errors
    lws = exported(MULTINODE, [], capsys)[0]
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["imagePullPolicy"] = 1
    lws["spec"]["startupPolicy"] = "LeaderFirst"
    errors = "\n".join(schema_errors(lws))
    assert "restartPolicy" in errors and "imagePullPolicy" in errors and "LeaderFirst" in errors


@pytest.mark.skipif(not LWS_CRD.is_file(), reason=f"LWS's CRD is not at {LWS_CRD} (the shared/ folder)")
def test_the_leader_worker_set_passes_lws_own_crd(capsys: pytest.CaptureFixture[str]) -> None:
    crd = yaml.safe_load(LWS_CRD.read_text(encoding="utf-8"))
    schema = _closed(next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"])
    lws = exported(MULTINODE, [], capsys)[0]
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(lws)]
    assert errors == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl (Debian: apt-get install kubernetes-client)")
@pytest.mark.parametrize(("snapshot", "profile", "extra"), EXPORTS, ids=[e[0] for e in EXPORTS])
def test_kubectl_reads_the_files_back_as_the_same_objects(snapshot: str, profile: Path, extra: list[str],
                                                          tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl's own YAML reader, offline (`kubectl kustomize` needs no cluster): every file of
    `-o DIR` is read back as the object export meant, whatever YAML 1.1 would make of a word."""
    out = tmp_path / "k8s"
    code, _, err = export(str(profile), "--inventory", str(INVENTORY), *extra, "-o", str(out), capsys=capsys)
    assert code == 0, err
    files = sorted(p.name for p in out.iterdir())
    (out / "kustomization.yaml").write_text("resources:\n" + "".join(f"- {f}\n" for f in files), encoding="utf-8")
    done = subprocess.run(["kubectl", "kustomize", str(out)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr

    def key(obj: dict[str, Any]) -> tuple[str, str]:
        return obj["kind"], obj["metadata"]["name"]

    read = sorted(yaml.safe_load_all(done.stdout), key=key)
    assert read == sorted((yaml.safe_load((out / f).read_text(encoding="utf-8")) for f in files), key=key)


# --------------------------------------------------------------------------- the same launch as the unit
def _loaded(path: Path) -> LoadedProfile:
    loaded = load_profile(path)
    assert loaded.model is not None
    return loaded


def _container(obj: dict[str, Any], template: str = "template") -> dict[str, Any]:
    spec = obj["spec"]
    pod = spec[template] if template == "template" else spec["leaderWorkerTemplate"][template]
    return pod["spec"]["containers"][0]


def test_the_pod_runs_the_units_argv_and_environment(capsys: pytest.CaptureFixture[str]) -> None:
    loaded = _loaded(REFERENCE)
    unit = render_unit(loaded, load_catalog("0.5.11"), "ct129")
    container = _container(exported(REFERENCE, ["--cluster", "k8s-a6000"], capsys)[0])
    # the image's interpreter instead of the host's; every word after it the unit's
    assert container["command"] == ["python3", *unit.argv[1:]]
    env = {e["name"]: e["value"] for e in container["env"]}
    host_only = {"PATH", "CUDA_VISIBLE_DEVICES"}
    assert env == {k: v for k, v in unit_environment(loaded.model) if k not in host_only}  # type: ignore[arg-type]


def test_a_multinode_launch_takes_rank_and_address_from_lws(capsys: pytest.CaptureFixture[str]) -> None:
    loaded = _loaded(MULTINODE)
    lws = exported(MULTINODE, [], capsys)[0]
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = _container(lws, "leaderTemplate"), _container(lws, "workerTemplate")
    assert leader["command"] == worker["command"]
    # the unit of rank 0 with its host's address, as `multinode.node_profiles` renders it
    server = {**loaded.model.server, "node_rank": 0, "dist_init_addr": "h0:50000"}  # type: ignore[union-attr]
    node = LoadedProfile(path=loaded.path, text=loaded.text, data=loaded.data,
                         model=loaded.model.model_copy(update={"server": server}))  # type: ignore[union-attr]
    unit = render_unit(node, load_catalog("0.5.23"), "h0")
    expected = ["python3", *unit.argv[1:]]
    expected[expected.index("--node-rank") + 1] = "$(LWS_WORKER_INDEX)"
    expected[expected.index("--dist-init-addr") + 1] = "$(LWS_LEADER_ADDRESS):50000"
    assert leader["command"] == expected
    for container in (leader, worker):  # NVLS multicast stays off in every layer, as in the unit
        env = {e["name"]: e["value"] for e in container["env"]}
        assert (env["NCCL_NVLS_ENABLE"], env["TORCH_SYMM_MEM_DISABLE_MULTICAST"], env["NVSHMEM_DISABLE_NVLS"]) \
            == ("0", "1", "1")
    assert "startupProbe" in leader and "ports" in leader and "startupProbe" not in worker
    service = exported(MULTINODE, [], capsys)[1]
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_probes_outlast_the_start_and_spare_a_busy_server(capsys: pytest.CaptureFixture[str]) -> None:
    for profile, extra, timeout, ready in ((REFERENCE, ["--cluster", "k8s-a6000"], 1200, "/health"),
                                           (MULTINODE, [], 2400, "/ready")):
        obj = exported(profile, extra, capsys)[0]
        container = _container(obj, "template" if obj["kind"] == "Deployment" else "leaderTemplate")
        start, live = container["startupProbe"], container["livenessProbe"]
        assert start["failureThreshold"] * start["periodSeconds"] >= timeout
        assert start["httpGet"]["path"] == container["readinessProbe"]["httpGet"]["path"] == ready
        assert live["httpGet"]["path"] == "/health"
        assert live["failureThreshold"] * live["periodSeconds"] >= 300 and live["timeoutSeconds"] >= 10
        volumes = {v["name"]: v for v in (obj["spec"].get("template") or obj["spec"]["leaderWorkerTemplate"][
            "leaderTemplate"])["spec"]["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory" and volumes["dshm"]["emptyDir"]["sizeLimit"]


def test_one_server_recreates_and_several_roll_without_surge(capsys: pytest.CaptureFixture[str]) -> None:
    assert exported(REFERENCE, ["--cluster", "k8s-a6000"], capsys)[0]["spec"]["strategy"] == {"type": "Recreate"}
    rolling = exported(SECRETS, [], capsys)[0]["spec"]["strategy"]
    assert rolling == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


# --------------------------------------------------------------------------- secrets
def test_secrets_are_references_and_the_commands_to_create_them_are_said(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = export(str(SECRETS), "--inventory", str(INVENTORY), capsys=capsys)
    assert code == 0
    objects = list(yaml.safe_load_all(out))
    pod = objects[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][container["command"].index("--config") + 1] == "/etc/sglang/qwen3-8b.secrets.yaml"
    assert container["command"][1] == "-c"  # the unit's launcher keeps the key out of the log
    mount = next(m for m in container["volumeMounts"] if m["name"] == "secrets")
    assert mount == {"name": "secrets", "mountPath": "/etc/sglang/qwen3-8b.secrets.yaml",
                     "subPath": "qwen3-8b.secrets.yaml", "readOnly": True}
    assert {"name": "secrets", "secret": {"secretName": "qwen3-8b-secrets", "defaultMode": 0o400}} in pod["volumes"]
    assert container["envFrom"] == [{"secretRef": {"name": "qwen3-8b-env"}}]
    gateway = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "front")
    smg = gateway["spec"]["template"]["spec"]["containers"][0]
    assert smg["command"][-2:] == ["--api-key", "$(SMG_API_KEY)"]
    assert smg["env"] == [{"name": "SMG_API_KEY", "valueFrom": {"secretKeyRef": {"name": "front-api-key",
                                                                                  "key": "api-key"}}}]
    assert "kubectl -n llm create secret generic qwen3-8b-secrets --from-file=/etc/sglang/qwen3-8b.secrets.yaml" in err
    assert "--from-env-file=/etc/sglang/qwen3-8b.env" in err
    assert manifest_secrets(objects) == []


def test_the_profiles_own_config_is_merged_by_an_init_container_as_by_exec_start_pre(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "merged.toml"
    profile.write_text(SECRETS.read_text(encoding="utf-8") + 'config = "/models/qwen3-8b.yaml"\n', encoding="utf-8")
    code, out, err = export(str(profile), "--inventory", str(INVENTORY), capsys=capsys)
    assert code == 0, err
    deployment = next(yaml.safe_load_all(out))
    assert schema_errors(deployment) == []
    pod = deployment["spec"]["template"]["spec"]
    unit = render_unit(_loaded(profile), load_catalog("0.5.23"), "h")
    assert "ExecStartPre=" in unit.text
    (init,) = pod["initContainers"]
    assert init["command"][:2] == ["python3", "-c"]
    assert init["command"][3:] == ["/models/qwen3-8b.yaml", "/etc/sglang/qwen3-8b.secrets.yaml",
                                   "/run/sgdeploy-qwen3-8b/config.yaml"]
    command = pod["containers"][0]["command"]
    assert command[command.index("--config") + 1] == "/run/sgdeploy-qwen3-8b/config.yaml"
    assert command.count("--config") == 1
    assert {"name": "run", "mountPath": "/run/sgdeploy-qwen3-8b"} in init["volumeMounts"]
    assert {"name": "run", "mountPath": "/run/sgdeploy-qwen3-8b"} in pod["containers"][0]["volumeMounts"]


def test_a_release_without_config_takes_the_key_from_a_secret_key_ref(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    inventory = write_inventory(tmp_path, '\n[clusters.old]\nimage = "lmsysorg/sglang:v0.5.2-cu126"\n'
                                'gpu = "NVIDIA H100 80GB HBM3"\ngpu_count = 8\nmodels = { pvc = "models" }\n')
    profile = tmp_path / "old.toml"
    profile.write_text(SECRETS.read_text(encoding="utf-8").replace('"k8s-h100"', '"old"')
                       .replace("/models/Qwen3-8B", "/root/models/Qwen3-8B")
                       .replace('reasoning_parser = "qwen3"\n', ""), encoding="utf-8")
    code, out, err = export(str(profile), "--inventory", str(inventory), capsys=capsys)
    assert code == 0, err
    container = _container(next(yaml.safe_load_all(out)))
    assert container["command"][-2:] == ["--api-key", "$(api_key)"]
    assert container["env"][0] == {"name": "api_key", "valueFrom": {"secretKeyRef": {"name": "qwen3-8b-secrets",
                                                                                      "key": "api_key"}}}
    assert "--from-env-file=/etc/sglang/qwen3-8b.secrets.yaml" in err


def test_an_inline_secret_is_refused_as_validate_refuses_it(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "inline.toml"
    token = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    profile.write_text(REFERENCE.read_text(encoding="utf-8").replace(
        "[server]\n", f'HF_TOKEN = "{token}"\n\n[server]\napi_key = "sk-{"x1" * 12}"\n'), encoding="utf-8")
    code, out, err = export(str(profile), "--inventory", str(INVENTORY), "--cluster", "k8s-a6000", capsys=capsys)
    assert code == 1 and out == ""
    assert re.search(r"inline\.toml:\d+: SGD021 error: 'api_key'", err) and "HF_TOKEN" in err, err
    assert token not in err and "x1x1" not in err


def test_the_manifests_refuse_a_secret_whatever_validation_said() -> None:
    loaded = _loaded(REFERENCE)
    assert loaded.model is not None
    cluster = InventoryContext.load(INVENTORY).inventory.clusters["k8s-a6000"]  # type: ignore[union-attr]
    sneaked = loaded.model.model_copy(update={"env": {**loaded.model.env, "HF_TOKEN": "hf_" + "Z" * 30}})
    bad = LoadedProfile(path=loaded.path, text=loaded.text, data=loaded.data, model=sneaked)
    with pytest.raises(SecretInManifest) as refused:
        manifests(bad, load_catalog("0.5.11"), cluster, "sglang")
    assert [d.rule for d in refused.value.diagnostics] == ["SGD801"]
    assert refused.value.diagnostics[0].field == "env.HF_TOKEN"
    # and the scan of the objects themselves: a literal secret anywhere, a value after a secret option
    objects = manifests(loaded, load_catalog("0.5.11"), cluster, "sglang").objects
    container = objects[0]["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "OPENAI_API_KEY", "value": "whatever"})
    container["command"] += ["--api-key", "plain"]
    objects[0]["metadata"]["annotations"]["note"] = "https://user:hunter2@example.com/x"
    found = manifest_secrets(objects)
    assert len(found) == 3, found


# --------------------------------------------------------------------------- validation for the cluster
def test_a_profile_that_fails_on_the_cluster_is_refused_with_validates_findings() -> None:
    refused = run("export", str(REFERENCE), "--cluster", "k8s-h100", "--inventory", str(INVENTORY))
    validated = run("validate", str(REFERENCE), "--cluster", "k8s-h100", "--inventory", str(INVENTORY))
    assert refused.returncode == validated.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr == validated.stdout  # the same findings, word for word
    rules = set(re.findall(r"SGD\d{3} error", refused.stderr))
    # 0.5.23 (the image's release) removed two of its flags; the cluster's storage is at /models
    assert rules == {"SGD011 error", "SGD803 error"}
    assert "Traceback" not in refused.stderr


def test_a_profile_can_name_a_cluster_as_its_target(tmp_path: Path) -> None:
    profile = tmp_path / "on-cluster.toml"
    profile.write_text(REFERENCE.read_text(encoding="utf-8").replace('host = "ct129"', 'host = "k8s-a6000"'),
                       encoding="utf-8")
    assert run("validate", str(profile), "--inventory", str(INVENTORY)).returncode == 0
    assert run("export", str(profile), "--inventory", str(INVENTORY)).returncode == 0
    for command in (["render"], ["plan"], ["status"]):
        done = run(*command, str(profile), "--inventory", str(INVENTORY))
        assert done.returncode == 2, done.stderr
        assert "is a Kubernetes cluster" in done.stderr and "sgdeploy export" in done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("text", "rule", "field"), [
    ('host = "127.0.0.1"', "SGD805", "server.host"),
    ('nnodes = 8\ndist_init_addr = "x:1"', "SGD802", "server.nnodes"),
])
def test_what_a_pod_changes_is_checked(tmp_path: Path, text: str, rule: str, field: str) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(REFERENCE.read_text(encoding="utf-8").replace('host = "0.0.0.0"\n', "")
                       + text + "\n", encoding="utf-8")
    done = run("export", str(profile), "--cluster", "k8s-a6000", "--inventory", str(INVENTORY))
    assert done.returncode == 1
    assert re.search(rf"p\.toml:\d+: {rule} error", done.stderr), done.stderr
    assert field in done.stderr or rule == "SGD802"


def test_a_launch_file_outside_the_pods_volumes_is_a_warning(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "ssl.toml"
    profile.write_text(REFERENCE.read_text(encoding="utf-8") + 'ssl_keyfile = "/etc/ssl/server.key"\n'
                       'ssl_certfile = "/root/models/tls/server.crt"\n', encoding="utf-8")
    code, out, err = export(str(profile), "--inventory", str(INVENTORY), "--cluster", "k8s-a6000", capsys=capsys)
    assert code == 0 and out
    assert "SGD804 warning: server.ssl_keyfile names /etc/ssl/server.key" in err
    assert "ssl_certfile" not in err  # on the model storage (/root/models)


# --------------------------------------------------------------------------- the command line
def test_output_folder_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = export(str(SECRETS), "--inventory", str(INVENTORY), "-o", str(tmp_path / "out"), capsys=capsys)
    assert code == 0
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["01-deployment-qwen3-8b.yaml", "02-service-qwen3-8b.yaml", "03-serviceaccount-front.yaml",
                     "04-role-front.yaml", "05-rolebinding-front.yaml", "06-deployment-front.yaml",
                     "07-service-front.yaml"]
    assert f"kubectl apply -f {tmp_path / 'out'}/" in err
    code, out, _ = export(str(SECRETS), "--inventory", str(INVENTORY), "--json", capsys=capsys)
    document = json.loads(out)
    assert document["kind"] == "List" and [o["kind"] for o in document["items"]][:2] == ["Deployment", "Service"]
    assert document["items"] == [yaml.safe_load((tmp_path / "out" / n).read_text()) for n in names]


@pytest.mark.parametrize(("args", "said"), [
    (["--cluster", "k8s-a600"], "did you mean 'k8s-a6000'?"),
    ([], "deploy.host 'ct129' is no cluster of"),
    (["--cluster", "k8s-a6000", "--name", "Bad_Name"], "cannot name Kubernetes objects"),
    (["--cluster", "k8s-a6000", "--gateway", "back"], "--gateway back is no gateway"),
    (["--cluster", "k8s-a6000", "--gateway", "front"], "cluster k8s-a6000 has no gateway_image"),
    (["--cluster", "k8s-a6000", "--to", "nomad"], "invalid choice: 'nomad'"),
])
def test_usage_errors_say_what_to_do(args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) if "--to" in args else _no_raise():
        code, out, err = export(str(REFERENCE), "--inventory", str(INVENTORY), *args, capsys=capsys)
        assert code == 2 and out == "" and said in err
    if "--to" in args:
        assert said in capsys.readouterr().err


class _no_raise:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_the_installed_command_writes_the_files(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("sgdeploy")
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    env = {k: v for k, v in os.environ.items() if k != "SGDEPLOY_INVENTORY"}
    done = subprocess.run([str(script), "export", str(MULTINODE), "-o", str(tmp_path / "k8s")], cwd=tmp_path,
                          env={**env, "SGDEPLOY_INVENTORY": str(INVENTORY)}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "k8s").iterdir())[:2] == ["01-leaderworkerset-deepseek-v3.yaml",
                                                                        "02-service-deepseek-v3.yaml"]


def test_validate_names_an_unknown_cluster() -> None:
    done = run("validate", str(REFERENCE), "--cluster", "k8s-h10", "--inventory", str(INVENTORY))
    assert done.returncode == 2 and "did you mean 'k8s-h100'?" in done.stderr


def test_a_broken_cluster_entry_is_located_without_a_traceback(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path, '\n[clusters.broken]\nimage = "lmsysorg/sglang:latest"\n'
                                'gpu = "NVIDIA H100 80GB HBM3"\ngpu_count = "8"\n')
    done = run("export", str(REFERENCE), "--cluster", "broken", "--inventory", str(inventory))
    assert done.returncode == 1 and done.stdout == ""
    assert re.search(r"inventory\.toml:\d+: SGD003 error: clusters\.broken\.gpu_count", done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text("[deploy\nhost = 1\n", encoding="utf-8")
    done = run("export", str(broken), "--cluster", "k8s-a6000", "--inventory", str(INVENTORY))
    assert done.returncode == 1 and re.search(r"broken\.toml:1: SGD001 error", done.stderr), done.stderr
    assert "Traceback" not in done.stderr


def test_the_image_tag_names_the_release() -> None:
    assert image_sglang_version("lmsysorg/sglang:v0.5.11-cu129") == "0.5.11"
    assert image_sglang_version("registry:5000/sglang:0.5.4.post1-cu126") == "0.5.4.post1"
    assert image_sglang_version("lmsysorg/sglang:v0.5.23@sha256:abcd") == "0.5.23"
    assert image_sglang_version("lmsysorg/sglang:latest") is None
    assert image_sglang_version("registry:5000/sglang") is None


# --------------------------------------------------------------------------- the drain before a stop
class _Loads(http.server.BaseHTTPRequestHandler):
    busy_until = 0.0
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(f"{self.path} {self.headers.get('Authorization')}")
        if self.path.startswith("/v1/loads"):
            running = 1 if time.monotonic() < type(self).busy_until else 0
            body = json.dumps({"loads": [{"num_running_reqs": running, "num_waiting_reqs": 0}]}).encode()
            self.send_response(200)
        else:
            body = b"{}"
            self.send_response(404)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.mark.parametrize(("busy_s", "timeout_s", "waited"), [(1.5, 20, (1.0, 10.0)), (60, 2, (1.5, 10.0))])
def test_the_prestop_hook_waits_for_running_requests(tmp_path: Path, busy_s: float, timeout_s: float,
                                                     waited: tuple[float, float]) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Loads)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _Loads.busy_until, _Loads.seen = time.monotonic() + busy_s, []
        key = tmp_path / "secrets.yaml"
        key.write_text("api-key: k3y\n", encoding="utf-8")
        spec = {"port": server.server_address[1], "settle": 0, "timeout": timeout_s, "file": str(key), "env": None}
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", DRAIN_SCRIPT, json.dumps(spec)], check=True, timeout=30)
        took = time.monotonic() - start
    finally:
        server.shutdown()
    assert waited[0] <= took <= waited[1]
    assert _Loads.seen and all(s.endswith("Bearer k3y") for s in _Loads.seen)
