"""Which platform input decides a ranking: `scripts/plan.py --sensitivity REPORT` (docs/SIMULATION.md,
"Which input decides a ranking").

A simulated report's platform file states, beside each input's source, its relative uncertainty
(`uncertainty: {rel, reason}`: on an object input itself, or for a number under its path in the
file's top-level "uncertainty" map). This reruns the report's sweep on copies of the platform with
one input at a time scaled by (1 - rel) and by (1 + rel), ranks every N of every rerun with
plan.rank_at (the table's ranking), and names each input whose perturbation changes the winner or
the tied set: 'depends on <input>', what to measure first on one's own cluster.

Inputs (platform_inputs): every top-level "uncertainty" entry and every object carrying
"uncertainty", with rel > 0 (rel 0 is a definition, e.g. peak_tflops: nothing to perturb). Each is
named by its dotted path in the file (network.inter.bw_gbs, efficiency.gemm, network.intra.p2p);
an object whose only number is one value is named by that value (overlap_interference.compute_slowdown).

What x (1 +- rel) scales, as kernels/sim/sim_platform.cpp consumes it (perturb_values):
  *_gbs (a rate)                          the rate
  *_us (a latency or fixed cost)          the time
  compute_slowdown                        the slowdown
  efficiency tables (by_head_dim, points, every efficiency of the table (not the sizes)
  a GEMM grid's shapes)
  curves (size_time_us, floor_us)         every time of the curve and its floor (not the sizes)
Validity (factor_for): the minus side is 1 - rel; where that is <= 0, a value allowed to be 0 (a
time *_us, the slowdown) is set to 0, and one that must stay > 0 (a rate, an efficiency, a curve's
times) is divided by 1 + rel instead (the same ratio below as above). After scaling, an efficiency
is capped at 1 and the slowdown at 10 (the loader's bounds). The factor actually applied is printed.

The reruns: by default the report's own command line (context.argv) under scripts/simulate.sh on
the perturbed platform with the report's world size and cpbench-sim (--exe, else argv[0]), without the --backend, --out, --trace and
--dump it had (simulate.sh adds --backend sim; --out goes to the work directory); or --rerun
'COMMAND' with {platform} and {out} in it (a report without a usable argv, or another launcher).
The unperturbed platform is rerun too, and must reproduce the report's step times exactly (a
simulation is deterministic): otherwise the report is of another build or platform and its
reruns cannot be compared with it.

Refused with exit 2 and the reason: a measured report (nothing to rerun), more than one report,
a platform file that cannot be found or states no uncertainty, a rerun that fails or writes no
report, a rerun of another sweep (config, world size, platform or the set of ok results differ),
and a baseline rerun that does not reproduce the report.

Writes, in the work directory (--sens-dir, default REPORT without .json + '.sens'): each perturbed
platform and its rerun's report and log, and sensitivity.json (machine-readable: the inputs, the
rule, the baseline ranking and every perturbation's ranking per N, and what changed).
"""
import concurrent.futures
import copy
import json
import os
import shlex
import subprocess

import plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULE = ("x (1 - rel) and x (1 + rel); where 1 - rel <= 0 a time or slowdown goes to 0 and a "
        "rate, efficiency or curve is divided by 1 + rel; efficiencies capped at 1, the slowdown at 10")


class Refused(Exception):
    """A report or rerun the sensitivity cannot compare: plan.py exits 2 with this reason."""


# ---- the inputs and their perturbation ------------------------------------------------------------

def resolve(plat, path):
    """(parent, key) of a dotted path in the platform JSON; None when the file has no such value."""
    node, parts = plat, path.split(".")
    for p in parts[:-1]:
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return (node, parts[-1]) if isinstance(node, dict) and parts[-1] in node else None


def _numbers(obj):
    return [k for k, v in obj.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]


def platform_inputs(plat):
    """The perturbable inputs of a platform, in the file's order: [{name, rel, reason}], rel > 0."""
    out = []
    for path, u in plat.get("uncertainty", {}).items():
        out.append({"name": path, "rel": float(u["rel"]), "reason": u.get("reason", "")})

    def walk(node, path):
        if isinstance(node, dict):
            if path and isinstance(node.get("uncertainty"), dict) and "rel" in node["uncertainty"]:
                u = node["uncertainty"]
                nums = _numbers(node)
                lists = [k for k, v in node.items() if isinstance(v, list)]
                name = path + "." + nums[0] if len(nums) == 1 and not lists else path
                out.append({"name": name, "rel": float(u["rel"]), "reason": u.get("reason", "")})
            for k, v in node.items():
                if k != "uncertainty":
                    walk(v, path + "." + k if path else k)
    walk({k: v for k, v in plat.items() if k != "uncertainty"}, "")
    return [i for i in out if i["rel"] > 0]


def kind_of(key, value):
    """What a platform value is, for the validity rule: 'time' (>= 0), 'slowdown' (>= 0, <= 10),
    'rate' (> 0), 'efficiency' (a table, > 0, <= 1) or 'curve' (times > 0); None: not known."""
    if isinstance(value, dict):
        if "size_time_us" in value:
            return "curve"
        if "by_head_dim" in value or "points" in value or "shapes" in value:
            return "efficiency"
        return None
    if isinstance(value, list):
        return "efficiency"  # a class's table given as a bare [[size, efficiency], ...]
    if key == "compute_slowdown":
        return "slowdown"
    if key.endswith("_us"):
        return "time"
    if key.endswith("_gbs"):
        return "rate"
    return None


def factor_for(kind, rel, sign):
    """The factor x (1 + sign rel), kept valid (the module docstring's rule)."""
    if sign > 0:
        return 1 + rel
    if 1 - rel > 0:
        return 1 - rel
    return 0.0 if kind in ("time", "slowdown") else 1 / (1 + rel)


def _scale_table(table, f, col):
    """Rows [..., value] with column col scaled, an efficiency capped at 1."""
    for row in table:
        row[col] = min(1.0, row[col] * f)


def perturb(plat, name, sign, rel):
    """(a perturbed deep copy of the platform, the factor applied, the kind). Raises Refused when
    the file has no such value or the value is of a kind this does not know how to perturb."""
    out = copy.deepcopy(plat)
    where = resolve(out, name)
    if where is None:
        raise Refused("platform input '%s' (its uncertainty is stated) is not a value of the file" % name)
    parent, key = where
    value = parent[key]
    kind = kind_of(key, value)
    if kind is None:
        raise Refused("platform input '%s': no rule for perturbing this kind of value (%s)" % (name, json.dumps(value)[:80]))
    f = factor_for(kind, rel, sign)
    if kind in ("time", "rate"):
        parent[key] = value * f
    elif kind == "slowdown":
        parent[key] = min(10.0, value * f)
    elif kind == "curve":
        for row in value["size_time_us"]:
            row[1] *= f
        if "floor_us" in value:
            value["floor_us"] *= f
    elif isinstance(value, list):
        _scale_table(value, f, 1)
    elif "shapes" in value:
        _scale_table(value["shapes"], f, 3)
    elif "points" in value:
        _scale_table(value["points"], f, 1)
    else:
        for table in value["by_head_dim"].values():
            _scale_table(table, f, 1)
    return out, f, kind


# ---- the reruns -----------------------------------------------------------------------------------

DROP = {"--backend": 1, "--out": 1, "--trace": 1, "--dump": 1}  # flag -> values it takes


def default_rerun(rep, exe=None):
    """The rerun command of a simulated report, from its context.argv: scripts/simulate.sh with
    {platform} and {out} to fill in, and --exe: exe, else argv[0] where that file exists (the
    cpbench-sim that wrote the report), else simulate.sh's default."""
    argv = rep["context"].get("argv") or []
    if len(argv) < 2 or argv[1] != "run":
        raise Refused("context.argv (%s) is not a 'run' command line: give --rerun 'COMMAND {platform} {out}'"
                      % " ".join(argv))
    args, i = [], 2
    while i < len(argv):
        a = argv[i]
        flag = a.split("=", 1)[0]
        if flag in DROP:
            i += 1 if "=" in a else 1 + DROP[flag]
            continue
        args.append(a)
        i += 1
    exe = exe or (argv[0] if os.path.isfile(argv[0]) else None)  # the binary that wrote the report
    cmd = [os.path.join(ROOT, "scripts", "simulate.sh"), "--platform", "{platform}",
           "-np", str(rep["context"]["world_size"])]
    if exe:
        cmd += ["--exe", exe]
    return " ".join(shlex.quote(c) if c != "{platform}" else c for c in cmd) + " -- run " + \
        " ".join(shlex.quote(a) for a in args) + " --out {out}"


def run_one(template, platform_file, out, log):
    """Runs the rerun command for one platform; its report, or Refused with the reason."""
    cmd = template.replace("{platform}", shlex.quote(platform_file)).replace("{out}", shlex.quote(out))
    if os.path.exists(out):
        os.remove(out)
    with open(log, "w", encoding="utf-8") as lf:
        res = subprocess.run(["bash", "-c", cmd], stdout=lf, stderr=subprocess.STDOUT)
    if res.returncode != 0 or not os.path.exists(out):
        with open(log, encoding="utf-8", errors="replace") as lf:
            tail = lf.read()[-600:]
        raise Refused("the rerun `%s` %s (log %s):\n%s" % (
            cmd, "exited %d" % res.returncode if res.returncode else "wrote no report", log, tail))
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def ok_keys(rep):
    return sorted((r["label"], r["seq"]) for r in plan.ok_results(rep))


def same_sweep(base, rerun, what):
    """Refused unless the rerun is the report's sweep: its config, world size, platform name and
    set of ok results."""
    bc, rc = base["config"], rerun["config"]
    for k in sorted(set(bc) | set(rc)):
        if bc.get(k) != rc.get(k):
            raise Refused("%s is another sweep: config.%s is %s, the report's %s" % (
                what, k, json.dumps(rc.get(k)), json.dumps(bc.get(k))))
    if base["context"]["world_size"] != rerun["context"]["world_size"]:
        raise Refused("%s is another sweep: %d ranks, the report's %d" % (
            what, rerun["context"]["world_size"], base["context"]["world_size"]))
    bp, rp = base["context"]["simulated"]["platform"], (rerun["context"].get("simulated") or {}).get("platform")
    if bp != rp:
        raise Refused("%s is another sweep: platform %s, the report's %s" % (what, rp, bp))
    if ok_keys(base) != ok_keys(rerun):
        only = sorted(set(ok_keys(base)) ^ set(ok_keys(rerun)))
        raise Refused("%s is another sweep: the ok results differ (%s)" % (
            what, ", ".join("%s N=%d" % k for k in only[:5])))


# ---- rankings -------------------------------------------------------------------------------------

def rankings(rep, hbm):
    """N -> {winner, tied (the other labels tied with it, sorted), nothing_fits, order, median_ms}:
    plan.rank_at at every N."""
    oks = plan.ok_results(rep)
    out = {}
    for n in sorted({r["seq"] for r in oks}):
        rk = plan.rank_at([r for r in oks if r["seq"] == n], hbm)
        out[n] = {"winner": rk["ref"]["label"], "tied": sorted(r["label"] for r in rk["tied"]),
                  "nothing_fits": rk["nothing_fits"], "order": [r["label"] for r in rk["rows"]],
                  "median_ms": {r["label"]: r["timing"]["step_ms"]["median"] for r in rk["rows"]}}
    return out


def change(base, pert):
    """What a perturbation changed at one N, or None. The verdict is the tied set (the winner and
    those tied with it): a change of that set is a change ('tied_set': [before, after], 'winner' too when
    the fastest changed); the fastest changing inside an unchanged tie is not (the tie already says
    these runs cannot rank them), and is kept as 'within_tie' for the JSON alone."""
    before, after = sorted([base["winner"]] + base["tied"]), sorted([pert["winner"]] + pert["tied"])
    moved = base["winner"] != pert["winner"]
    if before == after:
        return {"within_tie": [base["winner"], pert["winner"]]} if moved else None
    out = {"tied_set": [before, after]}
    if moved:
        out["winner"] = [base["winner"], pert["winner"]]
    return out


def decides(ch):
    return bool(ch) and "tied_set" in ch


def fmt_factor(f):
    return "x%.4g" % f


def describe(name, f, ch):
    """One line: 'depends on NAME (xF): winner A → B; C joins the tie; D leaves the tie' (who joins
    or leaves said only when there is a tie before or after)."""
    parts = ["winner %s → %s" % tuple(ch["winner"])] if "winner" in ch else []
    before, after = ch["tied_set"]
    if max(len(before), len(after)) > 1:
        for who, verb in (([x for x in after if x not in before], "join"), ([x for x in before if x not in after], "leave")):
            if who:
                parts.append("%s %s the tie" % (", ".join(who), verb + ("s" if len(who) == 1 else "")))
    return "depends on %s (%s): %s" % (name, fmt_factor(f), "; ".join(parts))


def tie_text(rk):
    """The baseline verdict at one N, as plan.py's: one winner, or a tie (fastest by median first)."""
    what = "nothing fits; by step time alone, " if rk["nothing_fits"] else ""
    if not rk["tied"]:
        return what + "winner **%s**" % rk["winner"]
    return what + "tie: **%s** (fastest by median), %s" % (rk["winner"], ", ".join(rk["tied"]))


# ---- the whole analysis ---------------------------------------------------------------------------

def analyse(report_path, rep, hbm, rerun=None, exe=None, sens_dir=None, jobs=1, platform_file=None):
    """Runs the reruns and returns (Markdown, the sensitivity.json object). Raises Refused."""
    sim = rep["context"].get("simulated")
    if not sim:
        raise Refused("%s is a measured report (no context.simulated): there is no platform to perturb and "
                      "nothing to rerun; --sensitivity needs a simulated report" % report_path)
    pf = platform_file or sim.get("platform_file")
    if not pf or not os.path.exists(pf):
        guess = os.path.join(ROOT, "configs", "platforms", "%s.json" % sim["platform"])
        if platform_file or not os.path.exists(guess):
            raise Refused("the report's platform file %s cannot be read: give --platform FILE" % (pf or "(none)"))
        pf = guess
    with open(pf, encoding="utf-8") as f:
        plat = json.load(f)
    if plat.get("name") != sim["platform"]:
        raise Refused("the platform file %s is '%s', the report's platform is '%s'" % (pf, plat.get("name"), sim["platform"]))
    inputs = platform_inputs(plat)
    if not inputs:
        raise Refused("the platform file %s states no uncertainty > 0: nothing to perturb" % pf)
    template = rerun or default_rerun(rep, exe)
    for ph in ("{platform}", "{out}"):
        if ph not in template:
            raise Refused("the rerun command must contain %s: %s" % (ph, template))
    sens_dir = sens_dir or (report_path[:-5] if report_path.endswith(".json") else report_path) + ".sens"
    os.makedirs(sens_dir, exist_ok=True)

    # every run: (id, input, sign, factor, kind, platform path); the baseline first
    runs = [("baseline", None, 0, 1.0, None, os.path.join(sens_dir, "platform-baseline.json"))]
    platforms = {"baseline": plat}
    for inp in inputs:
        inp["factors"] = {}
        for sign, tag in ((-1, "minus"), (1, "plus")):
            p, fac, kind = perturb(plat, inp["name"], sign, inp["rel"])
            inp["factors"]["-" if sign < 0 else "+"] = fac
            rid = "%s-%s" % (inp["name"], tag)
            runs.append((rid, inp, sign, fac, kind, os.path.join(sens_dir, "platform-%s.json" % rid)))
            platforms[rid] = p
    for rid, *_, path in runs:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(platforms[rid], f, indent=1)

    def go(run):
        rid, path = run[0], run[5]
        rr = run_one(template, os.path.abspath(path), os.path.abspath(os.path.join(sens_dir, "report-%s.json" % rid)),
                     os.path.join(sens_dir, "log-%s.txt" % rid))
        same_sweep(rep, rr, "the rerun on %s" % path)
        return rr

    # The baseline first and alone: a report its reruns cannot reproduce is refused before the rest run.
    reports = [go(runs[0])]
    base_times = {(r["label"], r["seq"]): r["timing"]["step_ms"]["median"] for r in plan.ok_results(rep)}
    for r in plan.ok_results(reports[0]):
        if r["timing"]["step_ms"]["median"] != base_times[(r["label"], r["seq"])]:
            raise Refused("the rerun on the unperturbed platform does not reproduce the report (%s N=%d: %.6g ms, "
                          "the report's %.6g): the report is of another build or platform file, so its reruns "
                          "cannot be compared with it; simulate it again with this build" % (
                              r["label"], r["seq"], r["timing"]["step_ms"]["median"], base_times[(r["label"], r["seq"])]))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(go, r) for r in runs[1:]]
        reports += [fu.result() for fu in futures]  # the first failure, in run order, raises Refused
    finally:
        pool.shutdown(cancel_futures=True)  # after a failure, start no more reruns

    base = rankings(rep, hbm)
    perts = []
    for run, rr in zip(runs[1:], reports[1:]):
        rid, inp, sign, fac, kind, path = run
        rk = rankings(rr, hbm)
        changes = {n: change(base[n], rk[n]) for n in base}
        perts.append({"input": inp["name"], "sign": "+" if sign > 0 else "-", "rel": inp["rel"], "kind": kind,
                      "factor": fac, "platform_file": path, "report": os.path.join(sens_dir, "report-%s.json" % rid),
                      "rankings": {str(n): v for n, v in rk.items()},
                      "changes": {str(n): ch for n, ch in changes.items() if ch},
                      "decides": sorted(n for n, ch in changes.items() if decides(ch))})
    out = {"report": report_path, "platform": sim["platform"], "platform_file": pf,
           "world_size": rep["context"]["world_size"], "model": rep["config"].get("model"),
           "rerun": template, "rule": RULE, "reruns": len(runs), "inputs": inputs,
           "baseline": {str(n): v for n, v in base.items()},
           "perturbations": perts,
           "depends_on": {str(n): sorted({p["input"] for p in perts if n in p["decides"]}) for n in base}}
    with open(os.path.join(sens_dir, "sensitivity.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return markdown(out, base, sens_dir), out


def markdown(out, base, sens_dir):
    """The Markdown: the inputs with the factors applied and the N they decide, then per N the
    baseline verdict and every 'depends on' line, and what to measure first."""
    decided = {}  # input -> the N at which one of its two perturbations changes the tied set
    for p in out["perturbations"]:
        decided.setdefault(p["input"], set()).update(p["decides"])
    lines = ["## Sensitivity: %s, %d GPUs on %s" % (out["model"], out["world_size"], out["platform"]), "",
             "Each input of %s with a stated uncertainty, one at a time (%s); %d reruns of the sweep, the first "
             "on the unperturbed platform, which reproduces the report. Rerun: `%s`" % (
                 out["platform_file"], RULE, out["reruns"], out["rerun"]), "",
             "| input | rel | factors applied | changes the tied set at N |", "|---|---:|---|---|"]
    for i in out["inputs"]:
        lines.append("| %s | %g | %s, %s | %s |" % (
            i["name"], i["rel"], fmt_factor(i["factors"]["-"]), fmt_factor(i["factors"]["+"]),
            ", ".join(str(n) for n in sorted(decided[i["name"]])) or "none"))
    lines.append("")
    for n in sorted(base):
        lines += ["### N = %d: %s" % (n, tie_text(base[n])), ""]
        dep = [describe(p["input"], p["factor"], p["changes"][str(n)]) for p in out["perturbations"] if n in p["decides"]]
        lines += ["- " + d for d in dep] or ["No input changes the tied set at N = %d within its uncertainty." % n]
        inside = {}  # the new fastest inside an unchanged tie -> the perturbations that make it so
        for p in out["perturbations"]:
            ch = p["changes"].get(str(n)) or {}
            if "within_tie" in ch:
                inside.setdefault(ch["within_tie"][1], []).append("%s (%s)" % (p["input"], fmt_factor(p["factor"])))
        for who, what in inside.items():
            lines.append("Not a change: inside the tie, %s becomes the fastest by median under %s." % (who, ", ".join(what)))
        lines.append("")
    order = sorted((k for k in decided if decided[k]), key=lambda k: (-len(decided[k]), k))
    lines.append("Measure first: " + (", ".join("%s (%d of %d N)" % (k, len(decided[k]), len(base)) for k in order)
                                      if order else "nothing: no input changes a ranking within its uncertainty") + ".")
    lines += ["", "Machine-readable: %s" % os.path.join(sens_dir, "sensitivity.json"), ""]
    return "\n".join(lines)
