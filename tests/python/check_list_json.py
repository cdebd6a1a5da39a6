#!/usr/bin/env python3
"""`cpbench list --json` against the binary's other outputs (issue 39 item 4).

Checks that the listing parses; that its flags are exactly the flags `cpbench run --help`,
`verify --help` and `list --help` show (a --no-X form counted under X), each under the commands
whose help shows it; that every option names its key, kind and help, and a choice its choices; that
its strategies, model presets and workloads are the ones `cpbench list` prints, in that order; that
its preset keys are the keys of the options; and that a report the binary writes carries the
listing's schema_version and a config block holding every report key the listing names.

usage: check_list_json.py CPBENCH_BIN OUT_DIR     exit 0 all checks pass, 1 otherwise
"""
import json
import os
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
KINDS = {"count", "integer", "seed", "number", "boolean", "text", "choice", "names", "ints", "size", "docs"}


def run(binary, *args):
    """stdout of a cpbench command that must exit 0 (retried when Open MPI's singleton start fails)."""
    for _ in range(3):
        proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
        if "error occurred in MPI_Init" not in proc.stdout + proc.stderr:
            break
    if proc.returncode != 0:
        raise SystemExit(f"check_list_json: cpbench {' '.join(args)} exited {proc.returncode}: {proc.stderr[-400:]}")
    return proc.stdout


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    listing = json.loads(run(binary, "list", "--json"))
    options = listing["options"]
    by_flag = {o["flag"]: o for o in options}
    check(len(by_flag) == len(options), "a flag is listed twice")
    negated = {o["negated"]: o["flag"] for o in options if "negated" in o}

    # Every flag --help shows is listed, under each command whose help shows it, and no other.
    for command in (c["name"] for c in listing["commands"]):
        shown = set(FLAG.findall(run(binary, command, "--help")))
        # Help text also mentions flags in prose ("--seed + i", "--cached KV cache"): those count
        # when they are real flags, which is what the listing must hold anyway.
        for flag in sorted(shown):
            base = negated.get(flag, flag)
            check(base in by_flag, f"{command} --help shows {flag}, which list --json lacks")
        takes = {o["flag"] for o in options if command in o["commands"]}
        for flag in sorted(takes):
            check(flag in shown, f"list --json says {command} takes {flag}, which {command} --help does not show")

    for o in options:
        where = o["flag"]
        check(o["kind"] in KINDS, f"{where}: unknown kind {o['kind']!r}")
        check(isinstance(o["help"], str) and o["help"], f"{where}: no help")
        check(o["commands"] and set(o["commands"]) <= {"run", "verify", "list"}, f"{where}: commands {o['commands']}")
        if o["key"] is not None:
            check(o["flag"] == "--" + o["key"].replace("_", "-"), f"{where}: key {o['key']} is not the flag's")
        if o["kind"] == "choice":
            check(o.get("choices") and o["value"] == "|".join(o["choices"]), f"{where}: choices {o.get('choices')}")
        if "default" in o and o["kind"] == "choice":
            check(o["default"] in o["choices"], f"{where}: default {o['default']!r} is no choice")
        if "default" in o and "min" in o and isinstance(o["default"], int):
            check(o["default"] >= o["min"], f"{where}: default {o['default']} below min {o['min']}")
    check(listing["preset_keys"] == [o["key"] for o in options if o["key"] is not None],
          "preset_keys differ from the options' keys")

    # The same strategies, presets and workloads as the text listing, in its order.
    text = run(binary, "list")
    names = [s["name"] for s in listing["strategies"]]
    in_text = re.findall(r"^  (\S+) ", text.split("\nModel presets")[0], re.M)
    check(names == in_text, f"strategies {names} != cpbench list's {in_text}")
    models = [m["name"] for m in listing["models"]]
    check(models == re.findall(r"^  (\S+) +D=", text, re.M), f"models {models} differ from cpbench list's")
    loads = [w["name"] for w in listing["workloads"]]
    check(loads == re.findall(r"^  (\S+) +(?:sampled:|\d+ documents:)", text, re.M),
          f"workloads {loads} differ from cpbench list's")
    for s in listing["strategies"]:
        check(s["summary"].split("\n")[0] in text and s["constraints"] in text, f"{s['name']}: text differs")
        check({"train", "prefill"} <= set(s["passes"]) and s["balance"][0] == "none" and s["ring_pass"][0] == "kv",
              f"{s['name']}: passes {s['passes']} balance {s['balance']} ring_pass {s['ring_pass']}")
        # --mla-travel: every strategy runs MLA's expanded heads; the latent where a ring or a Ulysses level moves it.
        latent = s["name"] in ("ring", "ring-zigzag", "ring-striped", "double-ring", "ulysses", "usp")
        check(s["mla_travel"] == (["expanded", "latent"] if latent else ["expanded"]),
              f"{s['name']}: mla_travel {s['mla_travel']}")
    check({m["name"] for m in listing["models"] if m["attention"] == "mla"} == {"deepseek-v3", "deepseek-v2-lite", "tiny-mla"},
          f"MLA presets {[m['name'] for m in listing['models'] if m['attention'] == 'mla']}")

    # A report written by this binary: its schema_version is the listing's, and every option the
    # listing says is reported under a key is in its config block.
    report = os.path.join(out_dir, "list_json_report.json")
    if os.path.exists(report):
        os.remove(report)
    run(binary, "run", "--model", "tiny", "--seq", "64", "--strategies", "single", "--warmup", "0", "--iters", "1",
        "--no-progress", "--out", report)
    with open(report) as f:
        rep = json.load(f)
    check(rep["schema_version"] == listing["schema_version"],
          f"report schema_version {rep['schema_version']} != list --json's {listing['schema_version']}")
    for o in options:
        if o["report_key"] is not None:
            check(o["report_key"] in rep["config"], f"{o['flag']}: report key {o['report_key']} not in config")

    for f in failures:
        print("FAIL", f)
    print(f"check_list_json: {len(options)} flags, {len(names)} strategies, {len(models)} models, "
          f"schema {listing['schema_version']}; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
