#!/usr/bin/env python3
"""Compare two cpbench reports and gate CI on regressions.

Results are matched by (label, seq). For each pair the tool prints a Markdown table of the
metrics (BASE -> NEW and the change) and decides whether NEW regressed. See --help for the rule.
"""
import argparse
import json
import sys
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
    f, b = get(r, "comm", "fwd", "bytes_sent"), get(r, "comm", "bwd", "bytes_sent")
    return None if f is None else f + b


def comm_matches(r):
    if "comm" not in r:
        return None
    return r["comm"]["fwd"]["matches_model"] and r["comm"]["bwd"]["matches_model"]


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


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare two cpbench reports (BASE, NEW): a Markdown table of the changes per "
                    "(label, seq) and metric, and an exit status for CI.",
        epilog=RULE, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", metavar="BASE", help="the reference report (JSON)")
    ap.add_argument("new", metavar="NEW", help="the report under test (JSON)")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="allowed slowdown of the step median beyond the noise band, a fraction (default 0.10)")
    ap.add_argument("--markdown-out", metavar="FILE", help="also write the Markdown to FILE")
    ap.add_argument("--allow-missing-verified", action="store_true",
                    help="do not fail when a result verified in BASE is missing or skipped in NEW")
    ap.add_argument("--schema", metavar="FILE", help="schema file (default: results_schema/report.schema.json)")
    args = ap.parse_args(argv)
    if args.threshold < 0:
        ap.error("--threshold must be >= 0")

    try:
        validator = validate_report.load_schema(args.schema)
        base = validate_report.load_report(args.base, validator)
        new = validate_report.load_report(args.new, validator)
    except validate_report.ReportError as e:
        print(f"compare_reports: invalid input:\n{e}", file=sys.stderr)
        return 2

    # Different masks, passes or blocks measure different work: a comparison would report a
    # "regression" that is only the workload changing.
    for key in ("mask", "pass", "block", "ffn_dim"):
        if base["config"][key] != new["config"][key]:
            print(f"compare_reports: the reports measure different workloads: config.{key} is "
                  f"{json.dumps(base['config'][key], sort_keys=True)} in {args.base} and "
                  f"{json.dumps(new['config'][key], sort_keys=True)} in {args.new}", file=sys.stderr)
            return 2

    text, failures = compare(base, new, args.threshold, args.allow_missing_verified, args.base, args.new)
    print(text, end="")
    if args.markdown_out:
        try:
            Path(args.markdown_out).write_text(text, encoding="utf-8")
        except OSError as e:
            print(f"compare_reports: cannot write {args.markdown_out}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
