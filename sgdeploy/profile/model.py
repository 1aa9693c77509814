"""Launch profiles (`profiles/NAME.toml`): the pydantic model and loading.

The model fixes the shape of a profile. Whether `[server]` keys are flags of the target SGLang
version, and how they combine, is checked against that version's catalog and rules
(`sgdeploy.sglang`), because the answer depends on the host the profile is deployed to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from sgdeploy.core.explain import problem, shaped
from sgdeploy.core.tomlfile import TomlDocument, parse_toml_text, read_toml
from sgdeploy.sglang.sandbox import DEFAULT_SERVICE_USER

H = TypeVar("H")


def _normalized(path: str) -> str:
    if "//" in path or any(part in (".", "..") for part in path.split("/")):
        raise problem("the path has a '.', '..' or '//' in it, which systemd refuses",
                      "write the path without '.', '..' and '//' (as realpath prints it)")
    return path


UNIT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,200}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvName = Annotated[str, shaped(
    ENV_NAME, "an environment variable name (letters, digits and '_', not starting with a digit)",
    "rename it, e.g. MY_SETTING: a shell and systemd take no other names")]

# An absolute, normalized path that a unit file takes as it is: no control characters, no
# final backslash, no '.' or '..' components, no '//' (systemd refuses such paths).
AbsolutePath = Annotated[str, shaped(
    r"^/([^\x00-\x1f\x7f]*[^\x00-\x1f\x7f\\])?$",
    "an absolute path (one starting with '/', without control characters or a final '\\')",
    "write the full path on the host, starting with '/'", max_length=4096),
    AfterValidator(_normalized)]
# The executable of ExecStart=: systemd refuses quotes and backslashes in it.
ExecutablePath = Annotated[AbsolutePath, shaped(
    r"^[^\"'\\]*$", "a path systemd can run: ExecStart= takes no quotes or backslashes in it",
    "use a path without quotes and backslashes (a symbolic link to the interpreter will do)")]
GpuIndex = Annotated[int, Field(ge=0)]
GpuUuid = Annotated[str, shaped(
    r"^GPU-[0-9a-fA-F-]+$", "a GPU index (0, 1, ...) or UUID (GPU-...)",
    "write the index as a number, or the UUID as nvidia-smi -L prints it")]
UnitName = Annotated[str, shaped(
    UNIT_NAME, "a systemd unit name (letters, digits and _.:-, starting with a letter or digit, "
    "at most 201 characters)", "use a plain name such as sglang or sglang-qwen3")]
UserName = Annotated[str, shaped(
    r"^[a-z_][a-z0-9_-]{0,31}\$?$", "a Linux user name (lower-case letters, digits, '_' and '-', "
    "at most 32 characters)", "give the name of an account on the host, as `id -un` prints it")]


def _as_process_sees_it(value: str | bool | int | float) -> str:
    """TOML true -> "1", false -> "0", numbers as written: the environment is strings."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


if TYPE_CHECKING:
    EnvValue = str  # what the model holds
else:
    # What the file may write (a string, true/false or a number: the schema and the messages
    # say so), held as the process sees it.
    EnvValue = Annotated[str | bool | int | float, AfterValidator(_as_process_sees_it)]

ServerValue = str | bool | int | float | list[Any] | dict[str, Any]


ENDPOINT_PATHS = {"generate": "/generate", "openai": "/v1/completions"}

DEFAULT_PROMPTS = (
    "Explain, step by step, how a hash table handles collisions, and compare open addressing "
    "with separate chaining.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "List the main differences between TCP and UDP and give one use case for each.",
    "Describe the water cycle to a ten-year-old, in plain words.",
)


class ProbeSettings(BaseModel):
    """A profile's `[probe]` section: the workload of the throughput probe
    (sgdeploy.deploy.probe)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompts: tuple[str, ...] = Field(default=DEFAULT_PROMPTS, min_length=1)
    max_tokens: int = Field(default=128, ge=2, le=8192)
    concurrency: int = Field(default=4, ge=1, le=256)
    requests: int = Field(default=4, ge=1, le=1024,
                          description="requests per phase (the concurrent one rounds up to whole "
                          "waves)")
    warmup: int = Field(default=1, ge=0, le=16, description="uncounted requests before the phases")
    duration_s: float = Field(default=120.0, gt=0, description="cap on the whole probe")
    request_timeout_s: float = Field(default=60.0, gt=0, description="cap on one request")
    endpoint: Literal["generate", "openai"] = "generate"
    model: str | None = Field(default=None, description="`model` of OpenAI requests; default "
                                            "'default'")

    @model_validator(mode="after")
    def _prompts_not_blank(self) -> ProbeSettings:
        if any(not p.strip() for p in self.prompts):
            raise problem("a prompt is blank", "remove the blank prompt or write one")
        return self

    @property
    def path(self) -> str:
        return ENDPOINT_PATHS[self.endpoint]

    def workload(self) -> dict[str, Any]:
        """What makes two probes comparable (stored with the figures)."""
        digest = hashlib.sha256("\x00".join(self.prompts).encode()).hexdigest()[:12]
        return {
            "endpoint": self.endpoint,
            "max_tokens": self.max_tokens,
            "concurrency": self.concurrency,
            "prompts_sha256": digest,
        }


class DeploySettings(BaseModel):
    """`[deploy]`: where and how the server runs."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1, description="A host or group of the inventory.",
                      examples=["gpu1"])
    unit: UnitName = Field(default="sglang", description="systemd unit name, without '.service'.")
    python: ExecutablePath = Field(description="Interpreter that has sglang installed.",
                                   examples=["/opt/sglang/bin/python3"])
    ready_timeout_s: int = Field(default=1200, gt=0, le=86400,
                                 description="Seconds to wait for the server to become ready.")
    user: UserName | None = None
    working_directory: AbsolutePath | None = None
    env_file: AbsolutePath | None = Field(
        default=None, description="File on the host with secrets (KEY=value lines); never copied."
    )
    gpus: list[GpuIndex | GpuUuid] | None = Field(
        default=None, min_length=1, description="GPU indices or UUIDs for CUDA_VISIBLE_DEVICES."
    )
    hardening: Literal["none", "strict"] = Field(
        default="none", description="systemd sandbox of the unit: 'strict' runs SGLang as a "
        "service user in a read-only file system with a closed device list (docs/hardening.md); "
        "'none' as before.")
    writable_paths: list[AbsolutePath] = Field(
        default_factory=list, description="Folders a 'strict' unit may write besides its cache "
        "folder and the ones its flags and [env] name (ReadWritePaths=).")
    model_architecture: str | None = Field(
        default=None, description="HF architecture (config.json architectures[0]), for rules that "
                      "need it."
    )
    # TOML key `model_config` (a name pydantic reserves for itself, hence the alias).
    model_config_file: str | None = Field(
        default=None, min_length=1, alias="model_config",
        description="A local copy of the model's config.json (or its folder), relative to the "
        "profile, for rules that read it offline (context length, heads, DSA, Mamba state, "
        "quantization).",
    )

    @property
    def run_as(self) -> str | None:
        """The unit's User=: deploy.user, else the service user of a strict unit; None is root."""
        if self.user:
            return self.user
        return DEFAULT_SERVICE_USER if self.hardening == "strict" else None

    @field_validator("gpus")
    @classmethod
    def _gpus_once_each(cls, value: list[int | str] | None) -> list[int | str] | None:
        repeated = sorted({str(g) for g in value if value.count(g) > 1}) if value else []
        if repeated:  # CUDA would see the same GPU twice, and the launch would count it twice
            raise problem(f"GPU {', '.join(repeated)} is listed more than once",
                          "list each GPU once: [0, 1] for two GPUs")
        return value

    @field_validator("unit")
    @classmethod
    def _unit_is_plain(cls, value: str) -> str:
        if value.endswith(".service"):
            plain = value.removesuffix(".service")
            raise problem("the unit name ends in '.service'",
                          f"write {plain!r}: sgdeploy adds '.service' itself")
        if ".." in value:
            raise problem("the unit name has '..' in it", "use a plain name such as sglang")
        return value


SecretKey = Annotated[str, shaped(
    r"^[a-z][a-z0-9_]{0,100}$", "a ServerArgs field name (lower case, snake_case: api_key, not "
    "--api-key)", "write the field as [server] would: api_key, admin_api_key, ...")]


class SecretSettings(BaseModel):
    """`[secrets]`: SGLang arguments whose values live in a file on the host
    (sgdeploy.deploy.secret_args).

    It says where the values are and which arguments they are; there is no place for a value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    file: AbsolutePath = Field(description="Root-only file on the host with the values (YAML for "
                               "--config).")
    keys: list[SecretKey] = Field(min_length=1, description="ServerArgs field names the file "
                                                "provides.")

    @model_validator(mode="before")
    @classmethod
    def _names_only(cls, data: Any) -> Any:
        # Never echo what was written: a key that is not file/keys is most likely a value.
        if isinstance(data, dict):
            extra = sorted(str(k) for k in data if k not in ("file", "keys"))
            if extra:
                named = ", ".join(map(repr, extra))
                raise problem(f"[secrets] takes only 'file' and 'keys', not {named}",
                              "a secret's value goes into the file on the host, never into the "
                              "profile: move it there and list its name in keys")
        return data

    @field_validator("keys")
    @classmethod
    def _unique(cls, keys: list[str]) -> list[str]:
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise problem(f"{', '.join(twice)} listed more than once", "list each key once")
        return keys


class Profile(BaseModel):
    """A launch profile: `[deploy]`, `[env]`, `[server]`, `[secrets]` and `[probe]`."""

    model_config = ConfigDict(extra="forbid")

    deploy: DeploySettings
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict, description="Environment of the server process."
    )
    server: dict[str, ServerValue] = Field(
        default_factory=dict,
        description="sglang.launch_server flags by ServerArgs field name (snake_case).",
    )
    probe: ProbeSettings | None = Field(
        default=None, description="The throughput probe's workload (`apply --probe`, `sgdeploy "
                      "probe`)."
    )
    secrets: SecretSettings | None = Field(
        default=None, description="Secret SGLang arguments, by reference to a file on the host."
    )



def is_multinode(profile: Profile | None) -> bool:
    """Whether the launch spans hosts (`nnodes` > 1): one server over a group, not one per host."""
    nnodes = profile.server.get("nnodes", 1) if profile else 1
    return isinstance(nnodes, int) and nnodes > 1


def serving_hosts(profile: Profile | None, hosts: Sequence[H]) -> list[H]:
    """The hosts whose server answers requests: of a multi-node launch, rank 0 (the first) alone."""
    return list(hosts[:1] if is_multinode(profile) else hosts)


@dataclass
class LoadedProfile(TomlDocument[Profile]):
    """A profile file as read: the model when its shape is valid, and every finding. `name` (the
    file's stem: the unit's header, the records) and `sha256` (of the text as read: a
    deployment's id) are set once, by load_profile or profile_from_text."""

    name: str = ""
    sha256: str = ""


def load_profile(path: str | Path) -> LoadedProfile:
    loaded = read_toml(path, Profile, document=LoadedProfile, what="profile")
    assert isinstance(loaded, LoadedProfile)
    return _identified(loaded)


def profile_from_text(path: str, text: str) -> LoadedProfile:
    """A profile given as text (a deployment's record, an imported launch), read as a file is."""
    loaded = parse_toml_text(LoadedProfile(path=path, text=text), Profile)
    assert isinstance(loaded, LoadedProfile)
    return _identified(loaded)


def _identified(loaded: LoadedProfile) -> LoadedProfile:
    loaded.name = Path(loaded.path).stem
    loaded.sha256 = hashlib.sha256(loaded.text.encode("utf-8")).hexdigest()
    return loaded
