"""Secrets recognised by what they are (sgdeploy.sglang.secrets): by name, inside a value (a URL's
password or secret parameter, a well-known token), refused at their line by SGD021 and by the unit
renderer whatever validation said, and redacted from text without touching anything else."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from sgdeploy.deploy.render import SecretInUnit, render_unit
from sgdeploy.profile.model import load_profile
from sgdeploy.profile.validate import InventoryContext, validate_loaded
from sgdeploy.sglang.catalog import load_catalog
from sgdeploy.sglang.secrets import (
    REDACTED,
    is_secret_name,
    launch_secrets,
    redact,
    redact_data,
    secret_in,
    shown,
)

ROOT = Path(__file__).resolve().parent.parent
HF = "hf_" + "Zq81kLm0PnB7rT2vWx9YcD4eFgH6jK"
OPENAI = "sk-proj-" + "4fJq9LmZ2xR7tV0bN8cW6yH3kP1sD5gA"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PASSWORD = "Tr0ub4dor-3"

PROFILE = """\
[deploy]
host = "a6000"
unit = "qwen"
python = "/opt/sglang/bin/python3"

[env]
{env}
[server]
model_path = "/models/Qwen3-8B"
{server}"""


def write(tmp_path: Path, server: str = "", env: str = "") -> Path:
    path = tmp_path / "p.toml"
    text = PROFILE.format(server=server, env=env)
    if server.startswith("model_path"):
        text = text.replace('model_path = "/models/Qwen3-8B"\n', "", 1)
    path.write_text(text)
    return path


SECRET_NAMES = [
    "api_key", "admin_api_key", "ssl_keyfile_password", "hf_token", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN", "DB_PASSWORD", "MY_SECRET", "SGLANG_API_KEY", "--api-key",
    "X-Amz-Signature", "access_token",
]
# what is no secret, whatever it sounds like
OTHER_NAMES = [
    "HF_TOKEN_PATH", "GOOGLE_APPLICATION_CREDENTIALS", "TOKENIZERS_PARALLELISM", "ssl_keyfile",
    "tokenizer_path", "bucket_time_to_first_token", "kt_max_deferred_experts_per_token",
    "max_total_tokens", "new-token", "SGLANG_DEEPEP_V2_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "HF_HOME",
]


@pytest.mark.parametrize("name", SECRET_NAMES + OTHER_NAMES)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name) is (name in SECRET_NAMES)


@pytest.mark.parametrize(("value", "what"), [
    (f"https://user:{PASSWORD}@models.example.com/qwen", "a password in its URL"),
    (f"redis://:{PASSWORD}@10.0.0.5:6379/0", "a password in its URL"),
    (f"https://cdn.example.com/m.tar?token={PASSWORD}", "the token parameter"),
    (f"https://x.blob.core.windows.net/m?sv=2024&sig={PASSWORD}", "the sig parameter"),
    (f"https://s3.example.com/m?X-Amz-Signature={PASSWORD}&X-Amz-Date=1",
     "the X-Amz-Signature parameter"),
    (f"https://api.example.com/v1?api_key={PASSWORD}", "the api_key parameter"),
    (HF, "Hugging Face token"), (f"Bearer {OPENAI}", "API key (sk-...)"), (GITHUB, "GitHub token"),
    ("AKIA" + "IOSFODNN7EXAMPLE", "AWS access key id"),
    (["/a", f"https://u:{PASSWORD}@h/b"], "a password in its URL"),
])
def test_secrets_inside_values(value: object, what: str) -> None:
    found = secret_in(value)
    assert found is not None and what in found
    assert PASSWORD not in found


@pytest.mark.parametrize("value", [
    "/models/Qwen3-8B", "Qwen/Qwen3-8B", "https://huggingface.co/Qwen/Qwen3-8B",
    "http://10.0.0.5:30002", "http://[fd00::1]:8000/v1", "s3://bucket/qwen?versionId=3",
    "file:///models/qwen", "ssh://git@github.com/a/b",
    "/models/sk-llama-3-8b-instruct-finetune", "/cache/hf_home", "sk-short", "tcp://127.0.0.1:5757",
    "https://example.com/search?q=token", "{\"max_tokens\": 5}",
])
def test_ordinary_values_are_no_secret(value: str) -> None:
    assert secret_in(value) is None
    assert redact(value) == value


@pytest.mark.parametrize(("text", "expected"), [
    ("server_args=ServerArgs(model_path='/m', api_key='sk-abc', admin_api_key=None, port=1)",
     "server_args=ServerArgs(model_path='/m', api_key='<redacted>', admin_api_key=None, port=1)"),
    ("{'model_path': '/m', 'api_key': 'sk-abc'}", "{'model_path': '/m', 'api_key': '<redacted>'}"),
    ("python -m sglang.launch_server --api-key sk-abc --port 1",
     "python -m sglang.launch_server --api-key <redacted> --port 1"),
    ('"--api-key" "sk-abc" \\', '"--api-key" "<redacted>" \\'),
    ("['--admin-api-key', 'x', '--port', '1']", "['--admin-api-key', '<redacted>', '--port', '1']"),
    ('Environment="HF_TOKEN=abc"', 'Environment="HF_TOKEN=<redacted>"'),
    ('api_key = "sk-abc123"', 'api_key = "<redacted>"'),
    ("api-key: 'sk-abc'", "api-key: '<redacted>'"),
    ('{"OPENAI_API_KEY": "k1"}', '{"OPENAI_API_KEY": "<redacted>"}'),
    (f"model_path = \"https://u:{PASSWORD}@h/m?token=t&rev=2\"",
     'model_path = "https://u:<redacted>@h/m?token=<redacted>&rev=2"'),
    (f"pulled {HF} once", "pulled <redacted> once"),
    # placeholders and references stay: they stand for a value
    ('"--api-key" "${api_key}"', '"--api-key" "${api_key}"'),
    ("`api-key: '<the --api-key value>'`", "`api-key: '<the --api-key value>'`"),
    ("write `api_key=VALUE` in it", "write `api_key=VALUE` in it"),
    # SGLang's own counters and prose
    ("#new-token: 5, #cached-token: 0, token usage: 0.43, first token: 0.2 s",
     "#new-token: 5, #cached-token: 0, token usage: 0.43, first token: 0.2 s"),
    ("bucket_time_to_first_token=[0.1, 0.5], max_total_tokens=4096",
     "bucket_time_to_first_token=[0.1, 0.5], max_total_tokens=4096"),
])
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected


def test_redacted_data_keeps_its_shape() -> None:
    document = {"api_key": "sk-abc", "worker_api_key": True, "n": 3,
                "env": {"HF_TOKEN": "x", "HF_HOME": "/h"}, "argv": ["--admin-api-key", "k", "-v"],
                "lines": [f"--api-key {PASSWORD}", "ok"], "url": f"https://u:{PASSWORD}@h/"}
    assert redact_data(document) == {
        "api_key": REDACTED, "worker_api_key": True, "n": 3,
        "env": {"HF_TOKEN": REDACTED, "HF_HOME": "/h"},
        "argv": ["--admin-api-key", REDACTED, "-v"], "lines": ["--api-key <redacted>", "ok"],
        "url": "https://u:<redacted>@h/"}
    assert shown("model_path", "/m") == "/m" and shown("api_key", 1234) == REDACTED


def test_nothing_sgdeploy_ships_is_taken_for_a_secret(tmp_path: Path) -> None:
    """The logs, profiles and units sgdeploy reads and writes pass through `redact` unchanged."""
    logs = sorted((ROOT / "tests" / "logs").glob("*.log"))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in logs]
    catalog = load_catalog("0.5.23")
    for path in sorted((ROOT / "profiles").glob("*.toml")):
        loaded = load_profile(path)
        texts.append(loaded.text)
        model = loaded.model
        if model is not None and not launch_secrets(model.server, model.env):
            with contextlib.suppress(KeyError):  # a profile for another release
                texts.append(render_unit(loaded, catalog, None).text)
    secrets = write(tmp_path)
    table = '[secrets]\nfile = "/etc/s.yaml"\nkeys = ["api_key"]\n'
    secrets.write_text(secrets.read_text() + table)
    for version in ("0.5.2", "0.5.23"):  # the launcher and ${api_key} of both mechanisms
        texts.append(render_unit(load_profile(secrets), load_catalog(version), None).text)
    assert len(texts) > 10
    for text in texts:
        for line in text.splitlines():
            assert redact(line) == line


@pytest.mark.parametrize(("server", "env", "field", "words"), [
    (f'model_path = "https://user:{PASSWORD}@models.example.com/qwen"\n', "", "server.model_path",
     "password in its URL"),
    (f'tokenizer_path = "https://h/t?token={PASSWORD}"\n', "", "server.tokenizer_path",
     "token parameter"),
    ("", f'HF_TOKEN = "{PASSWORD}"\n', "env.HF_TOKEN", "names a secret"),
    ("", f'MIRROR = "https://u:{PASSWORD}@mirror/"\n', "env.MIRROR", "password in its URL"),
    ("", f'HF_AUTH = "{HF}"\n', "env.HF_AUTH", "Hugging Face token"),
])
def test_sgd021_refuses_a_secret_at_its_line(tmp_path: Path, server: str, env: str, field: str,
                                             words: str) -> None:
    loaded = load_profile(write(tmp_path, server, env))
    result = validate_loaded(loaded, InventoryContext(str(tmp_path / "none.toml"), None), "0.5.23")
    found = [d for d in result.diagnostics if d.rule == "SGD021"]
    assert [d.field for d in found] == [field]
    assert found[0].line == loaded.line_of(field) and words in found[0].message
    assert "deploy.env_file" in found[0].hint or "[secrets]" in found[0].hint
    shown_text = " ".join(d.message + d.hint for d in result.diagnostics)
    assert PASSWORD not in shown_text and HF not in shown_text


def test_sgd021_hint_for_a_value_names_both_places(tmp_path: Path) -> None:
    server = f'tokenizer_path = "https://h/t?token={PASSWORD}"\n'
    loaded = load_profile(write(tmp_path, server))
    result = validate_loaded(loaded, InventoryContext(str(tmp_path / "none.toml"), None), "0.5.23")
    hint = next(d.hint for d in result.diagnostics if d.rule == "SGD021")
    assert "deploy.env_file" in hint and 'list "tokenizer_path" in [secrets] keys' in hint
    assert "`tokenizer-path: VALUE`" in hint


def test_ordinary_urls_pass_validation(tmp_path: Path) -> None:
    server = ('tokenizer_path = "https://huggingface.co/Qwen/Qwen3-8B"\n'
              'encoder_urls = ["http://10.0.0.5:30002"]\n')
    env = 'HF_ENDPOINT = "https://hf-mirror.example.com"\nHF_TOKEN_PATH = "/root/.cache/token"\n'
    loaded = load_profile(write(tmp_path, server, env))
    result = validate_loaded(loaded, InventoryContext(str(tmp_path / "none.toml"), None), "0.5.23")
    assert not [d for d in result.diagnostics if d.rule == "SGD021"]


@pytest.mark.parametrize(("server", "env"), [
    ('api_key = "sk-abc123"\n', ""),
    (f'model_path = "https://user:{PASSWORD}@h/m"\n', ""),
    ("", f'HF_TOKEN = "{PASSWORD}"\n'),
])
def test_the_renderer_writes_no_secret_whatever_validation_said(tmp_path: Path, server: str,
                                                                env: str) -> None:
    path = write(tmp_path, server, env)
    with pytest.raises(SecretInUnit) as raised:
        render_unit(load_profile(path), load_catalog("0.5.23"), None)
    message = str(raised.value)
    assert "SGD021" in message and "sk-abc123" not in message and PASSWORD not in message


@pytest.mark.parametrize("text", [
    "sk-" + "a-" * 65_000, "a-" * 65_000 + "://x", "ghp_" + "a_" * 60_000, "--" + "a-" * 60_000,
    "'" + "a_" * 60_000 + "':", "\n" + "a-" * 60_000 + ": x", "token=" * 20_000, "hf_" * 40_000,
])
def test_redaction_takes_linear_time(text: str) -> None:
    """A value as long as Linux passes (SGD029) is redacted at once, however it is built."""
    started = time.monotonic()
    redact(text)
    secret_in(text)
    assert time.monotonic() - started < 2
