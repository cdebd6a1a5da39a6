#!/usr/bin/env python3
"""Fuzzed bad input for cpbench (issue 14 item 4; docs/RELIABILITY.md).

A seeded generator makes a few hundred invalid command lines and run presets (wrong types,
negative and zero sizes, sizes past 32 and 64 bits, unknown keys and flags, nested values where
scalars belong, non-UTF-8 bytes, duplicate flags and keys, empty lists, contradictions) and a few
edge cases that are valid (run as --dry-run, which must exit 0). Each invalid case must:
  - end within TIMEOUT seconds (no hang),
  - exit with code 2 (DESIGN: bad input), not by a signal,
  - print "cpbench: error" naming the field and the offending value (on every rank under mpirun),
  - leave no report at its --out path.
Most cases run one rank without mpirun (fast); a subset runs under `mpirun -np 2` and `-np 4`.
The flags, their preset keys, kinds, choices and lower bounds are read from `cpbench list --json`
(bench/options.cpp's table), so every flag the binary takes is fuzzed; the bad values per kind
and the out-of-range values per key are written here.

usage: fuzz_cli.py CPBENCH_BIN [--seed S] [--jobs J] [--mpirun MPIRUN] [--limit N] [--out-dir DIR]
Prints one line per failing case and a summary (cases, max and mean time to exit).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

RETRIES = []  # cases run again because MPI_Init itself failed (environment, not cpbench)
TIMEOUT = 60  # seconds; a case past it is a hang (typical exit: well under a second per rank)
NONUTF8 = b"\xff\xfe\xc3(".decode("utf-8", "surrogateescape")  # passed to argv as raw bytes
NONUTF8_SHOWN = "\\xff\\xfe\\xc3("  # how cpbench prints it

# The options come from the binary (`cpbench list --json`, bench/options.cpp's one table), so a
# new flag is fuzzed without an edit here; load_options fills these.
OPTIONS = {}     # flag -> (preset key, kind), flags that take a value
BOOL_FLAGS = {}  # flag -> preset key, boolean flags
NEGATED = {}     # boolean flag -> its --no- form, where it has one
CHOICES = {}     # flag -> its choices (kind choice)
MINIMUM = {}     # preset key -> the smallest value its flag accepts (integer kinds that state one)

# Per option, NONUTF8 and this many of its kind's bad texts (a seeded sample), and this many wrong
# preset values per key: 2 and 3 (were 3 and 4 when a copy held 33 value flags, not 44) keep the
# run near its old length (about 100 s on 2 busy cores) as flags are added.
TEXTS_PER_OPTION = 2
PRESET_VALUES_PER_KEY = 3

# Text that no kind but text accepts, per kind.
BAD_TEXT = {
    "count": ["abc", "1.5", "", "0x10", "1e3", " 5", "5 ", "+5", "2147483648", "-2147483649",
              "99999999999999999999", "4294967296", NONUTF8],
    "integer": ["abc", "2.0", "", "0x10", "1e3", "9223372036854775808", "-9223372036854775809",
                "99999999999999999999", NONUTF8],
    "seed": ["-1", "abc", "", "18446744073709551616", "1.0", NONUTF8],
    "number": ["abc", "-1", "nan", "inf", "1e999", "", "-0.5", NONUTF8],
    "choice": ["bogus", "", "ALL", "Train", NONUTF8],
    "names": ["", ",", "ring,,ulysses", "nope", "ring,nope", NONUTF8],
    "ints": ["", "1,,2", "abc", "0", "-5", "1.5", "64,abc", "99999999999999999999", ",64", NONUTF8],
    "size": ["-1", "1.5GiB", "5XiB", "GiB", "9999999999TiB", "", "1 GiB", "8EiB", "1gib", NONUTF8],
    "docs": ["1,2", "equal:0", "equal:3", "random:5:3", "random:0:4", "random:a:b", "nosuchworkload", "0,64",
             "", "64,", "random:1", "equal:", "equal:-2", "random:100:200", NONUTF8],
    "text": [NONUTF8],
}
# Values that parse but are out of the option's range (finalize_config or the strategies).
SEMANTIC = {
    "batch": ["0", "-1"], "heads": ["0", "-4", "65537", "2147483647"], "kv_heads": ["0", "-1", "3"],
    "head_dim": ["0", "-8", "300"], "dim": ["0", "-1", "16777217"], "window": ["-1", "-9223372036854775808"], "iters": ["0", "-1"], "warmup": ["-1"],
    "threads": ["-1"], "ulysses": ["-1"], "ring": ["-2"], "inner_ring": ["-1"], "ranks_per_node": ["-1", "3"],
    "min_verified": ["-1", "2"], "numerics": ["-1", "2"], "world_size": ["-1", "8"], "timeout": ["-1", "-600"], "model": ["gpt5", ""],
    "layers": ["0", "-3"], "cached": ["-1"], "cp_cap": ["-3"], "decode_steps": ["-1"],
}


def list_json(binary):
    """`cpbench list --json`, parsed; retried like a case when Open MPI's singleton start fails."""
    for _ in range(3):
        proc = subprocess.run([binary, "list", "--json"], capture_output=True, timeout=TIMEOUT)
        if b"error occurred in MPI_Init" not in proc.stdout + proc.stderr:
            break
    if proc.returncode != 0:
        raise SystemExit(f"fuzz_cli: {binary} list --json exited {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return json.loads(proc.stdout)


def load_options(listing):
    """Fills the tables above from the listing's options that `run` takes and a preset can set
    (--help, --config and list's --json have no preset key: the cases below cover those)."""
    for o in listing["options"]:
        if o["key"] is None or "run" not in o["commands"]:
            continue
        if o["kind"] == "boolean":
            BOOL_FLAGS[o["flag"]] = o["key"]
            if "negated" in o:
                NEGATED[o["flag"]] = o["negated"]
            continue
        OPTIONS[o["flag"]] = (o["key"], o["kind"])
        if o["kind"] == "choice":
            CHOICES[o["flag"]] = o["choices"]
        if "min" in o:
            MINIMUM[o["key"]] = o["min"]
    unknown = sorted({kind for _, kind in OPTIONS.values()} - set(BAD_TEXT))
    if unknown:  # a kind added to bench/options.h needs its bad values here, or it goes unfuzzed
        raise SystemExit(f"fuzz_cli: no bad values for option kind(s) {unknown}: add them to BAD_TEXT")


class Case:
    def __init__(self, name, argv, field, value, np=1, preset=None, expect_ok=False, extra=None):
        self.name, self.argv, self.field, self.value = name, argv, field, value
        self.np, self.preset, self.expect_ok, self.extra = np, preset, expect_ok, extra or []


def base_args(without=None):
    """A small valid run, less the flag under test (so that it is given once)."""
    args = ["--model", "tiny", "--seq", "64", "--iters", "1", "--warmup", "0"]
    if without in args:
        i = args.index(without)
        del args[i:i + 2]
    return args + ([] if without in ("--progress",) else ["--no-progress"])


def field_names(key_or_flag):
    """Ways a message may name a field: preset key, flag, or both."""
    if key_or_flag.startswith("--"):
        key = OPTIONS.get(key_or_flag, (key_or_flag[2:].replace("-", "_"),))[0]
        return [key_or_flag, key]
    return [key_or_flag, "--" + key_or_flag.replace("_", "-")]


def generate(rng):
    cases = []
    # 1. every option with text of the wrong form (a seeded sample), and values out of range
    shown_item = {"ring,nope": "nope", "64,abc": "abc"}  # the message names the bad item
    for flag, (key, kind) in OPTIONS.items():
        texts = BAD_TEXT.get(kind, [])
        texts = [NONUTF8] + rng.sample([t for t in texts if t != NONUTF8], min(TEXTS_PER_OPTION, len(texts) - 1))
        texts += SEMANTIC.get(key, [])
        # From what the binary states: one below the stated minimum, and a choice in the wrong case
        # (choices are exact), so that a flag added later is refused on its own terms too.
        derived = [str(MINIMUM[key] - 1)] if key in MINIMUM else []
        derived += [CHOICES[flag][0].upper()] if flag in CHOICES else []
        for text in texts + [t for t in derived if t not in texts]:
            shown = shown_item.get(text, text.replace(NONUTF8, NONUTF8_SHOWN))
            cases.append(Case(f"cli-{key}-{len(cases)}", base_args(flag) + [flag, text], flag, shown))
    # 2. duplicate flags (the same or the negated form)
    for flag in rng.sample(sorted(OPTIONS), 12):
        key, kind = OPTIONS[flag]
        v = {"count": "2", "integer": "2", "seed": "1", "number": "1", "choice": CHOICES.get(flag, [""])[0],
             "names": "ring", "ints": "64", "size": "1GiB", "docs": "equal:2", "text": "tiny"}[kind]
        cases.append(Case(f"cli-dup-{key}", base_args(flag) + [flag, v, flag, v], flag, "2 times"))
    for flag in BOOL_FLAGS:
        neg = NEGATED.get(flag, flag)
        cases.append(Case(f"cli-dup-{flag[2:]}", base_args(flag) + [flag, neg], flag, "2 times"))
    # 3. unknown flags, missing values, commands
    for bad in ["--sequence", "--kv_heads", "-x", "--seqs", "--Causal", "--no-dry-run", "--" + NONUTF8]:
        cases.append(Case(f"cli-unknown-{len(cases)}", base_args() + [bad, "5"], bad.replace(NONUTF8, NONUTF8_SHOWN),
                          "not expected"))
    for flag in rng.sample(sorted(OPTIONS), 8):
        cases.append(Case(f"cli-missing-{flag[2:]}", base_args() + [flag], flag, "missing"))
    cases.append(Case("cli-no-command", None, "command", "required"))
    cases.append(Case("cli-bad-command", ["runn"], "runn", "unknown command"))
    cases.append(Case("cli-bad-command-utf8", [NONUTF8], NONUTF8_SHOWN, "unknown command"))
    # 4. contradictions
    contra = [
        (["--mesh", "all", "--ulysses", "2"], "--mesh all", "--ulysses"),
        (["--ulysses", "3", "--strategies", "ring"], "ulysses", "ulysses=3"),
        (["--ring", "2", "--strategies", "single,ring"], "ring", "ring=2"),
        (["--comm", "nccl"], "comm", "backend=cpu"),
        (["--heads", "4", "--kv-heads", "3"], "kv_heads", "kv_heads=3"),
        (["--world-size", "8"], "world_size", "world_size=8"),
        (["--dry-run", "--world-size", "8", "--ranks-per-node", "3"], "ranks_per_node", "ranks_per_node=3"),
        (["--dry-run", "--world-size", "4", "--inner-ring", "8"], "inner_ring", "inner_ring=8"),
        (["--min-verified", "3"], "min_verified", "min_verified=3"),
        (["--batch", "4294967296", "--seq", "4294967296"], "batch", "4294967296"),
        (["--docs", "outlier", "--seq", "10"], "docs", "outlier"),
        (["--docs", "equal:3", "--seq", "64,96"], "docs", "equal:3"),
    ]
    for args, field, value in contra:
        full = ["--model", "tiny", "--seq", "64", "--iters", "1", "--warmup", "0", "--no-progress"]
        full = [a for a in full] + args
        # a later --seq replaces nothing: drop the base one when the case gives its own
        if args.count("--seq"):
            full = ["--model", "tiny", "--iters", "1", "--warmup", "0", "--no-progress"] + args
        cases.append(Case(f"contra-{field}-{len(cases)}", full, field, value))
    # 5. presets: wrong types for every key, nested values, unknown keys, huge numbers, empty lists
    wrong_values = ["x", 1.5, True, None, [], {}, [1, "a"], {"value": 1}, 2**31, 2**63, 2**64, -2**63 - 1]
    kinds = {key: kind for key, kind in OPTIONS.values()}
    kinds.update({k: "bool" for k in BOOL_FLAGS.values()})
    accepts = {  # JSON values a kind accepts (these are not errors of type)
        "count": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31,
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
        "seed": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64,
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
        "bool": lambda v: isinstance(v, bool),
        "text": lambda v: isinstance(v, str),
        "choice": lambda v: False,  # "x" is no choice
        "names": lambda v: False,   # "x" is an unknown strategy: an error too, named
        "ints": lambda v: False,    # every candidate is wrong here (x, empty, nested...) or out of range
        "size": lambda v: False,    # "x" is no size; ints >= 0 below are filtered out
        "docs": lambda v: False,
    }
    for key, kind in sorted(kinds.items()):
        for v in rng.sample(wrong_values, PRESET_VALUES_PER_KEY):
            if accepts[kind](v):
                continue
            if kind == "size" and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63:
                continue
            if kind in ("names", "ints", "docs") and v == 2**31 and kind == "ints":
                continue  # a valid but huge seq: an error of range; covered elsewhere
            preset = {"model": "tiny", "seq": [64], key: v}
            cases.append(Case(f"preset-{key}-{len(cases)}", [], key, None, preset=preset))
    for where in ["top", "nested"]:
        for name in ["sequence", "Seq", "kv-heads", "ulyses", "", NONUTF8_SHOWN, "mesh_all", "causal_mask"]:
            preset = {"model": "tiny", "seq": [64]}
            if where == "top":
                preset[name] = 1
                field, value = "unknown key", name
            else:
                preset["model"] = {"name": "tiny", name: 1}
                field, value = "model", "name"
            cases.append(Case(f"preset-unknown-{where}-{len(cases)}", [], field, value, preset=preset))
    for text in ["[]", "5", '"tiny"', "null", "{", '{"seq": [64],}', '{"seq": [64]} x', "",
                 '{"seq": [64], "seq": [128]}', '{"model": "tiny", "seq": [64], "model": "small"}',
                 '{"seq": [' + "9" * 400 + ']}', '{"strategies": []}', '{"seq": []}', '{"docs": []}',
                 '{"seq": [64], "docs": [32, 0, 32]}', '{"mem_limit": "1.5GiB"}', '{"mem_limit": -1}']:
        cases.append(Case(f"preset-raw-{len(cases)}", [], "preset file", None, preset=text))
    cases.append(Case("preset-nonutf8", [], "preset file", "not valid JSON",
                      preset=b'{"model": "\xff\xfe"}'))
    cases.append(Case("preset-missing", ["--config", "/nonexistent/preset.json"], "config file", "/nonexistent"))
    # 6. valid edge cases: must plan and exit 0 (dry runs)
    ok = [
        ["--seed", "18446744073709551615"], ["--mem-limit", "8TiB"], ["--mem-limit", "0"], ["--timeout", "0"],
        ["--window", "0"], ["--window", "1", "--no-causal"], ["--docs", "equal:64"], ["--docs", "rl", "--seq", "4096"],
        ["--docs", "random:1:64", "--seq", "4096"], ["--seq", "1099511627776", "--world-size", "1024"],
        ["--pass", "prefill"], ["--heads", "65536", "--kv-heads", "65536", "--head-dim", "256", "--dim", "16777216"],
        ["--peak-tflops", "0"],
    ]
    for args in ok:
        full = ["--model", "tiny", "--dry-run"] + (args if "--seq" in args else ["--seq", "64"] + args)
        cases.append(Case(f"ok-{len(cases)}", full, None, None, expect_ok=True))
    return cases


def mpi_subset(cases, rng):
    """Cases under mpirun at 2 and 4 ranks: the message must come from every rank. Contradictions
    that need ranks, plus a seeded sample of the single-rank cases."""
    out = [
        Case("mpi-ulysses-3-of-2", base_args() + ["--ulysses", "3"], "ulysses", "ulysses=3", np=2),
        # G=3 with U=2: neither divides the other, so not even KV replication can shard the heads.
        Case("mpi-ulysses-kv", base_args() + ["--strategies", "ulysses", "--heads", "6", "--kv-heads", "3"],
             "ulysses", "kv_heads=3", np=2),
        Case("mpi-usp-product", base_args() + ["--ulysses", "2", "--ring", "4"], "usp", "ring=4", np=4),
        Case("mpi-ring-zigzag-seq", base_args("--seq") + ["--seq", "66", "--strategies", "ring-zigzag"],
             "ring-zigzag", "66", np=4),
        Case("mpi-rpn", base_args() + ["--ranks-per-node", "3"], "ranks_per_node", "ranks_per_node=3", np=2),
    ]
    picks = [c for c in cases if not c.expect_ok and c.argv is not None and c.argv[:1] not in (["runn"], [NONUTF8])]
    for i, c in enumerate(rng.sample(picks, 5)):
        out.append(Case(c.name + "-mpi", c.argv, c.field, c.value, np=2 if i < 4 else 4, preset=c.preset))
    return out


def run_case(binary, case, tmp, mpirun):
    report = os.path.join(tmp, case.name + ".json")
    argv = []
    if case.argv is None:
        argv = [binary]
    elif case.argv and case.argv[0] in ("runn", NONUTF8):
        argv = [binary] + case.argv
    elif case.expect_ok:
        argv = [binary, "run"] + case.argv
    elif "--out" in case.argv:  # the case is about --out itself: a second one would only be a duplicate
        argv = [binary, "run"] + case.argv
    else:  # --out first, so that a flag missing its value stays last
        argv = [binary, "run", "--out", report] + case.argv
    if case.preset is not None:
        path = os.path.join(tmp, case.name + ".preset.json")
        data = case.preset
        if isinstance(data, dict):
            data = json.dumps(data)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        argv = [binary, "run", "--out", report, "--config", path]
    if case.np > 1:
        argv = mpirun + ["-np", str(case.np)] + argv
    argv_bytes = [a.encode("utf-8", "surrogateescape") for a in argv]
    for attempt in range(3):
        start = time.monotonic()
        try:
            proc = subprocess.run(argv_bytes, capture_output=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return case, time.monotonic() - start, f"no exit within {TIMEOUT} s (hang)"
        elapsed = time.monotonic() - start
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        # Open MPI's singleton start-up itself sometimes fails on a loaded machine, before cpbench
        # runs a line: not a cpbench result, so run the case again (counted in the summary).
        if "error occurred in MPI_Init" not in out:
            break
        RETRIES.append(case.name)
    if case.expect_ok:
        return case, elapsed, None if proc.returncode == 0 else f"valid edge case exited {proc.returncode}: {out[-400:]}"
    problems = []
    if proc.returncode < 0:
        problems.append(f"killed by signal {-proc.returncode}")
    elif proc.returncode != 2:
        problems.append(f"exit code {proc.returncode}, expected 2")
    errors = [ln for ln in out.splitlines() if ln.startswith("cpbench: error")]
    if len(errors) < case.np:
        problems.append(f"{len(errors)} 'cpbench: error' line(s), expected one per rank ({case.np})")
    text = " ".join(errors)
    if case.field and case.field != "command" and not any(n in text for n in field_names(case.field)) \
            and case.field not in ("config file", "preset file", "unknown key"):
        problems.append(f"message does not name the field {case.field}")
    if case.field == "config file" and "config file" not in text:
        problems.append("message does not name the config file")
    if case.field == "preset file" and ".preset.json" not in text:
        problems.append("message does not name the preset file")
    if case.field == "unknown key" and "unknown key" not in text and "config file" not in text:
        problems.append("message does not say unknown key")
    if case.preset is not None and isinstance(case.preset, dict) and case.field not in ("unknown key", "model"):
        # The offending value (JSON as cpbench prints it) or the key must appear.
        key = case.field
        if f"'{key}'" not in text and key not in text:
            problems.append(f"message does not name the key {key}")
    if case.value and case.value not in text:
        problems.append(f"message does not show the value {case.value!r}")
    if os.path.exists(report):
        problems.append("a report was written")
    if problems:
        return case, elapsed, "; ".join(problems) + f" -- output: {out.strip()[-400:]!r}"
    return case, elapsed, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--mpirun", help="mpirun for the multi-rank cases; given and not found is an error "
                    "(default: mpirun where it is on PATH, else single-rank cases only)")
    ap.add_argument("--limit", type=int, default=0, help="run only the first N single-rank cases")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    load_options(list_json(args.binary))
    cases = generate(rng)
    if args.limit:
        cases = cases[: args.limit]
    if args.mpirun and not shutil.which(args.mpirun):  # ctest passes it: a missing one must not pass quietly
        print(f"fuzz_cli: --mpirun {args.mpirun!r} not found: the multi-rank cases cannot run")
        return 1
    mpirun = [args.mpirun or "mpirun", "--oversubscribe", "--allow-run-as-root"]
    mpi_cases = mpi_subset(cases, rng) if shutil.which(mpirun[0]) else []
    env_note = "" if mpi_cases else " (mpirun not found: no multi-rank cases)"
    tmp = tempfile.mkdtemp(prefix="cpbench_fuzz_")
    failures, times = [], []
    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(lambda c: run_case(args.binary, c, tmp, mpirun), cases))
        for c in mpi_cases:  # one mpirun at a time
            results.append(run_case(args.binary, c, tmp, mpirun))
        for case, elapsed, problem in results:
            times.append(elapsed)
            if problem:
                failures.append(f"FAIL {case.name} (np={case.np}) argv={case.argv} preset={case.preset!r}: {problem}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f)
    n_bad = sum(not c.expect_ok for c in cases) + len(mpi_cases)
    print(f"fuzz_cli: seed {args.seed}: {len(cases) + len(mpi_cases)} cases ({n_bad} invalid, "
          f"{sum(c.expect_ok for c in cases)} valid edge cases; {len(mpi_cases)} under mpirun at 2 and 4 ranks)"
          f"{env_note}; max time to exit {max(times):.2f} s, mean {sum(times) / len(times):.2f} s; "
          f"{len(RETRIES)} rerun(s) after an MPI_Init failure; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
