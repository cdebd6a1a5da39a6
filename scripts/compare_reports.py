#!/usr/bin/env python3
"""Compare two cpbench reports and gate CI on regressions.

Results are matched by (label, seq). For each pair the tool prints a Markdown table of the
metrics (BASE -> NEW and the change) and decides whether NEW regressed. See --help for the rule.

With --exact it instead checks that the two reports describe the same work to the byte: every
deterministic field of EXACT_FIELDS equal, timings ignored (a refactor's safety net,
docs/CONTRIBUTING.md "Refactoring without changing a byte").
"""
import argparse
import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate_report  # noqa: E402  (same folder; shares the report loader)

RULE = """\
Regression rule. For each result present and 'ok' in both reports, with step-time statistics in both:
  noise(X)   = (p90 - p10) / median of timing.step_ms in report X
  noise      = max(noise(BASE), noise(NEW))
  limit      = BASE median x (1 + threshold + noise)
  regression iff NEW median > limit.
So a change must exceed the threshold plus the wider of the two runs' p10..p90 spreads to fail.

Exit 1 when any of these holds (each is listed in the output):
  - a step-time regression (above);
  - a result 'ok' in BASE is 'failed' in NEW (an error, or a failed verification);
  - a result that passed verification in BASE is missing from NEW or skipped there
    (a strategy must not escape the gate by disappearing; --allow-missing-verified turns this off);
  - comm bytes matched the analytic model in BASE (both phases) and do not in NEW.
Results only in NEW (new), or missing from NEW without a passed verification in BASE, are
listed and do not fail. Exit 0 otherwise. Exit 2 when a report cannot be read or is not valid
(schema and semantic checks of scripts/validate_report.py)."""


def fmt_num(v):
    if v is None:
        return "—"
    a = abs(v)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a == 0:
        return "0"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_bytes(v):
    if v is None:
        return "—"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v} B"


def fmt_ratio(v):
    return "—" if v is None else f"{v:.2f}"


def fmt_pct(v):
    return "—" if v is None else f"{100 * v:.1f}%"


def cell(b, n, fmt=fmt_num, absolute=False):
    """'base → new (change)'; relative change unless absolute."""
    if b is None and n is None:
        return "—"
    if b is None or n is None:
        return f"{fmt(b)} → {fmt(n)}"
    if b == n or (absolute and round(n - b, 2) == 0):
        change = "="
    elif absolute:
        change = f"{n - b:+.2f}"
    elif b == 0:
        change = "new"
    else:
        change = f"{100 * (n - b) / b:+.1f}%"
    return f"{fmt(b)} → {fmt(n)} ({change})"


def get(r, *keys):
    for k in keys:
        if not isinstance(r, dict) or k not in r:
            return None
        r = r[k]
    return r


def comm_total(r):
    """Bytes per layer step: fwd + bwd, and a --recompute's repeated forward (schema 14)."""
    f, b = get(r, "comm", "fwd", "bytes_sent"), get(r, "comm", "bwd", "bytes_sent")
    return None if f is None else f + b + (get(r, "comm", "recompute", "bytes_sent") or 0)


def comm_matches(r):
    if "comm" not in r:
        return None
    return all(c["matches_model"] for c in r["comm"].values())


def verified_pass(r):
    return get(r, "verify", "passed") is True


def verify_text(r):
    v = get(r, "verify", "passed")
    return "—" if v is None else ("pass" if v else "FAIL")


def noise(r):
    st = get(r, "timing", "step_ms")
    if not st or st["median"] <= 0:
        return None
    return (st["p90"] - st["p10"]) / st["median"]


def mesh_text(r):
    """A result's mesh levels innermost first, size-1 levels left out: 'tp2·ulysses2·ring2'."""
    levels = [lv for lv in r["mesh"].get("levels", []) if lv["size"] > 1]
    return "·".join(f"{lv['name']}{lv['size']}" for lv in levels) or "one rank"


def describe(path, rep):
    c = rep["context"]
    cfg = rep["config"]
    return (f"`{path}` — {cfg['command']}, git {c['git_sha']}, {c['date']}, {', '.join(c['hosts'])}, "
            f"P={cfg['world_size']}, {cfg['backend']}/{cfg['comm']}/{cfg['dtype']}")


def compare(base, new, threshold, allow_missing_verified, base_name="BASE", new_name="NEW"):
    """Returns (markdown text, list of failure strings)."""
    bidx = {(r["label"], r["seq"]): r for r in base["results"]}
    nidx = {(r["label"], r["seq"]): r for r in new["results"]}
    keys = [k for k in bidx if k in nidx]
    only_base = [k for k in bidx if k not in nidx]
    only_new = [k for k in nidx if k not in bidx]
    failures = []
    lines = ["# cpbench comparison", "",
             f"- BASE: {describe(base_name, base)}",
             f"- NEW: {describe(new_name, new)}"]
    skip_cfg = {"command"}
    diffs = [f"{k}: {base['config'][k]!r} → {new['config'][k]!r}" for k in base["config"]
             if k not in skip_cfg and base["config"][k] != new["config"].get(k)]
    if diffs:
        lines.append("- Configs differ (results are still matched by label and seq): " + "; ".join(diffs))
    # A label names its mesh (usp[t2xu2xr2]); the levels (innermost first) say it in full, so a
    # label whose mesh changed between the reports (e.g. megatron-sp, the mesh {tp = P}) is named.
    moved = [f"{k[0]} seq {k[1]}: {mesh_text(bidx[k])} → {mesh_text(nidx[k])}" for k in keys
             if mesh_text(bidx[k]) != mesh_text(nidx[k])]
    if moved:
        lines.append("- Meshes differ (levels innermost first): " + "; ".join(moved))
    lines += ["", "| label | seq | status | step median ms | fwd ms | bwd ms | TFLOP/s | MFU | comm bytes fwd+bwd "
              "| peak memory | overlap ratio | verify | step limit ms | verdict |",
              "|---|---:|---|---|---|---|---|---|---|---|---|---|---:|---|"]
    for key in sorted(keys, key=lambda k: (k[1], k[0])):
        b, n = bidx[key], nidx[key]
        label, seq = key
        verdicts = []
        status = b["status"] if b["status"] == n["status"] else f"{b['status']} → {n['status']}"
        limit = None
        if b["status"] == "ok" and n["status"] == "ok":
            bm, nm = get(b, "timing", "step_ms", "median"), get(n, "timing", "step_ms", "median")
            if bm is not None and nm is not None and bm > 0:
                nz = max(noise(b) or 0.0, noise(n) or 0.0)
                limit = bm * (1 + threshold + nz)
                if nm > limit:
                    verdicts.append("REGRESSION")
                    failures.append(f"{label} seq {seq}: step median {fmt_num(bm)} → {fmt_num(nm)} ms "
                                    f"({100 * (nm - bm) / bm:+.1f}%) exceeds limit {fmt_num(limit)} ms "
                                    f"(threshold {100 * threshold:.0f}% + noise {100 * nz:.1f}%)")
                elif nm < bm * (1 - threshold - nz):
                    verdicts.append("faster")
            if comm_matches(b) is True and comm_matches(n) is False:
                verdicts.append("COMM MODEL")
                failures.append(f"{label} seq {seq}: comm bytes matched the model in BASE and do not in NEW "
                                f"(fwd {n['comm']['fwd']['bytes_sent']} vs {n['comm']['fwd']['predicted_bytes']}, "
                                f"bwd {n['comm']['bwd']['bytes_sent']} vs {n['comm']['bwd']['predicted_bytes']})")
        if b["status"] == "ok" and n["status"] == "failed":
            if verified_pass(b):
                verdicts.append("VERIFY FAILED")
                failures.append(f"{label} seq {seq}: passed verification in BASE, failed in NEW: {n['reason']}")
            else:
                verdicts.append("FAILED")
                failures.append(f"{label} seq {seq}: ok in BASE, failed in NEW: {n['reason']}")
        if verified_pass(b) and n["status"] == "skipped":
            verdicts.append("LOST VERIFY" + (" (allowed)" if allow_missing_verified else ""))
            if not allow_missing_verified:
                failures.append(f"{label} seq {seq}: passed verification in BASE, skipped in NEW: {n['reason']}")
        if not verdicts:
            verdicts.append("ok" if b["status"] == "ok" and n["status"] == "ok" else "—")
        vb, vn = verify_text(b), verify_text(n)
        lines.append("| " + " | ".join([
            label, str(seq), status,
            cell(get(b, "timing", "step_ms", "median"), get(n, "timing", "step_ms", "median")),
            cell(get(b, "timing", "fwd_ms", "median"), get(n, "timing", "fwd_ms", "median")),
            cell(get(b, "timing", "bwd_ms", "median"), get(n, "timing", "bwd_ms", "median")),
            cell(get(b, "tflops"), get(n, "tflops")),
            cell(get(b, "mfu"), get(n, "mfu"), fmt_pct),
            cell(comm_total(b), comm_total(n), fmt_bytes),
            cell(get(b, "memory", "peak_bytes"), get(n, "memory", "peak_bytes"), fmt_bytes),
            cell(get(b, "overlap", "ratio"), get(n, "overlap", "ratio"), fmt_ratio, absolute=True),
            vb if vb == vn else f"{vb} → {vn}",
            fmt_num(limit),
            ", ".join(verdicts),
        ]) + " |")
    if not keys:
        lines.append("| (no result in both reports) | | | | | | | | | | | | | |")

    if only_base:
        lines += ["", "Missing from NEW (in BASE only):"]
        for k in only_base:
            r = bidx[k]
            note = ""
            if verified_pass(r):
                if allow_missing_verified:
                    note = " — passed verification in BASE (allowed by --allow-missing-verified)"
                else:
                    note = " — passed verification in BASE: FAIL"
                    failures.append(f"{k[0]} seq {k[1]}: passed verification in BASE, missing from NEW")
            lines.append(f"- {k[0]} seq {k[1]} ({r['status']}){note}")
    if only_new:
        lines += ["", "New in NEW (not in BASE):"]
        lines += [f"- {k[0]} seq {k[1]} ({nidx[k]['status']})" for k in only_new]

    lines += ["", f"Changes are (NEW − BASE) / BASE; overlap ratio: NEW − BASE. Noise band of a run: "
              f"(p90 − p10) / median of its step time; regression iff NEW median > BASE median × "
              f"(1 + {threshold:g} + max(noise BASE, noise NEW)) (= step limit ms)."]
    if failures:
        lines += ["", f"**FAIL** — {len(failures)} problem(s):"] + [f"- {f}" for f in failures]
    else:
        lines += ["", "**PASS** — no regression."]
    return "\n".join(lines) + "\n", failures


# --exact: the fields of a result that the same code on the same inputs reproduces bit for bit.
# Paths into a result; a path absent from both results is equal, absent from one is a difference.
# `ops` lists are compared through OP_FIELDS (their times and bandwidths are measurements). Not
# compared: timing, overlap, tflops/mfu/hfu, peak (a calibrated GEMM), balance.compute_ms_per_rank
# and imbalance, comm time_ms, inference ttft_ms/tpot_ms (all measured times) and memory (the
# allocator's peaks: a refactor may move a buffer without changing what is sent or computed).
EXACT_FIELDS = [
    ("strategy",), ("status",), ("reason",), ("mesh",), ("warning",),
    *[("comm", ph, f) for ph in ("fwd", "bwd", "recompute")
      for f in ("bytes_sent", "per_rank", "predicted_bytes", "predicted_per_rank", "matches_model",
                "tiers", "ops")],
    ("flops", "model"), ("flops", "hardware"),
    ("balance", "scheme"), ("balance", "model_flops_per_rank"), ("balance", "flops_imbalance"),
    ("balance", "visible_pairs_per_rank"), ("balance", "dynamic"),
    ("balance", "resample", "packs"), ("balance", "resample", "flops_imbalance"),
    ("balance", "resample", "bytes_match_model"),
    *[("inference", f) for f in ("pass", "ring_pass", "cached", "new_tokens", "miss_rate",
                                 "decode_steps", "kv_cache_bytes")],
    ("verify",),
]
OP_FIELDS = ("op", "group", "group_size", "count", "bytes_sent")
PACK_FIELDS = ("lens", "flops_imbalance", "bytes_match_model")  # balance.resample.packs[]: not step_ms
# Report-level fields that must agree besides the results: what ran, and the node map that splits
# bytes into tiers.
EXACT_REPORT_FIELDS = [("complete",), ("config",), ("context", "world_size"), ("context", "ranks_per_node"),
                       ("context", "nodes")]

_ABSENT = object()


def exact_rule():
    """--help's description of --exact, from the field lists themselves."""
    fields = ", ".join(".".join(p) for p in EXACT_FIELDS)
    report = ", ".join(".".join(p) for p in EXACT_REPORT_FIELDS)
    return textwrap.fill(
        "--exact (a refactor's check that nothing changed). Results are matched by (label, seq), "
        "unique in a report; config is compared whole, so two reports of different workloads "
        "differ. Every path below must be equal exactly (floats bit for bit; a key absent from one "
        f"result only is a difference): per result {fields} (ops by {', '.join(OP_FIELDS)}; "
        f"resample packs by {', '.join(PACK_FIELDS)}); per report {report}. Not compared: times "
        "and what derives from them (timing, overlap, tflops, mfu, hfu, peak, compute_ms_per_rank, "
        "imbalance, time_ms, bandwidths, ttft_ms, tpot_ms), memory, context other than the above. "
        "A job in one report only is a difference. Every difference is printed (the first "
        "--max-diffs per job). Exit 0 when identical, 1 on any difference, 2 when a report cannot "
        "be read or is not valid.", width=96)


def _field(r, path):
    for k in path:
        if not isinstance(r, dict) or k not in r:
            return _ABSENT
        r = r[k]
    return r


def _project(path, value):
    """The deterministic part of a field's value (ops and resample packs without their times)."""
    if path[-1] == "ops" and isinstance(value, list):
        return [{k: op.get(k) for k in OP_FIELDS} for op in value]
    if path[-1] == "packs" and isinstance(value, list):
        return [{k: pk.get(k) for k in PACK_FIELDS} for pk in value]
    return value


def _show(v):
    return "(absent)" if v is _ABSENT else json.dumps(v, sort_keys=True)


def value_diffs(path, a, b, out):
    """Appends (json path, a, b) for every leaf where a and b differ, exactly: floats too (the same
    code on the same inputs writes the same doubles), a value against an absent key, true against 1."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            value_diffs(path + [k], a.get(k, _ABSENT), b.get(k, _ABSENT), out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            value_diffs(path + [i], x, y, out)
    elif isinstance(a, list) and isinstance(b, list):
        out.append((validate_report.json_path(path) + " (length)", len(a), len(b)))
    elif a is _ABSENT or b is _ABSENT:
        if a is not b:
            out.append((validate_report.json_path(path), a, b))
    elif isinstance(a, bool) != isinstance(b, bool) or a != b:  # in Python True == 1
        out.append((validate_report.json_path(path), a, b))


def exact_result_diffs(b, n):
    """Every difference between two results in EXACT_FIELDS, as (path, base value, new value)."""
    out = []
    for path in EXACT_FIELDS:
        value_diffs(list(path), _project(path, _field(b, path)), _project(path, _field(n, path)), out)
    return out


def compare_exact(base, new, max_diffs, base_name="BASE", new_name="NEW"):
    """Returns (text, number of problems): each job that differs or is in one report only counts one,
    and so does a report-level field that differs."""
    bidx = {(r["label"], r["seq"]): r for r in base["results"]}
    nidx = {(r["label"], r["seq"]): r for r in new["results"]}
    lines = [f"compare_reports --exact: BASE {base_name}, NEW {new_name}"]
    problems = 0

    def listed(diffs, indent):
        shown = [f"{indent}{p}: {_show(a)} -> {_show(b)}" for p, a, b in diffs[:max_diffs]]
        if len(diffs) > max_diffs:
            shown.append(f"{indent}... and {len(diffs) - max_diffs} more")
        return shown

    report_diffs = []
    for path in EXACT_REPORT_FIELDS:
        value_diffs(list(path), _field(base, path), _field(new, path), report_diffs)
    if report_diffs:
        problems += 1
        lines.append(f"report: {len(report_diffs)} difference(s)")
        lines += listed(report_diffs, "  ")
    same = 0
    for key in bidx:
        label, seq = key
        if key not in nidx:
            problems += 1
            lines.append(f"{label} seq {seq}: in BASE only ({bidx[key]['status']})")
            continue
        diffs = exact_result_diffs(bidx[key], nidx[key])
        if diffs:
            problems += 1
            lines.append(f"{label} seq {seq}: {len(diffs)} difference(s)")
            lines += listed(diffs, "  ")
        else:
            same += 1
    for key in nidx:
        if key not in bidx:
            problems += 1
            lines.append(f"{key[0]} seq {key[1]}: in NEW only ({nidx[key]['status']})")
    verdict = "IDENTICAL" if problems == 0 else f"DIFFERENT ({problems} problem(s))"
    lines.append(f"{verdict}: {same} of {len(bidx)} BASE job(s) identical, {len(nidx)} NEW job(s)")
    return "\n".join(lines) + "\n", problems


def compare_exact_dirs(base_dir, new_dir, validator, max_diffs):
    """--exact on two directories: every *.json of either against its namesake in the other, in one
    process (the schema is loaded once: a matrix of a hundred reports). Returns (text, status):
    2 when a report is unreadable or invalid, else 1 when any pair differs or a report is in one
    directory only, else 0."""
    bnames = {f.name for f in Path(base_dir).glob("*.json")}
    nnames = {f.name for f in Path(new_dir).glob("*.json")}
    lines, identical, differ, invalid = [], 0, 0, 0
    for name in sorted(bnames | nnames):
        if name not in nnames or name not in bnames:
            differ += 1
            lines.append(f"{name}: in {'BASE' if name in bnames else 'NEW'} only")
            continue
        try:
            base = validate_report.load_report(str(Path(base_dir) / name), validator)
            new = validate_report.load_report(str(Path(new_dir) / name), validator)
        except validate_report.ReportError as e:
            invalid += 1
            lines.append(f"{name}: INVALID\n{e}")
            continue
        text, problems = compare_exact(base, new, max_diffs, str(Path(base_dir) / name), str(Path(new_dir) / name))
        if problems:
            differ += 1
            lines.append(text.rstrip("\n"))
        else:
            identical += 1
            lines.append(f"{name}: identical ({len(base['results'])} job(s))")
    total = len(bnames | nnames)
    lines.append(f"{identical} of {total} report pair(s) identical, {differ} different, {invalid} invalid")
    return "\n".join(lines) + "\n", 2 if invalid else 1 if differ else 0


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare two cpbench reports (BASE, NEW): a Markdown table of the changes per "
                    "(label, seq) and metric, and an exit status for CI.",
        epilog=RULE + "\n\n" + exact_rule(), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", metavar="BASE", help="the reference report (JSON); with --exact also a directory")
    ap.add_argument("new", metavar="NEW", help="the report under test (JSON); with --exact also a directory")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="allowed slowdown of the step median beyond the noise band, a fraction (default 0.10)")
    ap.add_argument("--markdown-out", metavar="FILE", help="also write the Markdown to FILE")
    ap.add_argument("--allow-missing-verified", action="store_true",
                    help="do not fail when a result verified in BASE is missing or skipped in NEW")
    ap.add_argument("--schema", metavar="FILE", help="schema file (default: results_schema/report.schema.json)")
    ap.add_argument("--exact", action="store_true",
                    help="instead of the regression gate: exit 1 unless every job agrees exactly in "
                         "its deterministic fields (below), timings ignored")
    ap.add_argument("--max-diffs", type=int, default=10, metavar="N",
                    help="--exact: print at most N differences per job (default 10); all are counted")
    args = ap.parse_args(argv)
    if args.threshold < 0:
        ap.error("--threshold must be >= 0")
    if args.max_diffs < 1:
        ap.error("--max-diffs must be >= 1")
    if args.exact and args.allow_missing_verified:
        ap.error("--exact fails on every missing job; --allow-missing-verified does not apply")

    dirs = [Path(a).is_dir() for a in (args.base, args.new)]
    if any(dirs) and (not all(dirs) or not args.exact):
        ap.error("BASE and NEW may be directories only both, and only with --exact")
    try:
        validator = validate_report.load_schema(args.schema)
        if not any(dirs):
            base = validate_report.load_report(args.base, validator)
            new = validate_report.load_report(args.new, validator)
    except validate_report.ReportError as e:
        print(f"compare_reports: invalid input:\n{e}", file=sys.stderr)
        return 2

    if any(dirs):
        text, status = compare_exact_dirs(args.base, args.new, validator, args.max_diffs)
    elif args.exact:
        # The whole config is one of the compared fields: a different workload is a difference.
        text, problems = compare_exact(base, new, args.max_diffs, args.base, args.new)
        status = 1 if problems else 0
    else:
        # Different masks, passes or blocks measure different work: a comparison would report a
        # "regression" that is only the workload changing.
        for key in ("mask", "pass", "block", "ffn_dim"):
            if base["config"][key] != new["config"][key]:
                print(f"compare_reports: the reports measure different workloads: config.{key} is "
                      f"{json.dumps(base['config'][key], sort_keys=True)} in {args.base} and "
                      f"{json.dumps(new['config'][key], sort_keys=True)} in {args.new}", file=sys.stderr)
                return 2
        text, failures = compare(base, new, args.threshold, args.allow_missing_verified, args.base, args.new)
        status = 1 if failures else 0
    print(text, end="")
    if args.markdown_out:
        try:
            Path(args.markdown_out).write_text(text, encoding="utf-8")
        except OSError as e:
            print(f"compare_reports: cannot write {args.markdown_out}: {e.strerror or e}", file=sys.stderr)
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
