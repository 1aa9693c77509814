#!/usr/bin/env python3
"""How often `sgdeploy validate` agrees with SGLang itself, per version and stage.

For every case of the corpus (bench/fidelity/corpus.py) it asks SGLang (../shared/oracle: its
real parser and resolution on simulated GPUs, verdicts cached under .cache/fidelity/) and
sgdeploy (`validate_loaded` in this process, on a profile and an inventory host made from the
case), then counts:

- argparse refusals caught: SGLang's parser refuses, sgdeploy reports an error;
- post-parse refusals caught: resolution or check_server_args refuses, sgdeploy reports an error;
- false alarms: SGLang accepts, sgdeploy reports an error. Errors only from policy rules (stricter
  than SGLang on purpose, `POLICY_RULES`) are counted apart, and so are launches SGLang accepts
  that its startup is predicted to kill (more ranks than GPUs, heads not divisible by tp);

and lists the misses grouped by the check site that raised (the site key of the check-site
inventory, with what data/check_sites.toml maps it to), largest first, and the false alarms by
rule. docs/fidelity.md has the numbers.

    .venv/bin/python bench/fidelity/run.py                       # 0.5.11 and 0.5.23, seed 0
    .venv/bin/python bench/fidelity/run.py --version 0.5.23 --topic speculative --misses 40
    .venv/bin/python bench/fidelity/run.py --seed 1              # a held-out corpus
    .venv/bin/python bench/fidelity/run.py --json out.json       # machine-readable, all of it
    .venv/bin/python bench/fidelity/run.py --show 0.5.23/flag:tp_size/812   # one case in full
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.fidelity import corpus, oracle  # noqa: E402
from sgdeploy.core.tomlfile import parse_toml_text  # noqa: E402
from sgdeploy.profile.model import LoadedProfile, Profile  # noqa: E402
from sgdeploy.profile.validate import InventoryContext, validate_loaded  # noqa: E402
from sgdeploy.sglang.checksites import decide, refusal_sites  # noqa: E402
from sgdeploy.sglang.rules import RULES  # noqa: E402

VERSIONS = ("0.5.11", "0.5.23")
# Rules stricter than SGLang on purpose: SGLang accepts the launch, then it fails or misbehaves
# later (docs/rules.md says so in each entry). Their errors on an accepted launch are no false alarm.
POLICY_RULES = {
    "SGD016": "no model_path: sgdeploy requires it in the profile (SGLang reads it from --config)",
    "SGD020": "values a systemd unit cannot carry",
    "SGD021": "a secret in the profile instead of deploy.env_file",
    "SGD101": "more GPUs per node than the host has: SGLang fails when its workers start",
    "SGD106": "node_rank >= nnodes: the node never joins a valid group and serves no HTTP",
    "SGD105": "nnodes > 1 without dist_init_addr: every node waits on its own loopback",
    "SGD537": "a port outside 1-65535: 0 binds a random port, others fail when the server binds",
    "SGD024": "a relative path for a file-only option without deploy.working_directory: the unit runs in /",
    "SGD402": "FlashInfer all-reduce fusion below SM90 (0.5.2x): SGLang raises when the model runner starts",
}
# Rules that are a policy for some fields only (their other fields mirror a check of SGLang): SGD506's
# sizes SGLang does not check itself fail when the workers start (docs/rules.md, SGD506).
POLICY_FIELDS = {
    "SGD506": {"server.tp_size", "server.pp_size", "server.dp_size", "server.nnodes", "server.page_size"},
}
# The words of SGD580's "not checked" note that name the check of each rule reading config.json:
# a refusal one of these rules catches with the config is "reported as not checked" without it only
# when the note names that check (`--config-split`).
UNCHECKED_WORDS = {
    "SGD581": "context_length", "SGD582": "attention heads", "SGD583": "DSA", "SGD584": "Mamba state",
    "SGD585": "quantization", "SGD586": "quantization", "SGD593": "quantization", "SGD117": "quantization",
    "SGD558": "MLA", "SGD587": "sparse-attention", "SGD592": "DeepSeek",
}
STARTUP_CHECKS = ("gpu_count", "attention_heads_divisible", "mem_fraction_static_range")
TOPIC_WORDS = (
    ("speculative", ("speculative", "eagle", "ngram", "dflash", "spec_", "draft", "mtp")),
    ("disaggregation", ("disagg", "encoder", "pdmux", "pd-multiplexing", "pd_", "language_only", "bootstrap")),
    ("cuda_graphs", ("cuda_graph", "piecewise", "graph", "torch_compile")),
    ("lora", ("lora",)),
    ("memory", ("cache", "memory", "mamba", "hicache", "swa", "kv_", "page_size", "radix", "offload")),
    ("parallelism", ("parallel", "dp_", "moe", "eplb", "ep_", "pipeline", "tp_", "expert", "dispatch", "a2a",
                     "cp_", "context_parallel", "nnodes", "multi_node", "dcp")),
    ("hardware", ("attention_backend", "sm", "gpu", "device", "hardware", "blackwell", "hopper", "fp8", "fp4",
                  "quant", "backend", "nvls", "allreduce", "deterministic", "mla")),
    ("serving", ("ssl", "metrics", "api", "serving", "tokenizer", "grpc", "parser", "schedule", "priority", "port")),
)


# --------------------------------------------------------------------------- profiles
def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def host_name(case: dict[str, Any]) -> str:
    return f"{case['gpu'].lower()}-x{case['gpu_count']}"


def inventory_text() -> str:
    lines = []
    for gpu, (name, capability, memory) in corpus.GPUS.items():
        for count in corpus.COUNTS:
            lines += [f"[hosts.{gpu.lower()}-x{count}]", 'address = "10.0.0.1"', f"gpu = {json.dumps(name)}",
                      f'compute_capability = "{capability}"', f"gpu_count = {count}", f"gpu_memory_gib = {memory}",
                      ""]
    return "\n".join(lines)


def architecture(model: str, models_dir: Path | None = None) -> str | None:
    config = (models_dir or oracle.ORACLE_DIR / "models") / model / "config.json"
    try:
        architectures = json.loads(config.read_text(encoding="utf-8")).get("architectures") or [None]
    except OSError:
        return None
    value = architectures[0]
    return value if isinstance(value, str) else None


def profile_text(case: dict[str, Any], model_config: bool, models_dir: Path | None = None) -> str:
    """The case as a profile; `models_dir` holds the model folders (default: the oracle's)."""
    models = models_dir or oracle.ORACLE_DIR / "models"
    deploy = {"host": host_name(case), "unit": "sglang", "python": "/usr/bin/python3"}
    arch = architecture(case["model"], models)
    if arch:
        deploy["model_architecture"] = arch
    # The model's config.json, where sgdeploy can read one offline (deploy.model_config).
    deploy_fields = Profile.model_fields["deploy"].annotation.model_fields  # type: ignore[union-attr]
    if model_config and any(f.alias == "model_config" for f in deploy_fields.values()):
        deploy["model_config"] = str(models / case["model"])
    server = {"model_path": f"/models/{case['model']}", **case["server"]}
    lines = ["[deploy]", *(f"{k} = {toml_value(v)}" for k, v in deploy.items()), "", "[env]",
             *(f"{k} = {toml_value(v)}" for k, v in case.get("env", {}).items()), "", "[server]",
             *(f"{k} = {toml_value(v)}" for k, v in server.items())]
    return "\n".join(lines) + "\n"


def sgdeploy_verdict(case: dict[str, Any], inventory: InventoryContext, model_config: bool,
                     models_dir: Path | None = None) -> dict[str, Any]:
    loaded = LoadedProfile(path=f"{case['id']}.toml")
    loaded.text = profile_text(case, model_config, models_dir)
    parse_toml_text(loaded, Profile)
    result = validate_loaded(loaded, inventory, case["version"])
    errors = [d for d in result.diagnostics if d.is_error]
    not_policy = {d.rule for d in errors if d.rule not in POLICY_RULES and d.field not in POLICY_FIELDS.get(d.rule, ())}
    return {"errors": sorted({d.rule for d in errors}),
            # rules whose every error here is a policy (POLICY_RULES, or a field of POLICY_FIELDS)
            "policy": sorted({d.rule for d in errors} - not_policy),
            "messages": [f"{d.rule} {d.field}: {d.message}" for d in errors],
            "warnings": sorted({d.rule for d in result.diagnostics if d.severity.value == "warning"}),
            # What sgdeploy says it could not check (SGD580: no config.json of the model).
            "unchecked": [d.message for d in result.diagnostics if d.rule == "SGD580"]}


# --------------------------------------------------------------------------- sites and topics
class Sites:
    """SGLang's refusal sites of one version, by where they raise.

    A traceback names the line that raised, which for a multi-line `assert (cond), msg` is the
    condition's, below the site's own line: the site is the nearest one at or above it in the
    same function.
    """

    def __init__(self, version: str) -> None:
        self.by_function: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
        for site in refusal_sites(version):
            name = site["function"].rsplit(".", 1)[-1]
            self.by_function[(site["file"], name)].append((site["line"], site["key"]))
        for lines in self.by_function.values():
            lines.sort()

    def key(self, raised_at: str | None) -> str:
        if not raised_at:
            return "?"
        path, _, rest = raised_at.partition(":")
        line, _, function = rest.partition(":")
        above = [key for number, key in self.by_function.get((path, function), [])
                 if line.isdigit() and number <= int(line)]
        if above:
            return above[-1]
        return f"{function} ({path.rsplit('/', 1)[-1]}:{line}, not in the inventory)"


def topic_of_rule(rule_id: str) -> str:
    try:
        return RULES.by_id(rule_id).check.__module__.rsplit(".", 1)[-1]
    except StopIteration:
        return "structural"


def decision_words(key: str) -> str:
    decision = decide(key)
    if decision is None:
        return "unmapped"
    return " ".join(decision.rules) if decision.rules else decision.category


def topic_of_site(key: str, case: dict[str, Any] | None = None) -> str:
    decision = decide(key)
    if decision is not None and decision.rules:
        return topic_of_rule(decision.rules[0])
    text = key.lower()
    for topic, words in TOPIC_WORDS:
        if any(re.search(rf"(^|[^a-z]){re.escape(w)}", text) for w in words):
            return topic
    return "other"


# --------------------------------------------------------------------------- counting
@dataclass
class Tally:
    version: str
    cases: int = 0
    undecided: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    misses: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    false_alarms: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    policy: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    refused_sites: Counter[str] = field(default_factory=Counter)
    details: dict[str, dict[str, Any]] = field(default_factory=dict)

    def rate(self, caught: str, total: str) -> float | None:
        return self.counts[caught] / self.counts[total] if self.counts[total] else None

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.version, "cases": self.cases, "oracle_undecided": self.undecided,
            "argparse_refused": self.counts["argparse"], "argparse_caught": self.counts["argparse_caught"],
            "argparse_rate": self.rate("argparse_caught", "argparse"),
            "post_parse_refused": self.counts["post"], "post_parse_caught": self.counts["post_caught"],
            "post_parse_rate": self.rate("post_caught", "post"),
            "post_parse_missed_not_checked": self.counts["post_missed_unchecked"],
            "post_parse_host_sites": self.counts["post_host"],
            "post_parse_host_sites_caught": self.counts["post_host_caught"],
            "post_parse_rate_offline_sites": ((self.counts["post_caught"] - self.counts["post_host_caught"])
                                              / (self.counts["post"] - self.counts["post_host"])
                                              if self.counts["post"] > self.counts["post_host"] else None),
            "accepted": self.counts["accepted"], "false_alarms": self.counts["false_alarm"],
            "false_alarm_rate": self.rate("false_alarm", "accepted"),
            "policy_errors": self.counts["policy"],
            "startup_predicted_failures": self.counts["startup"],
            "startup_predicted_failures_refused": self.counts["startup_refused"],
        }


def predicted_startup_failure(verdict: dict[str, Any]) -> bool:
    return any(p.get("ok") is False and p.get("check") in STARTUP_CHECKS for p in verdict.get("startup_predictions")
               or [])


def classify(tally: Tally, sites: Sites, case: dict[str, Any], verdict: dict[str, Any],
             ours: dict[str, Any]) -> None:
    tally.cases += 1
    refused_by_us = bool(ours["errors"])
    tally.details[case["id"]] = {"case": case, "sglang": verdict, "sgdeploy": ours}
    if verdict.get("accepted") is None:
        tally.undecided += 1
        return
    if verdict["accepted"] is False:
        stage = "argparse" if verdict.get("stage") == "parse" else "post"
        tally.counts[stage] += 1
        key = "argparse" if stage == "argparse" else sites.key(verdict.get("raised_at"))
        tally.refused_sites[key] += 1
        # Sites that need the live host (files, packages) or code the inventory does not read.
        on_host = stage == "post" and decision_words(key) in ("host", "unmapped")
        tally.counts["post_host"] += on_host
        if refused_by_us:
            tally.counts[f"{stage}_caught"] += 1
            tally.counts["post_host_caught"] += on_host
        else:
            tally.misses[key].append(case["id"])
            tally.counts[f"{stage}_missed_unchecked"] += bool(ours.get("unchecked"))
        return
    if predicted_startup_failure(verdict):
        tally.counts["startup"] += 1
        tally.counts["startup_refused"] += refused_by_us
        return
    tally.counts["accepted"] += 1
    if not refused_by_us:
        return
    if all(rule in POLICY_RULES or rule in ours.get("policy", ()) for rule in ours["errors"]):
        tally.counts["policy"] += 1
        for rule in ours["errors"]:
            tally.policy[rule].append(case["id"])
        return
    tally.counts["false_alarm"] += 1
    for rule in ours["errors"]:
        if rule not in POLICY_RULES and rule not in ours.get("policy", ()):
            tally.false_alarms[rule].append(case["id"])


def measure(version: str, seed: int, run_missing: bool, jobs: int, model_config: bool) -> Tally:
    cases = corpus.build(version, seed)
    answers = oracle.verdicts(version, cases, jobs=jobs, run_missing=run_missing)
    tally = Tally(version)
    sites = Sites(version)
    with tempfile.TemporaryDirectory(prefix="sgd-fidelity-") as tmp:
        path = Path(tmp) / "inventory.toml"
        path.write_text(inventory_text(), encoding="utf-8")
        inventory = InventoryContext.load(path)
        for case in cases:
            if case["id"] in answers:
                classify(tally, sites, case, answers[case["id"]], sgdeploy_verdict(case, inventory, model_config))
    return tally


# --------------------------------------------------------------------------- reports
def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def misses_table(tally: Tally, topic: str | None) -> list[dict[str, Any]]:
    rows = []
    for key, ids in tally.misses.items():
        example = tally.details[ids[0]]
        site_topic = "flags" if key == "argparse" else topic_of_site(key)
        if topic and site_topic != topic:
            continue
        rows.append({"site": key, "missed": len(ids), "refused": tally.refused_sites[key],
                     "mapped_to": "-" if key == "argparse" else decision_words(key), "topic": site_topic,
                     "example": ids[0], "example_argv": example["case"]["argv"],
                     "example_error": (example["sglang"].get("error") or "")[:160]})
    return sorted(rows, key=lambda r: (-r["missed"], r["site"]))


def rules_table(found: dict[str, list[str]], tally: Tally) -> list[dict[str, Any]]:
    rows = []
    for rule, ids in sorted(found.items(), key=lambda item: -len(item[1])):
        example = tally.details[ids[0]]
        rows.append({"rule": rule, "cases": len(ids), "topic": topic_of_rule(rule), "example": ids[0],
                     "example_argv": example["case"]["argv"],
                     "message": next((m for m in example["sgdeploy"]["messages"] if m.startswith(rule)), "")[:200]})
    return rows


def print_report(tally: Tally, topic: str | None, limit: int) -> None:
    s = tally.summary()
    print(f"## SGLang {tally.version}: {s['cases']} cases ({s['oracle_undecided']} the oracle could not decide)\n")
    print("| stage | refused by SGLang | caught by sgdeploy | caught |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| argparse | {s['argparse_refused']} | {s['argparse_caught']} | {percent(s['argparse_rate'])} |")
    print(f"| after parsing | {s['post_parse_refused']} | {s['post_parse_caught']} | "
          f"{percent(s['post_parse_rate'])} |")
    print(f"\nafter parsing, missed but reported as not checked (SGD580): {s['post_parse_missed_not_checked']}")
    print(f"\nafter parsing, at sites mapped host: or outside the inventory (model config loading, files and "
          f"packages on the host): {s['post_parse_host_sites']} refused, {s['post_parse_host_sites_caught']} caught; "
          f"at the other sites {percent(s['post_parse_rate_offline_sites'])} caught")
    print(f"\naccepted by SGLang: {s['accepted']}; refused by sgdeploy: {s['false_alarms']} false alarms "
          f"({percent(s['false_alarm_rate'])}), {s['policy_errors']} by policy rules only; startup predicted "
          f"to fail: {s['startup_predicted_failures']} (refused by sgdeploy: "
          f"{s['startup_predicted_failures_refused']})\n")
    rows = misses_table(tally, topic)
    print(f"### Misses by site{f' (topic {topic})' if topic else ''}: {sum(r['missed'] for r in rows)} in "
          f"{len(rows)} sites\n")
    for row in rows[:limit]:
        print(f"- {row['missed']}/{row['refused']} [{row['topic']}; {row['mapped_to']}] {row['site'][:150]}\n"
              f"    e.g. {row['example']}: {' '.join(row['example_argv'])[:200]}\n"
              f"    SGLang: {row['example_error']}")
    alarms = rules_table(tally.false_alarms, tally)
    print(f"\n### False alarms by rule: {sum(r['cases'] for r in alarms)} errors\n")
    for row in alarms[:limit]:
        if topic and row["topic"] != topic:
            continue
        print(f"- {row['rule']} ({row['topic']}) x{row['cases']}: e.g. {row['example']}: "
              f"{' '.join(row['example_argv'])[:160]}\n    {row['message']}")
    print()


def config_split(version: str, seed: int, jobs: int) -> dict[str, Any]:
    """Post-parse refusals without config.json, each missed one put in a class: missed with the config too
    (the host's or code outside the inventory), config-dependent and named by SGD580's note as not checked,
    or config-dependent and silent (architecture-only checks belong here until they run from
    deploy.model_architecture; the target is none)."""
    with_config = measure(version, seed, False, jobs, True)
    without = measure(version, seed, False, jobs, False)
    missed_with = {i for ids in with_config.misses.values() for i in ids}
    classes: Counter[str] = Counter()
    silent = []
    for key, ids in without.misses.items():
        for case_id in ids:
            if key == "argparse":
                classes["argparse"] += 1
            elif case_id in missed_with:
                classes["missed with the config too"] += 1
            else:
                rules = with_config.details[case_id]["sgdeploy"]["errors"]
                note = " ".join(without.details[case_id]["sgdeploy"].get("unchecked") or [])
                if any(UNCHECKED_WORDS.get(rule, "\0") in note for rule in rules):
                    classes["config-dependent, reported as not checked"] += 1
                else:
                    classes["config-dependent, silent"] += 1
                    silent.append({"case": case_id, "site": key, "caught_with_config_by": rules})
    summary = without.summary()
    return {"version": version, "seed": seed, "post_parse_refused": summary["post_parse_refused"],
            "post_parse_caught": summary["post_parse_caught"], "false_alarms": summary["false_alarms"],
            "accepted": summary["accepted"], "missed": dict(classes), "silent": silent}


def show(case_id: str, seed: int, model_config: bool) -> int:
    version = case_id.split("/", 1)[0]
    cases = [c for c in corpus.build(version, seed) if c["id"] == case_id]
    if not cases:
        print(f"no case {case_id} in the corpus of {version} (seed {seed})", file=sys.stderr)
        return 2
    case = cases[0]
    answer = oracle.verdicts(version, cases, run_missing=True).get(case_id)
    with tempfile.TemporaryDirectory(prefix="sgd-fidelity-") as tmp:
        path = Path(tmp) / "inventory.toml"
        path.write_text(inventory_text(), encoding="utf-8")
        ours = sgdeploy_verdict(case, InventoryContext.load(path), model_config)
    print(json.dumps({"case": case, "profile": profile_text(case, model_config), "sglang": answer,
                      "sgdeploy": ours}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="append", choices=VERSIONS, help="repeatable (default: both)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed: 0 measured, other held-out")
    parser.add_argument("--topic", help="list only the misses and false alarms of this topic")
    parser.add_argument("--misses", type=int, default=25, metavar="N", help="sites and rules listed (default 25)")
    parser.add_argument("--cached", action="store_true", help="only cases with a cached verdict; never run SGLang")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-model-config", action="store_true",
                        help="do not give sgdeploy the model's config.json (deploy.model_config)")
    parser.add_argument("--json", metavar="FILE", help="write every count, miss and false alarm as JSON")
    parser.add_argument("--show", metavar="CASE_ID", help="print one case: argv, profile, both verdicts")
    parser.add_argument("--config-split", action="store_true",
                        help="without config.json: each missed refusal as not checked (SGD580), silent or host-side")
    args = parser.parse_args(argv)
    model_config = not args.no_model_config
    if args.show:
        return show(args.show, args.seed, model_config)
    if args.config_split:
        for version in args.version or VERSIONS:
            print(json.dumps(config_split(version, args.seed, args.jobs), indent=1))
        return 0
    report: dict[str, Any] = {"seed": args.seed, "versions": {}}
    for version in args.version or VERSIONS:
        began = time.perf_counter()
        tally = measure(version, args.seed, not args.cached, args.jobs, model_config)
        print_report(tally, args.topic, args.misses)
        print(f"({time.perf_counter() - began:.1f} s)\n")
        report["versions"][version] = {
            "summary": tally.summary(), "misses": misses_table(tally, None),
            "false_alarms": rules_table(tally.false_alarms, tally), "policy": rules_table(tally.policy, tally),
            "false_alarm_cases": sorted({i for ids in tally.false_alarms.values() for i in ids}),
        }
    report["policy_rules"] = POLICY_RULES
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
