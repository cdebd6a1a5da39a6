#!/usr/bin/env python3
"""Generate valid synthetic cpbench reports (schema 14, or 13 / 12 / 11 / 10 / 9 / 8 / 7 / 6 / 5 / 4 / 3 with schema_version=13 / 12 / 11 / 10 / 9 / 8 / 7 / 6 / 5 / 4 / 3) for testing the report tools.

The numbers are made up but consistent: communication bytes follow DESIGN's analytic model
(scripts/cpmodel.py) and the ops add up to them, percentiles come from the samples, the FLOPs
(cpmodel), TFLOP/s/MFU/HFU, overlap ratios and imbalance follow DESIGN's formulas, so scripts/validate_report.py accepts the result. Tests
break one thing at a time on top of it.

Library use:  make_report(strategies=["ring", "usp[u2xr2]"], seqs=[1024, 2048], step_ms=10.0)
Command line: make_synthetic_report.py -o report.json --strategies ring,ulysses --seqs 1024,2048
"""
import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))
import cpmodel  # noqa: E402

# Default shape: a small Llama-like layer on the CPU backend.
SHAPE = dict(batch=1, heads=8, kv_heads=4, head_dim=16, dim=128)
DEFAULT_STRATEGIES = ["single", "megatron-sp", "ulysses", "ring", "ring-zigzag", "usp[u2xr2]", "allgather-kv"]


def mesh_block(U, R, tp=1):
    """A result's mesh: degrees, placement and levels innermost first (schema 3)."""
    return {"tp": tp, "ulysses": U, "ring": R, "placement": "ulysses-inner",
            "levels": [{"name": "tp", "size": tp}, {"name": "ulysses", "size": U}, {"name": "ring", "size": R}]}


def parse_label(label, P):
    """'usp[u2xr2]' -> ('usp', U=2, R=2); other names -> (name, 1, P)."""
    m = re.fullmatch(r"([a-z0-9-]+)(?:\[u(\d+)xr(\d+)\])?", label)
    if not m:
        raise ValueError(f"bad strategy label {label!r}")
    name = m.group(1)
    if m.group(2):
        return name, int(m.group(2)), int(m.group(3))
    if name == "usp":
        return name, P, 1
    return name, 1, P


def comm_terms(name, shape, N, P, U, R, s, s_acc):
    """DESIGN's model (scripts/cpmodel.py) as a list of ops per phase: {phase: [(op, group, g,
    count, bytes)]}. The KV width is G*d (the synthetic shapes never replicate KV heads)."""
    B, H, G, d, D = shape["batch"], shape["heads"], shape["kv_heads"], shape["head_dim"], shape["dim"]
    T = cpmodel.tokens_per_rank(B, N, P)
    hq, hk = H * d, G * d
    fwd, bwd = [], []

    def a2a(g, q_cols, kv_cols, count):  # all_to_all of q and o, or of k and v, over g ranks
        return ("all_to_all", "ulysses", g, count, cpmodel.ulysses_a2a_bytes(T, q_cols, kv_cols, g, s))

    def ring(g):  # k|v blocks g-1 hops (two sends a hop), the accumulators g sends more backward
        kv_f, kv_b = cpmodel.ring_kv_bytes(T, hk, g - 1, s, s_acc)
        fwd.extend([("send", "ring", g, 2 * (g - 1), kv_f), ("recv", "ring", g, 2 * (g - 1), 0)])
        bwd.extend([("send", "ring", g, 2 * (g - 1) + 2 * g, kv_b), ("recv", "ring", g, 2 * (g - 1) + 2 * g, 0)])

    if name == "single":
        pass
    elif name == "megatron-sp":  # per collective: all-gather xn, reduce-scatter; bwd gathers twice
        ag = cpmodel.tp_collective_bytes(T, D, P, s)
        fwd += [("all_gather", "tp", P, 1, ag), ("reduce_scatter", "tp", P, 1, ag)]
        bwd += [("all_gather", "tp", P, 2, 2 * ag), ("reduce_scatter", "tp", P, 1, ag)]
    elif name == "ulysses":
        fwd += [a2a(P, hq, 0, 2), a2a(P, 0, hk, 2)]
        bwd += [a2a(P, hq, 0, 2), a2a(P, 0, hk, 2)]
    elif name in ("ring", "ring-zigzag", "ring-striped"):
        ring(P)
    elif name == "usp":
        for ph in (fwd, bwd):
            if U > 1:
                ph += [a2a(U, hq, 0, 2), a2a(U, 0, hk, 2)]
        if R > 1:
            ring(R)
    elif name == "allgather-kv":
        kv, both = cpmodel.allgather_kv_bytes(T, hk, P, s, s_acc)
        fwd += [("all_gather", "world", P, 2, kv)]
        bwd += [("all_gather", "world", P, 2, kv), ("reduce_scatter", "world", P, 2, both - kv)]
    else:
        raise ValueError(f"no communication model for {name!r}")
    if P == 1:  # a group of one rank sends nothing
        fwd, bwd = [], []
    return {"fwd": fwd, "bwd": bwd}


def percentile(sorted_vals, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_vals) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def stats(median, spread, iters):
    """Samples whose p10..p90 band is `spread` x median around `median`."""
    if iters == 1:
        samples = [median]
    else:
        # Evenly spaced over +-0.625*spread: linear percentiles give p10/p90 = median*(1 -+ spread/2).
        us = [-0.625 + 1.25 * i / (iters - 1) for i in range(iters)]
        order = sorted(range(iters), key=lambda i: (i * 7919) % iters)  # deterministic shuffle
        samples = [median * (1 + spread * us[i]) for i in order]
    sv = sorted(samples)
    return {"median": percentile(sv, 0.5), "p10": percentile(sv, 0.1), "p90": percentile(sv, 0.9),
            "min": sv[0], "max": sv[-1], "samples": samples}


def _lookup(value, label, seq, seq0, default):
    """value: number, {label: number} or {(label, seq): number}; numbers scale as (seq/seq0)^1.5."""
    if value is None:
        value = default
    if isinstance(value, dict):
        if (label, seq) in value:
            return value[(label, seq)]
        v = value.get(label, default)
    else:
        v = value
    return v * (seq / seq0) ** 1.5


def _ok_result(name, label, seq, U, R, P, cfg, step, spread, comm_scale):
    s = cpmodel.elem_bytes(cfg["dtype"])
    terms = comm_terms(name, SHAPE, seq, P, U, R, s, cpmodel.ACC_BYTES)
    timing = {"fwd_ms": stats(step * 0.35, spread, cfg["iters"]),
              "bwd_ms": stats(step * 0.65, spread, cfg["iters"]),
              "step_ms": stats(step, spread, cfg["iters"])}
    comm = {}
    comm_total_ms = 0.0
    for phase, ops in terms.items():
        predicted = sum(o[4] for o in ops)
        measured = int(predicted * comm_scale)
        op_list = []
        for i, (op, group, g, count, nbytes) in enumerate(ops):
            if i == 0:
                nbytes += measured - predicted  # a planted mismatch lands on the first op
            t = 0.02 * step * (i + 1) / len(ops)
            busbw = nbytes / (t * 1e6) if t > 0 else 0.0
            if op in ("all_to_all", "all_gather", "reduce_scatter") and g > 1:
                algbw = busbw * g / (g - 1)
            elif op == "send":
                algbw = busbw
            elif op == "recv":
                algbw = busbw = 0.0  # bytes received are not modelled here
            else:
                algbw = 0.0
            op_list.append({"op": op, "group": group, "group_size": g, "count": count, "bytes_sent": nbytes,
                            "time_ms": t, "algbw_gbps": algbw, "busbw_gbps": busbw})
        per_rank = [measured] * P
        phase_ms = sum(o["time_ms"] for o in op_list)
        comm_total_ms += phase_ms
        # One node: every byte stays on it.
        tiers = {"intra_node_bytes": measured, "inter_node_bytes": 0,
                 "per_rank": [{"intra_node_bytes": b, "inter_node_bytes": 0} for b in per_rank]}
        comm[phase] = {"bytes_sent": measured, "per_rank": per_rank, "predicted_bytes": predicted,
                       "matches_model": measured == predicted, "time_ms": phase_ms, "ops": op_list,
                       "tiers": tiers}

    per_overlap = []
    compute = []
    for rank in range(P):
        if comm_total_ms > 0:
            standalone = comm_total_ms * (1 + 0.01 * rank)
            exposed = standalone * (0.3 + 0.05 * rank)
            ratio = min(1.0, max(0.0, 1 - exposed / standalone))
        else:  # no communication: the replay times layout work only; nothing to hide
            standalone, exposed, ratio = 0.001 * step, 0.002 * step, 1.0
        hta = 0.5 if comm_total_ms > 0 else 1.0
        per_overlap.append({"comm_standalone_ms": standalone, "exposed_comm_ms": exposed, "ratio": ratio,
                            "hta_ratio": hta})
        compute.append(step - exposed)
    overlap = {"comm_standalone_ms": max(p["comm_standalone_ms"] for p in per_overlap),
               "exposed_comm_ms": max(p["exposed_comm_ms"] for p in per_overlap),
               # schema 3: null for a job that sends nothing
               "ratio": (None if all(b == 0 for ph in comm.values() for b in ph["per_rank"])
                         else min(p["ratio"] for p in per_overlap)),
               "hta_ratio": min(p["hta_ratio"] for p in per_overlap), "per_rank": per_overlap}

    B, H, G, d, D = SHAPE["batch"], SHAPE["heads"], SHAPE["kv_heads"], SHAPE["head_dim"], SHAPE["dim"]
    T = B * seq // P
    gemm = cpmodel.gemm_flops(T, (H + 2 * G) * d, D) + cpmodel.gemm_flops(T, H * d, D)  # w_qkv, w_o
    pairs = cpmodel.full_mask_pairs(seq, cfg["causal"]) / P
    attn = cpmodel.attn_fwd_flops(B, H, d, pairs)
    model, hardware = cpmodel.layer_flops(gemm, attn)
    peak = 0.05
    step_s = timing["step_ms"]["median"] * 1e-3
    tflops = model / step_s / 1e12

    act = T * (4 * D + (H + 2 * G) * d) * 4
    weights = (D + D * (H + 2 * G) * d + H * d * D) * 4 * 2
    comm_buf = max(comm["fwd"]["bytes_sent"], comm["bwd"]["bytes_sent"]) // max(1, P - 1)
    per_mem = [weights + act + comm_buf + 4096 * r for r in range(P)]
    mean = sum(compute) / P
    # Schema 4: nothing to flag unless the rate exceeds the peak; the layer's FLOPs are the ranks'.
    flags = [f"tflops_over_peak: {tflops:g} TFLOP/s > peak {peak:g} TFLOP/s (calibrated-gemm)"] if tflops > peak else []
    return {
        "strategy": name, "label": label, "seq": seq,
        "integrity": {"ok": not flags, "flags": flags, "expected_flops": model * P},
        "mesh": mesh_block(U, R),
        "status": "ok",
        "timing": timing, "comm": comm, "overlap": overlap,
        "flops": {"model": model, "hardware": hardware},
        "tflops": tflops, "mfu": tflops / peak, "hfu": hardware / step_s / (peak * 1e12),
        "peak": {"tflops": peak, "source": "calibrated-gemm"},
        "memory": {"peak_bytes": max(per_mem), "per_rank": per_mem, "weights": weights, "activations": act,
                   "comm_buffers": comm_buf, "activation_estimate_bytes": act,
                   "timed_allocations": 0},
        "balance": {"compute_ms_per_rank": compute, "imbalance": max(compute) / mean if mean > 0 else 1.0,
                    "model_flops_per_rank": [model] * P, "flops_imbalance": 1.0},
    }


def _verify_block(passed, tol):
    rel = 3e-7 if passed else 2.5e-3
    tensors = {"y": rel / 3, "dx": rel, "dq": rel / 2, "dk": rel / 2, "dv": rel / 4, "lse": rel / 10}
    return {"passed": passed, "max_rel_l2": rel, "tolerance": tol, "tensors": tensors}


def make_report(strategies=None, seqs=(1024, 2048), world_size=4, step_ms=10.0, spread=0.02,
                verify=None, command="run", skipped=None, failed=None, iters=10, comm_scale=1.0,
                dtype="fp32", causal=True, schema_version=14):
    """A schema-valid report.

    strategies  labels ('ring', 'usp[u2xr2]', ...); default: DEFAULT_STRATEGIES
    step_ms     median step time at the smallest seq: a number, {label: ms} or {(label, seq): ms};
                numbers for a label scale as (seq/seqs[0])^1.5 for larger seqs
    spread      (p90 - p10) / median of every timing
    verify      None (no verify block), True/False for all, or {label: bool} (missing labels: none)
    command     'run' or 'verify' (verify: results carry status and verify only)
    skipped     {label: reason} reported as skipped at every seq (or {(label, seq): reason})
    failed      {label: reason} reported as failed
    comm_scale  measured bytes = predicted x comm_scale (1.0: matches the model)
    schema_version  14; 13, 12, 11, 10, 9, 8, 7, 6, 5 or 4 (the same: schema 14 only added
                    --recompute selective, the optional comm.recompute and model_estimate's
                    core_activations under --block full, schema 13 the optional
                    results[].numerics of verify --numerics, schema 12 dtype fp8 and
                    the optional config.fp8_scaling, schema 11 the simulator's optional
                    attn_decode class, schema 10 the optional config.attention
                    and config.mla, schema 9 the optional config.uneven_heads,
                    schema 8 the optional config.sinks, schema 7 --shard's fields and results[].step
                    under --block full, schema 6 only let a simulated report's GEMM table be a grid,
                    schema 5 only added the optional mlp_tp, none of which this report uses); or 3,
                    the same without what schema 4 added (results[].integrity)
    """
    strategies = list(strategies or DEFAULT_STRATEGIES)
    seqs = list(seqs)
    skipped, failed = dict(skipped or {}), dict(failed or {})
    P = world_size
    names = []
    for lab in strategies:
        n = parse_label(lab, P)[0]
        if n not in names:
            names.append(n)
    cfg = {
        "command": command, "model": "custom", "batch": SHAPE["batch"], "heads": SHAPE["heads"],
        "kv_heads": SHAPE["kv_heads"], "head_dim": SHAPE["head_dim"], "dim": SHAPE["dim"],
        "block": "attn", "ffn_dim": None, "causal": causal, "rope": True, "dtype": dtype, "backend": "cpu" if dtype == "fp32" else "cuda",
        "comm": "mpi" if dtype == "fp32" else "nccl", "threads": 1, "world_size": P, "seqs": seqs,
        "warmup": 2, "iters": iters, "seed": 42, "strategies": names,
        "mesh": {"ulysses": None, "ring": None, "placement": "ulysses-inner", "all": False},
        "mask": {"causal": causal, "window": 0, "docs": None}, "pass": "train", "mem_limit_bytes": 0,
        "timeout_s": 600, "ranks_per_node": None,
    }
    tol = 1e-5 if dtype == "fp32" else 2e-2
    results = []
    for seq in seqs:
        for lab in strategies:
            name, U, R = parse_label(lab, P)
            ident = {"strategy": name, "label": lab, "seq": seq,
                     "mesh": mesh_block(U, R)}
            skip = skipped.get((lab, seq), skipped.get(lab))
            fail = failed.get((lab, seq), failed.get(lab))
            if skip:
                results.append({**ident, "status": "skipped", "reason": skip})
                continue
            if fail:
                results.append({**ident, "status": "failed", "reason": fail})
                continue
            v = verify.get(lab) if isinstance(verify, dict) else verify
            if command == "verify":
                r = {**ident, "status": "ok"}
                if v is None:
                    v = True  # an ok result of a verify report always carries verify
            else:
                step = _lookup(step_ms, lab, seq, seqs[0], 10.0)
                r = _ok_result(name, lab, seq, U, R, P, cfg, step, spread, comm_scale)
            if v is not None:
                r["verify"] = _verify_block(bool(v), tol)
                if not v:
                    r["status"] = "failed"
                    r["reason"] = f"verification failed: dx rel_l2 {r['verify']['max_rel_l2']:g} > {tol:g}"
            results.append(r)
    if schema_version == 3:
        for r in results:
            r.pop("integrity", None)
    rep = {
        "schema_version": schema_version,
        "tool": {"name": "cpbench", "version": "0.1.0"},
        "complete": True,
        "context": {
            "date": "2025-01-31T12:00:00Z", "hosts": ["node0"], "world_size": P, "ranks_per_node": P,
            "nodes": {"source": "host", "node_of_rank": [0] * P},
            "cpu": {"model": "Synthetic CPU", "cores": 2},
            "gpus": [] if cfg["backend"] == "cpu" else ["NVIDIA H200"],
            "versions": {"mpi": "Open MPI v4.1.4", "nccl": None if cfg["backend"] == "cpu" else "2.21.5",
                         "cuda": None if cfg["backend"] == "cpu" else "12.4",
                         "compiler": "GNU 12.2.0", "blas": "OpenBLAS 0.3.21"},
            "git_sha": "0123456789abcdef0123456789abcdef01234567",
            "argv": ["cpbench", command, "--seq", ",".join(str(s) for s in seqs)],
            "env": {"OMP_NUM_THREADS": "1"},
        },
        "config": cfg,
        "results": results,
    }
    if cfg["comm"] == "nccl":  # what went through NCCL (bench/report.cpp nccl_context)
        ops = ("all_to_all", "all_gather", "reduce_scatter", "send", "recv", "barrier")
        rep["context"]["nccl"] = {
            "used": True, "communicators": 1, "one_rank_mode": False, "version": "2.21.5",
            "calls_through_nccl": {op: 4 for op in ops}, "calls_local": {op: 0 for op in ops}}
    return rep


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a synthetic, schema-valid cpbench report.")
    ap.add_argument("-o", "--out", help="output file (default: stdout)")
    ap.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES), help="labels, comma separated")
    ap.add_argument("--seqs", default="1024,2048", help="sequence lengths, comma separated")
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--step-ms", type=float, default=10.0, help="median step time at the smallest seq")
    ap.add_argument("--spread", type=float, default=0.02, help="(p90 - p10) / median")
    ap.add_argument("--verify", choices=["none", "pass", "fail"], default="none")
    ap.add_argument("--command", choices=["run", "verify"], default="run")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args(argv)
    rep = make_report(strategies=args.strategies.split(","), seqs=[int(s) for s in args.seqs.split(",")],
                      world_size=args.world_size, step_ms=args.step_ms, spread=args.spread,
                      verify={"none": None, "pass": True, "fail": False}[args.verify],
                      command=args.command, iters=args.iters)
    text = json.dumps(rep, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
