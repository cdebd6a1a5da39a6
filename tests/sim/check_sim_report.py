#!/usr/bin/env python3
"""Assertions on reports of simulated runs (tests/sim/CMakeLists.txt).

  check_sim_report.py simulated REPORT PLATFORM.json [--same-times OTHER.json]
      context.simulated is the platform's (name, peaks, efficiency tables, memory bandwidth), the
      GPU is the simulated device, MFU uses the platform's peak, every ok result has positive
      simulated times, each carrying timing.step_ms.band = the platform's band {lo, hi}
      (0 < lo <= 1 <= hi), context.simulated.band = the platform's band; with --same-times, OTHER (the same run again, possibly with the other
      CPBENCH_SIM_CLOCK mode) has the same step times to a relative 1e-9.
  check_sim_report.py shared-cores REPORT_P REPORT_2P
      the platform's ranks time-share cores (cores_per_node = P): `single` does the same work on
      every rank, so with twice the ranks on the same cores its simulated step takes twice as long
      (less the latencies that ranks do not share: the ratio must lie in [1.99, 2]).
  check_sim_report.py decode-memory-bound REPORT_C REPORT_2C PLATFORM.json
      --pass decode of `single` with a cache of C and then 2C tokens: decode attention is costed
      as memory-bound, so the step grows by exactly the added K, V bytes read at the platform's
      memory bandwidth, S * 2 * B * C * kv_heads * head_dim * elem / memory_bw (relative 1e-6).
  check_sim_report.py recompute REPORT_NONE REPORT_SELECTIVE REPORT_FULL
      the same simulated run under --recompute none, selective and full: the forward takes the same
      time in all three (relative 1e-9) and the backward pays the repeat: none < selective < full
      for every strategy, and for `single` (no communication) full adds exactly the forward
      (relative 1e-9); the repeated forward's bytes are comm.recompute (absent under none).
  check_sim_report.py env REPORT NAME=VALUE
      context.env records NAME=VALUE (the run used that setting).
  check_sim_report.py with-interference PLATFORM.json X OUT.json
      writes a copy of the platform with overlap_interference.compute_slowdown = X (a test input).
  check_sim_report.py with-uncertainty PLATFORM.json OUT.json PATH=REL [PATH=REL ...]
      writes a copy of the platform whose top-level "uncertainty" map states REL for each PATH (a
      test input for plan.py --sensitivity).
  check_sim_report.py interference REPORT_0 REPORT_X REPORT_2X X
      the same run on a platform without overlap interference, with compute_slowdown X and 2X:
      context.simulated carries X and 2X; strategies that never overlap a point-to-point transfer
      with compute (single; ulysses' all-to-alls block) keep every rank's compute time exactly;
      the ring strategies' grows, by less than X times itself (only the part of a kernel that runs
      while a hop's bytes move pays), and at 2X by more than at X and at most twice as much (twice
      when every slowed kernel ends inside the transfer's modelled duration).
  check_sim_report.py with-op-us PLATFORM.json INTRA_US INTER_US OUT.json
      writes a copy of the platform with network.intra.op_us and network.inter.op_us (a test input).
  check_sim_report.py nccl-collectives REPORT PLATFORM.json [--min N]
      the sim communicator runs collectives as NCCL does, over point-to-point: an all-to-all is
      one group of transfers to every peer at once, all-gather and reduce-scatter the ring's
      P - 1 steps. On a platform of per-GPU ports (intra bw_i, lat_i; inter bw_e, lat_e + fabric)
      each backward collective of a group of g contiguous ranks (n per node) with b bytes sent per
      call and c = b / (g - 1) per peer then takes, within 0.5%:
        all-to-all:           max(lat_i + (n - 1) c / bw_i, lat_e + (g - n) c / bw_e)  (one node: lat_i + b / bw_i)
        all-gather, r-scatter: (g - 1) (lat + c / bw) of the slowest link the ring crosses
      each plus, once, the platform's network.intra.op_us (g = n) or network.inter.op_us (one NCCL
      operation's fixed cost; 0 when absent).
      SMPI's own choices (Open MPI's selector) differ: all-gather by recursive doubling pays
      log2 P latencies, not P - 1 (-25% at P = 4 here); a large all-to-all (3 MiB per call at
      P = 4) runs in steps (+6%); a small one is the same group of transfers. Backward only:
      the forward's first collective also waits for ranks that start late. At least N (default 3) collectives are checked.
Prints what failed and exits 1 on any failure."""
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))
import cpmodel  # noqa: E402

failed = 0


def check(cond, msg):
    global failed
    if not cond:
        failed += 1
        print("FAIL:", msg)


def cmd_simulated(args):
    rep = json.load(open(args[0]))
    plat = json.load(open(args[1]))
    ctx = rep["context"]
    sim = ctx.get("simulated")
    check(sim is not None, "context.simulated is missing")
    if sim is None:
        return
    check(sim["platform"] == plat["name"], "platform %r, expected %r" % (sim["platform"], plat["name"]))
    check(sim["peak_tflops"] == plat["peak_tflops"], "peak_tflops %r != %r" % (sim["peak_tflops"], plat["peak_tflops"]))
    d = int(rep["config"]["head_dim"])
    for cls, table in plat["efficiency"].items():
        # a table for any head dim, or by head dim: the run's, else the nearest in log2 (the
        # larger on a tie), as kernels/sim/sim_platform.cpp table_head_dim picks
        key, pts = None, table
        if isinstance(table, dict) and "shapes" in table:  # a GEMM grid by (m, n, k), with its source
            pts = table["shapes"]
        elif isinstance(table, dict) and "points" in table:  # one table for any head dim, with its source
            pts = table["points"]
        elif isinstance(table, dict):
            dims = sorted(int(k) for k in table["by_head_dim"])
            key = d if d in dims else min(dims, key=lambda k: (abs(math.log2(k / d)), -k))
            pts = table["by_head_dim"][str(key)]
        check(sim["efficiencies"][cls] == [[float(x) for x in row] for row in pts],
              "efficiencies.%s %r != platform %r" % (cls, sim["efficiencies"][cls], pts))
        t = sim["efficiency_tables"][cls]
        check(t["head_dim"] == key and t["matches_run"] == (key is None or key == d)
              and t.get("source") == (table.get("source") if isinstance(table, dict) else None),
              "efficiency_tables.%s %r: expected head_dim %r for the run's %d" % (cls, t, key, d))
    check(abs(sim["memory_bw"] - plat["memory_bw_gbs"] * 1e9) < 1, "memory_bw %r" % sim["memory_bw"])
    check(sim.get("band") == plat["band"], "context.simulated.band %r != the platform's %r" % (sim.get("band"), plat["band"]))
    net = plat.get("network", {})
    curve = net.get("intra", {}).get("nccl")
    got = sim.get("nccl_intra")
    check((got is None) == (curve is None) and (curve is None or (
        got["source"] == curve["source"] and got["ranks"] == curve["ranks"] and got["points"] == len(curve["size_time_us"]))),
        "context.simulated.nccl_intra %r does not name the platform's network.intra.nccl" % (got,))
    want_op = {"intra": 0.0 if curve is not None else float(net.get("intra", {}).get("op_us", 0)),
               "inter": float(net.get("inter", {}).get("op_us", 0))}
    check(sim.get("op_fixed_us") == want_op,
          "context.simulated.op_fixed_us %r, expected %r (the platform's op_us; 0 within a node under an NCCL curve)"
          % (sim.get("op_fixed_us"), want_op))
    check(any("simulated" in g and plat["device"] in g for g in ctx["gpus"]), "gpus %r" % ctx["gpus"])
    dtype = rep["config"].get("dtype", "fp32")
    if "xml" not in plat:  # generated platforms: nodes of gpus_per_node ranks, not one node per host
        P = ctx["world_size"]
        g = min(P, int(plat["network"]["gpus_per_node"]))
        nodes = ctx["nodes"]["node_of_rank"]
        check(nodes == [r // g for r in range(P)], "context.nodes.node_of_rank %r, expected blocks of %d" % (nodes, g))
    oks = [r for r in rep["results"] if r["status"] == "ok"]
    check(len(oks) > 0, "no ok result")
    for r in oks:
        check(r["peak"]["tflops"] == plat["peak_tflops"][dtype],
              "%s: peak %r, expected the platform's %s peak" % (r["label"], r["peak"], dtype))
        check(r["timing"]["step_ms"]["median"] > 0, "%s: step time %r" % (r["label"], r["timing"]["step_ms"]))
        band = r["timing"]["step_ms"].get("band")
        check(band is not None, "%s: timing.step_ms.band is missing" % r["label"])
        if band is not None:
            check(0 < band["lo"] <= 1 <= band["hi"], "%s: band %r: expected 0 < lo <= 1 <= hi" % (r["label"], band))
            check(band == {"lo": plat["band"]["lo"], "hi": plat["band"]["hi"]},
                  "%s: band %r != the platform's %r" % (r["label"], band, plat["band"]))
    if len(args) > 2 and args[2] == "--same-times":
        other = {r["label"]: r for r in json.load(open(args[3]))["results"] if r["status"] == "ok"}
        for r in oks:
            a = r["timing"]["step_ms"]["median"]
            b = other.get(r["label"], {}).get("timing", {}).get("step_ms", {}).get("median")
            check(b is not None and abs(a - b) <= 1e-9 * abs(a), "%s: step %r then %r" % (r["label"], a, b))
    print("%d ok results checked against %s" % (len(oks), plat["name"]))


def cmd_shared_cores(args):
    def single(path):
        rep = json.load(open(path))
        r = [x for x in rep["results"] if x["label"] == "single" and x["status"] == "ok"]
        check(len(r) == 1, "%s: no ok 'single' result" % path)
        return rep["context"]["world_size"], r[0]["timing"]["step_ms"]["median"] if r else float("nan")
    p1, t1 = single(args[0])
    p2, t2 = single(args[1])
    check(p2 == 2 * p1, "world sizes %d and %d: expected P and 2P" % (p1, p2))
    # Compute shares the core: exactly twice as long. What the ranks do not share (latencies of
    # the step's closing collectives: microseconds against the step's milliseconds) keeps the
    # ratio a little under 2; without core sharing it would be 1.
    check(1.99 <= t2 / t1 <= 2.0, "single: %.6f ms at P=%d, %.6f ms at P=%d: ratio %.6f, expected 2 (two ranks "
          "per core) less the unshared latencies" % (t1, p1, t2, p2, t2 / t1))
    print("single: %.4f ms with one rank per core, %.4f ms with two (ratio %.6f)" % (t1, t2, t2 / t1))


def cmd_decode_memory_bound(args):
    def single(path):
        rep = json.load(open(path))
        r = [x for x in rep["results"] if x["strategy"] == "single" and x["status"] == "ok"]
        check(len(r) == 1, "%s: no ok single result" % path)
        return rep["config"], r[0]
    c1, r1 = single(args[0])
    c2, r2 = single(args[1])
    plat = json.load(open(args[2]))
    check(c1["pass"] == c2["pass"] == "decode" and c2["cached"] == 2 * c1["cached"],
          "expected two decode runs with caches C and 2C, got %s/%s %s/%s" % (c1["pass"], c2["pass"], c1["cached"], c2["cached"]))
    S, B = c1["decode_steps"], c1["batch"]
    # single holds the whole cache: the C more tokens' k and v, read once per step
    added = S * cpmodel.kv_cache_bytes(B, c1["cached"], c1["kv_heads"], c1["head_dim"], cpmodel.elem_bytes(c1["dtype"]))
    want_ms = added / (plat["memory_bw_gbs"] * 1e9) * 1e3
    got_ms = r2["timing"]["step_ms"]["median"] - r1["timing"]["step_ms"]["median"]
    check(abs(got_ms - want_ms) <= 1e-6 * want_ms,
          "decode step grew by %.9f ms from C=%d to 2C, expected %.9f ms (%d more K, V bytes at %g GB/s)"
          % (got_ms, c1["cached"], want_ms, added, plat["memory_bw_gbs"]))
    print("decode: +%.6f ms for %d more cached tokens (expected %.6f)" % (got_ms, c1["cached"], want_ms))


def cmd_recompute(args):
    runs = []
    for path, mode in zip(args, ("none", "selective", "full")):
        rep = json.load(open(path))
        check(rep["config"]["recompute"] == mode, "%s: recompute %s, expected %s" % (path, rep["config"]["recompute"], mode))
        runs.append({r["label"]: r for r in rep["results"] if r["status"] == "ok"})
    check(len(runs) == 3 and runs[0] and set(runs[0]) == set(runs[1]) == set(runs[2]), "three runs of the same jobs expected")
    for label, n in runs[0].items():
        s, f = runs[1][label], runs[2][label]
        fwd = [r["timing"]["fwd_ms"]["median"] for r in (n, s, f)]
        bwd = [r["timing"]["bwd_ms"]["median"] for r in (n, s, f)]
        check(max(fwd) - min(fwd) <= 1e-9 * max(fwd), "%s: forward %s differs between the recompute modes" % (label, fwd))
        check(bwd[0] < bwd[1] < bwd[2], "%s: backward %s not none < selective < full" % (label, bwd))
        check("recompute" not in n["comm"] and "recompute" in s["comm"] and "recompute" in f["comm"],
              "%s: comm.recompute present exactly under a recompute" % label)
        if n["strategy"] == "single":
            check(abs(bwd[2] - bwd[0] - fwd[0]) <= 1e-9 * bwd[2],
                  "single: full recompute added %.9f ms, its forward takes %.9f" % (bwd[2] - bwd[0], fwd[0]))
        print("%s: fwd %.6f ms, bwd none %.6f, selective %.6f, full %.6f" % (label, fwd[0], *bwd))


def cmd_env(args):
    rep = json.load(open(args[0]))
    name, value = args[1].split("=", 1)
    got = rep["context"]["env"].get(name)
    check(got == value, "context.env.%s = %r, expected %r" % (name, got, value))


def cmd_with_op_us(args):
    plat = json.load(open(args[0]))
    plat["network"]["intra"]["op_us"] = float(args[1])
    plat["network"]["inter"]["op_us"] = float(args[2])
    with open(args[3], "w") as f:
        json.dump(plat, f, indent=1)


def cmd_with_interference(args):
    plat = json.load(open(args[0]))
    plat["overlap_interference"] = {"compute_slowdown": float(args[1]), "source": "test input (tests/sim)"}
    with open(args[2], "w") as f:
        json.dump(plat, f, indent=1)


def cmd_with_uncertainty(args):
    plat = json.load(open(args[0]))
    plat["uncertainty"] = {path: {"rel": float(rel), "reason": "test input (tests/sim)"}
                           for path, rel in (a.split("=") for a in args[2:])}
    with open(args[1], "w") as f:
        json.dump(plat, f, indent=1)


def cmd_interference(args):
    reps = [json.load(open(p)) for p in args[:3]]
    x = float(args[3])
    for rep, want in zip(reps, (0.0, x, 2 * x)):
        got = (rep["context"]["simulated"].get("overlap_interference") or {}).get("compute_slowdown", 0.0)
        check(got == want, "context.simulated.overlap_interference.compute_slowdown %s, expected %s" % (got, want))
    results = [{r["label"]: r for r in rep["results"] if r["status"] == "ok"} for rep in reps]
    quiet = overlapped = 0
    for label, r0 in results[0].items():
        c = [res[label]["balance"]["compute_ms_per_rank"] for res in results]
        if r0["strategy"] in ("single", "ulysses"):
            quiet += 1
            check(c[1] == c[0] and c[2] == c[0], "%s: compute per rank %s / %s / %s changed, nothing overlaps" % (label, c[0], c[1], c[2]))
            continue
        overlapped += 1
        for q, (a, b, d) in enumerate(zip(*c)):
            check(0 < b - a < x * a, "%s rank %d: compute %.9f -> %.9f ms at slowdown %s" % (label, q, a, b, x))
            # only the part of a kernel while a transfer's bytes move is slowed, so 2X adds more
            # than X, and at most twice as much (twice when every slowed kernel ends in the window)
            check(b - a < d - a <= 2 * (b - a) * (1 + 1e-9), "%s rank %d: added compute %.9f at 2X, %.9f at X: not in (1, 2] times" % (label, q, d - a, b - a))
        print("%s: compute x%.4f at slowdown %s, x%.4f at %s" % (label, c[1][0] / c[0][0], x, c[2][0] / c[0][0], 2 * x))
    check(quiet >= 1 and overlapped >= 1, "%d results without overlap, %d with" % (quiet, overlapped))


def cmd_nccl_collectives(args):
    rep = json.load(open(args[0]))
    net = json.load(open(args[1]))["network"]
    need = int(args[args.index("--min") + 1]) if "--min" in args else 3
    bw_i, lat_i = net["intra"]["bw_gbs"] * 1e3, net["intra"]["lat_us"]  # bytes per us, us
    bw_e = net["inter"]["bw_gbs"] * 1e3
    lat_e = net["inter"]["lat_us"] + net["inter"].get("fabric_lat_us", 0)
    # one NCCL operation's fixed cost, once per collective (no NCCL curve on these test platforms)
    op_i, op_e = net["intra"].get("op_us", 0), net["inter"].get("op_us", 0)
    check("nccl" not in net["intra"], "nccl-collectives checks the links' formula: use a platform without an NCCL curve")
    checked = 0
    for r in rep["results"]:
        if r["status"] != "ok":
            continue
        for o in r["comm"]["bwd"]["ops"]:
            if o["op"] not in ("all_to_all", "all_gather", "reduce_scatter"):
                continue
            g = o["group_size"]
            n = min(g, net["gpus_per_node"])
            b = o["bytes_sent"] / o["count"]
            c = b / (g - 1)
            if o["op"] == "all_to_all":
                want = lat_i + (n - 1) * c / bw_i
                if g > n:
                    want = max(want, lat_e + (g - n) * c / bw_e)
            else:
                want = (g - 1) * ((lat_i + c / bw_i) if g == n else (lat_e + c / bw_e))
            want += op_i if g == n else op_e
            got = o["time_ms"] * 1e3 / o["count"]
            checked += 1
            check(abs(got - want) <= 5e-3 * want,
                  "%s %s over %s (g = %d, %d per node, %.0f B per call): %.4f us per call, NCCL's algorithm takes %.4f us"
                  % (r["label"], o["op"], o["group"], g, n, b, got, want))
            print("%s %s g=%d: %.4f us per call, expected %.4f" % (r["label"], o["op"], g, got, want))
    check(checked >= need, "%d collectives checked, expected at least %d" % (checked, need))


def main():
    {"simulated": cmd_simulated, "shared-cores": cmd_shared_cores, "decode-memory-bound": cmd_decode_memory_bound,
     "env": cmd_env, "with-interference": cmd_with_interference,
     "with-uncertainty": cmd_with_uncertainty, "interference": cmd_interference,
     "nccl-collectives": cmd_nccl_collectives, "with-op-us": cmd_with_op_us, "recompute": cmd_recompute}[sys.argv[1]](sys.argv[2:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
