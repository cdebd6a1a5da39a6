#!/usr/bin/env python3
"""Assertions on real cpbench reports and traces, used by the MPI tests (tests/mpi/reports.cmake).

  check_report.py layout REPORT [--min-ok N]         --balance doc-zigzag|greedy: the layout rebuilt here, its visible
                                                     pairs per rank, bytes from K_eff found by brute force on it
  check_report.py resample REPORT [--min-ok N]       --docs-resample: every pack drawn as the sampler says (seed + i),
                                                     its bytes = its model, the last pack described by comm/balance
  check_report.py model REPORT [--min-ok N]          every result ok (or skipped with a reason), and
                                                     measured bytes == the analytic model, fwd and bwd;
                                                     timing.step_ms.band only on a simulated report
  check_report.py memory P1.json P4.json STRAT...    peak activation bytes at P=4 within 20% of 1/4 of P=1
  check_report.py weights P1.json P4.json STRAT      peak weight bytes at P=4 within 20% of 1/4 of P=1
  check_report.py balance REPORT --above ring=1.4 --below ring-zigzag=1.02 ...   on flops_imbalance
  check_report.py trace TRACE --ranks P              Chrome trace: one process per rank, compute and comm tracks
  check_report.py hops REPORT --min-ok N --min-cut C
                                                     double rings (double-ring, usp with an inner ring): rank 0's
                                                     sends and bytes on ring_inner / ring_outer equal the truncated
                                                     schedule rebuilt here from the mask, and at least C results
                                                     send fewer K,V blocks and bytes than the full double ring
  check_report.py console REPORT CONSOLE --min-dash N --min-pct M
                                                     the run table printed with REPORT: a job that sends no byte
                                                     shows '–' for overlap and hta (N rows at least) and reads 1
                                                     (or null) for both on every rank; every other job shows the
                                                     report's ratio and hta_ratio in % (M rows at least)
  check_report.py plan REPORT PLAN_MD --min-cross N
                                                     scripts/plan.py's Markdown for REPORT: every ok result's
                                                     tier columns equal the report's comm.*.tiers (per rank
                                                     fwd + bwd, maximum over ranks), N rows at least with bytes
                                                     to other nodes
  check_report.py estimate FULL.json [FULL2.json ...] --attn ATTN.json
                                                     [--shards none,optimizer,...]
                                                     memory.model_estimate: under --block full every ok result's
                                                     parameters equal DESIGN's block (rebuilt here from the config,
                                                     1/t of the projections under megatron-sp's t = P) x layers +
                                                     2 V D / t (V from configs/models/),
                                                     activations by config.recompute, total = the sum, megatron-sp's
                                                     projections 1/P of the others'; null under --block attn;
                                                     under config.shard the groups, the 2/2/12 B states and (train)
                                                     results[].step's gradient sync bytes counted again here from
                                                     the shape and the mesh (cpmodel.weight_groups); --shards: each
                                                     choice named must have a result that syncs (P > 1)
  check_report.py integrity REPORT CONSOLE --kinds K[,K...] [--min-ok N]
                                                     results[].integrity: every ok result carries exactly the flag
                                                     kinds K (none: '' ), each once, ok false exactly then; the
                                                     console printed with REPORT marks each flagged row 'ok!' and
                                                     lists every flag under the table as '! LABEL seq=N: FLAG'
Prints 'N passed, M failed' and exits 1 on any failure.
"""
import argparse
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))
import cpmodel  # noqa: E402  (DESIGN's byte, memory and FLOP model, written once: scripts/cpmodel.py)

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", msg)
    return bool(cond)


def ok_results(rep):
    return [r for r in rep["results"] if r["status"] == "ok"]


def by_label(rep):
    return {r["label"]: r for r in ok_results(rep)}


def value_dim(cfg):
    """The values' (and outputs') head dim: MLA's d_v (config.mla, schema 10), else head_dim."""
    return (cfg.get("mla") or {}).get("d_v", cfg["head_dim"])


def latent_cache_width(cfg):
    """MLA's decode caches one latent row per token, r_kv + d_rope values (DESIGN "Decode"); None
    for every other cache (k, v per KV head)."""
    m = cfg.get("mla")
    return m["kv_rank"] + m["d_rope"] if m and cfg["pass"] == "decode" else None


def head_ring_split(r, P):
    """(t, U, R) of a result: the ranks its heads (t*U) and its cache's tokens (R) are split over
    (cpmodel.head_ring_split)."""
    return cpmodel.head_ring_split(r["strategy"], r["mesh"], P)


def mlp_level_check(r, want):
    """Rank 0's ops on the group "mlp_tp" (the MLP's own level, and Helix's w_o) add up to the
    model's bytes on that level, per phase; without an own MLP level nothing is on it."""
    fb = want.get("mlp_tp", (0, 0))
    for i, ph in enumerate(("fwd", "bwd")):
        got = sum(op["bytes_sent"] for op in r["comm"][ph]["ops"] if op["group"] == "mlp_tp")
        check(got == fb[i], f"{r['label']} seq={r['seq']} {ph}: {got} bytes on mlp_tp, model {fb[i]}")


def fit_check(r, cfg, P):
    """inference.max_cached_tokens recomputed (DESIGN: weights bf16 of L blocks + 2 V D, one step's
    measured memory = peak - weights - the cache shard, L layers of 2 B G d s per cached token held,
    times the ranks sharing the cache): present exactly under --block full with a capacity."""
    inf = r["inference"]
    cap = cfg["mem_limit_bytes"] or inf.get("memory_capacity_bytes")
    if cfg["block"] != "full" or not cap:
        check(inf.get("max_cached_tokens") is None, f"{r['label']}: max_cached_tokens {inf.get('max_cached_tokens')} without a whole block and a capacity")
        return
    L, V, D = cfg["layers"], preset_vocab(cfg["model"]), cfg["dim"]
    t, U, R = head_ring_split(r, P)
    mem = r["memory"]
    step = max(0, mem["peak_bytes"] - mem["weights"] - inf["kv_cache_bytes"])
    # The shard a rank holds: with a cache, usp's C/R for max(G,tU)/(tU) heads; without one
    # (prefill, C = 0) the harness assumes every KV head over P ranks.
    (tc, Uc), shards = ((t, U), R) if cfg.get("cached") else ((1, 1), 1 if r["strategy"] == "single" else P)
    per_token = cpmodel.kv_cache_bytes(cfg["batch"], 1, cfg["kv_heads"], cfg["head_dim"],
                                       cpmodel.elem_bytes(cfg["dtype"]), tc, Uc, dv=value_dim(cfg),
                                       latent=latent_cache_width(cfg))
    want = cpmodel.longest_cache(cap, L, block_parameters(cfg, t), V, D, step, per_token, shards)
    check(inf["memory_capacity_bytes"] == cap and inf["max_cached_tokens"] == want,
          f"{r['label']}: max_cached_tokens {inf['max_cached_tokens']} (capacity {inf['memory_capacity_bytes']}), expected {want}")


def recompute_check(r, cfg):
    """--recompute (DESIGN "Recompute"), from the measured forward, apart from the C++ model: the
    repeated forward sends what the forward sent, call for call on rank 0 (op, group, calls, bytes);
    selective repeats the attention core's calls only, leaving out the tp level's (the gathers and
    reduce-scatters around w_qkv and w_o) and the MLP's (on tp or mlp_tp), which the same amount on
    every rank. Absent exactly without a recompute."""
    mode = cfg.get("recompute")
    rec = r["comm"].get("recompute")
    check((rec is not None) == (mode in ("selective", "full")),
          f"{r['label']}: comm.recompute {'present' if rec else 'absent'} under recompute {mode!r}")
    if rec is None:
        return
    skip = ("tp", "mlp_tp") if mode == "selective" else ()
    key = lambda op: (op["op"], op["group"], op["group_size"], op["count"], op["bytes_sent"])  # noqa: E731
    fwd_ops = [key(op) for op in r["comm"]["fwd"]["ops"] if op["group"] not in skip]
    check(sorted(key(op) for op in rec["ops"]) == sorted(fwd_ops),
          f"{r['label']} seq={r['seq']}: recompute ({mode}) ops {[key(op) for op in rec['ops']]} != the forward's {fwd_ops}")
    flags = [f for f in r["integrity"]["flags"] if f.startswith("flops_mismatch")]
    check(not flags and r["flops"]["hardware"] > r["flops"]["model"],
          f"{r['label']}: a repeated forward's FLOPs are hardware FLOPs only: {flags}, {r['flops']}")
    left_out = sum(op["bytes_sent"] for op in r["comm"]["fwd"]["ops"] if op["group"] in skip)
    want = [b - left_out for b in r["comm"]["fwd"]["per_rank"]]
    check(rec["per_rank"] == want,
          f"{r['label']} seq={r['seq']}: recompute ({mode}) bytes {rec['per_rank']} != the forward's less its tp and "
          f"MLP calls {want}")


def cmd_model(a):
    rep = json.load(open(a.report))
    oks = ok_results(rep)
    check(len(oks) >= a.min_ok, f"{len(oks)} ok results, expected at least {a.min_ok}")
    for r in rep["results"]:
        if r["status"] != "ok":
            check(r["status"] == "skipped" and r.get("reason"), f"{r['label']}: status {r['status']} {r.get('reason')}")
            continue
        for ph in [ph for ph in ("fwd", "bwd", "recompute") if ph in r["comm"]]:
            c = r["comm"][ph]
            # One figure for every rank, or each rank's own (ring --balance dynamic).
            want = c.get("predicted_per_rank") or [c["predicted_bytes"]] * len(c["per_rank"])
            check(c["matches_model"] and c["per_rank"] == want and c["predicted_bytes"] == max(want),
                  f"{r['label']} seq={r['seq']} {ph}: measured {c['per_rank']} != predicted {want}")
            t = c["tiers"]
            check("predicted" in t and [(x["intra_node_bytes"], x["inter_node_bytes"]) for x in t["per_rank"]] ==
                  [(x["intra_node_bytes"], x["inter_node_bytes"]) for x in t.get("predicted", [])],
                  f"{r['label']} seq={r['seq']} {ph}: bytes by tier {t['per_rank']} != predicted {t.get('predicted')}")
            check(sum(op["bytes_sent"] for op in c["ops"]) == c["per_rank"][0],
                  f"{r['label']} {ph}: ops of rank 0 do not add up to its bytes")
        if r["strategy"] != "single" and rep["config"]["world_size"] > 1:
            check(r["comm"]["fwd"]["bytes_sent"] > 0, f"{r['label']}: no bytes sent at P>1")
        recompute_check(r, rep["config"])
        cfg = rep["config"]
        if (r["strategy"] in ("ring", "ring-zigzag", "ring-striped") and cfg["pass"] == "train" and cfg["block"] == "attn"
                and not cfg["mask"]["window"] and not cfg["mask"]["docs"] and cfg.get("balance", "none") == "none"):
            # The full ring from cpmodel, independent of the C++ model: K,V P-1 hops each way and the
            # dK,dV accumulators P sends of s_acc (config.acc_dtype: 2 for bf16, else 4).
            # --mla-travel latent: the block is MLA's latent, r_kv + d_rope values per token.
            P = cfg["world_size"]
            hk, hv = cfg["kv_heads"] * cfg["head_dim"], cfg["kv_heads"] * value_dim(cfg)
            if (cfg.get("mla") or {}).get("travel") == "latent":
                hk, hv = cpmodel.mla_latent_row(cfg["mla"]), 0
            fb = cpmodel.ring_kv_bytes(cpmodel.tokens_per_rank(cfg["batch"], r["seq"], P), hk,
                                       P - 1, cpmodel.elem_bytes(cfg["dtype"]), acc=cpmodel.acc_bytes(cfg.get("acc_dtype")),
                                       hv=hv, comm_dtype=cfg.get("comm_dtype"), scaling=cfg.get("fp8_scaling") or "block")
            for ph, want in zip(("fwd", "bwd"), fb):
                check(r["comm"][ph]["per_rank"] == [want] * P,
                      f"{r['label']} seq={r['seq']} {ph} (acc_dtype {cfg.get('acc_dtype')}): {r['comm'][ph]['per_rank']} != cpmodel {want}")
        if r["strategy"] == "allgather-kv" and cfg["pass"] == "train" and cfg["block"] == "attn":
            # cpmodel's allgather-kv (K,V gathered in each pass, encoded under --comm-dtype; dK,dV
            # reduce-scattered at s_acc), apart from the C++ model; a mask changes nothing here.
            P = cfg["world_size"]
            fb = cpmodel.allgather_kv_bytes(cpmodel.tokens_per_rank(cfg["batch"], r["seq"], P),
                                            cfg["kv_heads"] * cfg["head_dim"], P, cpmodel.elem_bytes(cfg["dtype"]),
                                            acc=cpmodel.acc_bytes(cfg.get("acc_dtype")), hv=cfg["kv_heads"] * value_dim(cfg),
                                            comm_dtype=cfg.get("comm_dtype"), scaling=cfg.get("fp8_scaling") or "block")
            for ph, want in zip(("fwd", "bwd"), fb):
                check(r["comm"][ph]["per_rank"] == [want] * P,
                      f"{r['label']} seq={r['seq']} {ph} (comm_dtype {cfg.get('comm_dtype')}): {r['comm'][ph]['per_rank']} != cpmodel {want}")
        latent_travel = (cfg.get("mla") or {}).get("travel") == "latent"
        encoded = cfg.get("comm_dtype") not in (None, "run")
        if (r["strategy"] in ("ulysses", "usp", "double-ring") and (latent_travel or encoded) and cfg["pass"] == "train"
                and not (latent_travel and r["mesh"].get("inner_ring")) and not cfg["mask"]["window"]
                and not cfg["mask"]["docs"]):
            # MLA's latent on a Ulysses level (cpmodel, apart from the C++ model): the tp level's terms, q and o
            # by all-to-all, the latent all-gathered (its float32 gradient reduce-scattered), then the ring
            # level's latent blocks of the ring index's t*U*T tokens, R-1 hops. --comm-dtype (usp's ring
            # level, double-ring): the all-to-alls in the run dtype, the ring's k|v blocks encoded
            # (kv_transit_bytes), on a double ring of inner rings of w (mesh.inner_ring) the full schedule.
            P, t = cfg["world_size"], r["mesh"].get("tp") or 1
            U, R = r["mesh"]["ulysses"], r["mesh"]["ring"]
            T = cpmodel.tokens_per_rank(cfg["batch"], r["seq"], P)
            want = cpmodel.levels_total(cpmodel.ulysses_ring_bytes(
                T, T, cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["dim"], t, U, R, cpmodel.elem_bytes(cfg["dtype"]),
                cfg["block"], acc=cpmodel.acc_bytes(cfg.get("acc_dtype")), mesh=r["mesh"], dv=value_dim(cfg),
                latent=cpmodel.mla_latent_row(cfg["mla"]) if latent_travel else 0, w=r["mesh"].get("inner_ring") or 0,
                comm_dtype=cfg.get("comm_dtype"), scaling=cfg.get("fp8_scaling") or "block"))
            for i, ph in enumerate(("fwd", "bwd")):
                check(r["comm"][ph]["per_rank"] == [want[i]] * P,
                      f"{r['label']} seq={r['seq']} {ph} (latent {latent_travel}, comm_dtype {cfg.get('comm_dtype')}): "
                      f"{r['comm'][ph]['per_rank']} != cpmodel {want[i]}")
        check(r["flops"]["model"] > 0 and r["flops"]["hardware"] >= r["flops"]["model"], f"{r['label']}: flops {r['flops']}")
        if (cfg.get("mla") or {}).get("travel") == "latent":
            # Latent travel's buffers (the latent, its gradient, a received block expanded, a Ulysses
            # member's gathered latent; no k, v of its own there): the estimate is the allocation.
            m = r["memory"]
            check(m["activation_estimate_bytes"] == m["activations"] + m["comm_buffers"],
                  f"{r['label']}: activation estimate {m['activation_estimate_bytes']} != measured "
                  f"{m['activations']} + {m['comm_buffers']}")
        silent = all(b == 0 for c in r["comm"].values() for b in c["per_rank"])
        ratio = r["overlap"]["ratio"]
        check((ratio is None) if silent else (ratio is not None and 0 <= ratio <= 1),
              f"{r['label']}: overlap ratio {ratio} (null exactly when nothing is sent)")
        if r["strategy"] == "megatron-sp" and rep["config"]["pass"] != "decode":  # DESIGN's formula, from
            cfg = rep["config"]                                                   # cpmodel (decode's: below)
            P = cfg["world_size"]
            fb = cpmodel.for_pass(cpmodel.levels_total(cpmodel.megatron_sp_bytes(
                cfg["batch"], r["seq"], cfg["dim"], P, cpmodel.elem_bytes(cfg["dtype"]), cfg["block"], r["mesh"])), cfg["pass"])
            for ph, want in zip(("fwd", "bwd"), fb):
                check(r["comm"][ph]["per_rank"] == [want] * P,
                      f"{r['label']} seq={r['seq']} {ph} (block {cfg['block']}): {r['comm'][ph]['per_rank']} != {want}")
        # timing.step_ms.band: the simulated platform's, on a simulated report only.
        sim_band = rep["context"].get("simulated", {}).get("band")
        band = r["timing"]["step_ms"].get("band")
        check(band == ({"lo": sim_band["lo"], "hi": sim_band["hi"]} if sim_band else None),
              f"{r['label']}: timing.step_ms.band {band}, expected {sim_band} (only simulated reports have one)")
        cfg = rep["config"]
        if cfg.get("uneven_heads") and r["strategy"] in ("usp", "ulysses") and r["mesh"]["ulysses"] > 1:
            continue  # each rank its own heads, bytes and cache: check_report.py uneven
        C = cfg.get("cached", 0)
        if cfg["pass"] == "prefill":  # the serving figures, from the config alone
            # The cache shard: C/R tokens (single C; the ring family R = P) for max(G, tU)/(tU) KV heads.
            P, inf = cfg["world_size"], r["inference"]
            t, U, R = head_ring_split(r, P)
            want_cache = cpmodel.kv_cache_bytes(cfg["batch"], C, cfg["kv_heads"], cfg["head_dim"],
                                                cpmodel.elem_bytes(cfg["dtype"]), t, U, R, dv=value_dim(cfg))
            check(inf["cached"] == C and inf["new_tokens"] == r["seq"] - C and inf["kv_cache_bytes"] == want_cache
                  and inf["ring_pass"] == cfg.get("ring_pass", "kv") and inf["ttft_ms"] == r["timing"]["step_ms"]["median"],
                  f"{r['label']} seq={r['seq']}: inference {inf}, expected cached {C}, kv_cache_bytes {want_cache}")
            fit_check(r, cfg, P)
        if cfg["pass"] == "decode":
            # DESIGN's decode figures (cpmodel): seq is C; each of the S steps all-gathers
            # every rank's partial (o [B, H, d] in s_part: --partial-dtype; lse [B, H] float32) to the P-1 others; nothing in the
            # backward; the cache shard C/P (single: C); tpot = the step median / S.
            P, inf, S = cfg["world_size"], r["inference"], cfg["decode_steps"]
            t, U, R = head_ring_split(r, P)
            e = cpmodel.elem_bytes(cfg["dtype"])
            want_cache = cpmodel.kv_cache_bytes(cfg["batch"], C, cfg["kv_heads"], cfg["head_dim"], e, t, U, R, dv=value_dim(cfg),
                                                latent=latent_cache_width(cfg))
            check(r["seq"] == C and inf["pass"] == "decode" and inf["cached"] == C and inf["decode_steps"] == S
                  and inf["new_tokens"] == S and inf["kv_cache_bytes"] == want_cache and inf["ttft_ms"] is None
                  and inf["miss_rate"] is None and inf["ring_pass"] is None
                  and abs(inf["tpot_ms"] - r["timing"]["step_ms"]["median"] / S) <= 1e-9 * max(1.0, inf["tpot_ms"]),
                  f"{r['label']} seq={r['seq']}: decode inference {inf}, expected cached {C}, S {S}, "
                  f"kv_cache_bytes {want_cache}")
            fit_check(r, cfg, P)
            # usp (and ulysses, U = P): the merge over the R ring ranks on H/(tU) heads, then o (run
            # dtype) all-gathered over the U Ulysses ranks, then under a tp level of t each
            # sub-layer's B x D output all-reduced (reduce-scatter + all-gather of B*D/t per rank);
            # the others R = P, U = t = 1 (megatron-sp: t = P, no merge).
            # usp's double ring level merges over its inner ring of w, then across the R/w rings.
            # The MLP on its own level under --mlp-tp N; N = P with t < P is Helix: one all-to-all of
            # the partials over the merge level, w_o's all-reduce over all P (cpmodel.helix_attention_bytes).
            levels = cpmodel.decode_block_bytes(S, cfg["batch"], cfg["heads"], value_dim(cfg), cfg["dim"],  # o: d_v
                                                cpmodel.decode_merge_levels(r["strategy"], r["mesh"], R), U, t,
                                                r["mesh"], P, cfg["block"], e, acc=cpmodel.part_bytes(cfg.get("partial_dtype")))
            want = sum(levels.values())
            check(r["comm"]["fwd"]["per_rank"] == [want] * P and r["comm"]["bwd"]["per_rank"] == [0] * P,
                  f"{r['label']} decode: fwd {r['comm']['fwd']['per_rank']} != {want} (t={t}, U={U}, R={R})")
            mlp_level_check(r, {"mlp_tp": (levels.get("mlp_tp", 0), 0)})
        elif C and cfg.get("ring_pass", "kv") == "kv" and r["strategy"] != "single" and not cfg["mask"]["window"]:
            # pass-KV under --cached (cpmodel.ulysses_ring_bytes): each rank's whole key block (its C/P cache
            # tokens and (N-C)/P new ones) goes P-1 hops; nothing in the backward. usp (ulysses:
            # R = 1): the all-to-all of the new tokens' q, k, v first, then over the R ring
            # indices a block of C/R cached and U(N-C)/P new tokens for Ge/U heads, the same
            # B*N/P*Ge*d elements per rank (Ge = max(G, tU)). A tp level of t first all-gathers
            # each sub-layer's input and reduce-scatters its output over the new tokens only.
            P = cfg["world_size"]
            t, U, R = head_ring_split(r, P)
            want = cpmodel.levels_total(cpmodel.ulysses_ring_bytes(
                cpmodel.tokens_per_rank(cfg["batch"], r["seq"], P), cpmodel.tokens_per_rank(cfg["batch"], r["seq"] - C, P),
                cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["dim"], t, U, R, cpmodel.elem_bytes(cfg["dtype"]),
                cfg["block"], mesh=r["mesh"]))[0]
            check(r["comm"]["fwd"]["per_rank"] == [want] * P and r["comm"]["bwd"]["per_rank"] == [0] * P,
                  f"{r['label']} seq={r['seq']} cached pass-KV: fwd {r['comm']['fwd']['per_rank']} != {want}")
        if cfg.get("ring_pass") in ("q", "q-a2a") and r["strategy"] != "single" and not cfg["mask"]["window"] \
                and not cfg["mask"]["docs"] and (r["mesh"].get("tp") or 1) == 1:  # (usp's tp terms: matches_model above)
            # DESIGN's pass-Q formula (cpmodel.ring_level_bytes): Q goes K = P-1 hops (no window, no documents),
            # its partial (o in s_part: --partial-dtype, lse float32) K hops with it plus one send back to the owner. Under
            # --cached only the (N-C)/P new queries of a rank travel.
            # usp (t = 1): the ring is its R ring indices (K = R - 1), and the Ulysses all-to-all of
            # q, k, v (KV heads replicated to max(G, U)) comes first: s*T*(2*H*d + 2*Ge*d)*(U-1)/U.
            # Meta's pass-Q (q-a2a): Q K hops, then each partial once to its owner.
            # A double ring (double-ring, usp's double ring level): W windows of w; the Q block
            # still makes R-1 hops over the R ring positions (the double ring's P, usp's R); its
            # partial returns to the round's starter each round (w sends per round when w > 1)
            # and, after the rounds, to its owner over the outer ring (W sends when W > 1).
            P = cfg["world_size"]
            _, U, R = head_ring_split(r, P)
            w = r["mesh"].get("inner_ring")
            T = cpmodel.tokens_per_rank(cfg["batch"], r["seq"], P)
            want = cpmodel.levels_total(cpmodel.ulysses_ring_bytes(
                T, cpmodel.tokens_per_rank(cfg["batch"], r["seq"] - C, P), cfg["heads"], cfg["kv_heads"],
                cfg["head_dim"], cfg["dim"], 1, U, R, cpmodel.elem_bytes(cfg["dtype"]), cfg["block"],
                acc=cpmodel.part_bytes(cfg.get("partial_dtype")), travel=cfg["ring_pass"], w=w, mesh=r["mesh"],
                dv=value_dim(cfg), comm_dtype=cfg.get("comm_dtype"), scaling=cfg.get("fp8_scaling") or "block"))[0]
            check(r["comm"]["fwd"]["per_rank"] == [want] * P and r["comm"]["bwd"]["per_rank"] == [0] * P,
                  f"{r['label']} seq={r['seq']} pass-Q (comm_dtype {cfg.get('comm_dtype')}): "
                  f"fwd {r['comm']['fwd']['per_rank']} != {want}")
        if r["mesh"].get("mlp_tp") and cfg["pass"] != "decode":
            # The MLP's own level (--mlp-tp N): rank 0's collectives on "mlp_tp" are the MLP's tp term
            # alone, on the new tokens (cpmodel.mlp_bytes).
            P = cfg["world_size"]
            Tn = cpmodel.tokens_per_rank(cfg["batch"], r["seq"] - C, P)
            mlp_level_check(r, {k: cpmodel.for_pass(v, cfg["pass"]) for k, v in cpmodel.mlp_bytes(
                Tn, cfg["dim"], r["mesh"], head_ring_split(r, P)[0], cpmodel.elem_bytes(cfg["dtype"]), cfg["block"]).items()})
        check(r["balance"]["imbalance"] >= 1, f"{r['label']}: imbalance {r['balance']['imbalance']}")
        check(r["memory"]["timed_allocations"] == 0,
              f"{r['label']} seq={r['seq']}: {r['memory']['timed_allocations']} allocator calls in timed iterations")


def ratio_check(a, key):
    p1, p4 = by_label(json.load(open(a.p1))), by_label(json.load(open(a.p4)))
    for s in a.strategies:
        check(s in p1 and s in p4, f"{s}: missing from a report")
        if s in p1 and s in p4:
            r = p4[s]["memory"][key] / p1[s]["memory"][key]
            print(f"{s}: {key} P=4 / P=1 = {p4[s]['memory'][key]} / {p1[s]['memory'][key]} = {r:.3f}")
            check(0.8 * 0.25 <= r <= 1.2 * 0.25, f"{s}: {key} ratio {r:.3f} not within 20% of 0.25")


def cmd_balance(a):
    """Gates on the deterministic flops_imbalance; the time-based imbalance is printed only (it
    depends on how busy the machine is)."""
    rep = by_label(json.load(open(a.report)))
    for spec, above in [(s, True) for s in a.above] + [(s, False) for s in a.below]:
        name, thr = spec.split("=")
        check(name in rep, f"{name}: missing from the report")
        if name not in rep:
            continue
        b = rep[name]["balance"]
        fi = b["flops_imbalance"]
        print(f"{name}: flops imbalance {fi:.3f}; time imbalance {b['imbalance']:.3f} (compute ms per rank "
              f"{['%.1f' % x for x in b['compute_ms_per_rank']]}, not gated)")
        check(fi > float(thr) if above else fi < float(thr),
              f"{name}: flops imbalance {fi:.3f} should be {'above' if above else 'below'} {thr}")


def cmd_trace(a):
    t = json.load(open(a.trace))
    ev = t["traceEvents"]
    pids = {e["pid"] for e in ev if e.get("ph") == "X"}
    check(pids == set(range(a.ranks)), f"trace processes {sorted(pids)}, expected 0..{a.ranks - 1}")
    for cat, tid in (("compute", 0), ("comm", 1)):
        evs = [e for e in ev if e.get("ph") == "X" and e.get("cat") == cat]
        check(len(evs) > 0, f"no {cat} events")
        check(all(e["tid"] == tid and e["dur"] >= 0 and "ts" in e for e in evs), f"{cat} events malformed")
    names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
    check({"compute", "communication"} <= names, f"thread names {names}")


def visible(i, j, causal, window, doc_of):
    """DESIGN's visibility rule on global token indices."""
    if doc_of[i] != doc_of[j] or (causal and j > i):
        return False
    return window == 0 or (i - j < window if causal else abs(i - j) < window)


def double_ring_schedule(blocks, w, W, causal, window, doc_of):
    """(T, [J(t)]): at round t, inner step j, rank (o, i) holds the block of ring position
    ((o-t) mod W)*w + (i-j) mod w; (t, j) is needed when some rank sees a key of that block.
    T = the last round with a needed pair, J(t) = the last needed inner step of round t."""
    R = w * W
    vis = [[any(visible(i, j, causal, window, doc_of) for i in blocks[a] for j in blocks[b]) for b in range(R)]
           for a in range(R)]
    needed = [[any(vis[o * w + i][((o - t) % W) * w + (i - j) % w] for o in range(W) for i in range(w))
               for j in range(w)] for t in range(W)]
    T = max(t for t in range(W) if any(needed[t]))
    return T, [max([j for j in range(w) if needed[t][j]], default=0) for t in range(T + 1)]


def ring_blocks(r, cfg, P, usp_layout, lens=None):
    """Token positions of each ring position: double-ring's zigzag over P, usp's ring layout over R
    (usp_layout: the run's --usp-layout, config.mesh.usp_layout); under --balance the layout
    rebuilt here (layout_runs) over those positions."""
    N, causal = r["seq"], cfg["mask"]["causal"]
    R = P if r["strategy"] in ("double-ring", "ring") else r["mesh"]["ring"]
    if cfg.get("balance", "none") != "none":
        runs, _ = layout_runs(cfg["balance"], lens or [N], R, causal, cfg["mask"]["window"])
        return [[p for _, s, n in rr for p in range(s, s + n)] for rr in runs]
    zigzag = r["strategy"] == "double-ring" or usp_layout == "zigzag" or (usp_layout == "auto" and causal)
    if zigzag:
        c = N // (2 * R)
        return [list(range(j * c, (j + 1) * c)) + list(range((2 * R - 1 - j) * c, (2 * R - j) * c)) for j in range(R)]
    L = N // R
    return [list(range(j * L, (j + 1) * L)) for j in range(R)]


def ring_position_of(r, q, P):
    """The ring position world rank q works on: q itself (ring, double-ring), usp's ring index from
    mesh.levels (innermost first, the first level varying fastest)."""
    if r["strategy"] != "usp":
        return q
    coord = {}
    for lvl in r["mesh"]["levels"]:
        coord[lvl["name"]] = q % lvl["size"]
        q //= lvl["size"]
    if "ring" in coord:
        return coord["ring"]
    return coord["ring_outer"] * r["mesh"]["inner_ring"] + coord["ring_inner"]


def cmd_hops(a):
    rep = json.load(open(a.report))
    cfg = rep["config"]
    P, mask = cfg["world_size"], cfg["mask"]
    elem = cpmodel.elem_bytes(cfg["dtype"])
    seen = cut = 0
    for r in ok_results(rep):
        w = r["mesh"].get("inner_ring")
        if not w or r["strategy"] not in ("double-ring", "usp"):
            continue
        seen += 1
        N = r["seq"]
        lens = (mask["docs"] or {}).get("lens_by_seq", {}).get(str(N)) or (mask["docs"] or {}).get("lens") or [N]
        doc_of = [d for d, n in enumerate(lens) for _ in range(n)]
        R = P if r["strategy"] == "double-ring" else r["mesh"]["ring"]
        U = P // R // (r["mesh"].get("tp") or 1)
        t = r["mesh"].get("tp") or 1
        W = R // w
        T, J = double_ring_schedule(ring_blocks(r, cfg, P, cfg["mesh"]["usp_layout"], lens), w, W, mask["causal"],
                                    mask["window"], doc_of)
        # One send of a K,V block (or its float32 accumulator): the B*N/P tokens of a rank times
        # the ring's kv heads, max(G, t*U) of them over the whole ring group. The sends (K,V blocks
        # and accumulators) and bytes per level of that schedule: cpmodel's double ring.
        tokens = cpmodel.tokens_per_rank(cfg["batch"], N, P)
        kvh = cpmodel.replicated_kv_heads(cfg["kv_heads"], t * U)
        hk, hv = kvh * cfg["head_dim"], kvh * value_dim(cfg)
        # (--comm-dtype: each block send its encoded bytes; config.acc_dtype's accumulators)
        enc = dict(acc=cpmodel.acc_bytes(cfg.get("acc_dtype")), comm_dtype=cfg.get("comm_dtype"),
                   scaling=cfg.get("fp8_scaling") or "block")
        sched, level_bytes = cpmodel.double_ring_sends(T, J), cpmodel.double_ring_kv_bytes(tokens, hk, T, J, elem, hv=hv, **enc)
        want = {(ph, group): (sum(sched[(ph, group)]), level_bytes[group][0 if ph == "fwd" else 1])
                for ph, group in sched}
        for (ph, group), (count, nbytes) in want.items():
            ops = [op for op in r["comm"][ph]["ops"] if op["group"] == group and op["op"] == "send"]
            got = (sum(op["count"] for op in ops), sum(op["bytes_sent"] for op in ops))
            check(got == (count, nbytes),
                  f"{r['label']} seq={N} {ph} {group}: rank 0 sent {got} (sends, bytes), schedule T={T} J={J} "
                  f"gives {(count, nbytes)}")
        # The full double ring: W(w-1) inner + (W-1) outer K,V hops = R-1; the accumulators R
        # inner sends when w > 1 and W outer sends when W > 1.
        full_fwd, full_bwd = cpmodel.levels_total(
            cpmodel.double_ring_kv_bytes(tokens, hk, *cpmodel.double_ring_full_hops(w, W), elem, hv=hv, **enc))
        ring = {ph: [op for op in r["comm"][ph]["ops"] if op["group"] in ("ring_inner", "ring_outer") and op["op"] == "send"]
                for ph in ("fwd", "bwd")}
        sends = sum(op["count"] for op in ring["fwd"])
        fwd_b, bwd_b = (sum(op["bytes_sent"] for op in ring[ph]) for ph in ("fwd", "bwd"))
        check(fwd_b <= full_fwd and bwd_b <= full_bwd, f"{r['label']}: ring bytes {fwd_b}/{bwd_b} above the full ring's")
        print(f"{r['label']} seq={N}: T={T} J={J}: {sends} K,V sends of {R - 1}, "
              f"ring bytes fwd {fwd_b} of {full_fwd}, bwd {bwd_b} of {full_bwd}")
        if sends < R - 1 and fwd_b < full_fwd and bwd_b < full_bwd:
            cut += 1
    check(seen >= a.min_ok, f"{seen} double-ring results, expected at least {a.min_ok}")
    check(cut >= a.min_cut, f"{cut} double rings ran fewer hops than R-1, expected at least {a.min_cut}")


def cmd_console(a):
    """The console's overlap and hta columns against the report written by the same run."""
    rep = json.load(open(a.report))
    table = open(a.console, encoding="utf-8").read().splitlines()
    # strategy seq ok ... model overlap hta ...: the model column ('=' or 'DIFF') precedes the two.
    row = re.compile(r"^(\S+)\s+(\d+)\s+ok!?\s.*\s(?:=|DIFF)\s+(–|\d+%)\s+(–|\d+%)\s")
    shown = {}
    for line in table:
        m = row.match(line)
        if m:
            shown[(m.group(1), int(m.group(2)))] = (m.group(3), m.group(4))
    dashes = pcts = 0
    for r in ok_results(rep):
        key = (r["label"], r["seq"])
        if not check(key in shown, f"{key}: no 'ok' row in the console table"):
            continue
        sends = r["comm"]["fwd"]["bytes_sent"] + r["comm"]["bwd"]["bytes_sent"]  # max over ranks
        o = r["overlap"]
        want = ("–", "–") if sends == 0 else (f"{100 * o['ratio']:.0f}%", f"{100 * o['hta_ratio']:.0f}%")
        check(shown[key] == want, f"{key}: sends {sends} B: console overlap, hta {shown[key]}, expected {want}")
        if sends == 0:  # nothing to hide: the same rule for both figures on every rank (1, or null)
            for q, pr in enumerate(o["per_rank"]):
                check(pr["ratio"] in (1, None) and pr["hta_ratio"] in (1, None),
                      f"{key} rank {q}: sends nothing but ratio {pr['ratio']}, hta_ratio {pr['hta_ratio']}")
        dashes += sends == 0
        pcts += sends > 0
        print(f"{key[0]} seq={key[1]}: sends {sends} B: overlap {shown[key][0]}, hta {shown[key][1]}")
    check(dashes >= a.min_dash, f"{dashes} jobs without communication, expected at least {a.min_dash}")
    check(pcts >= a.min_pct, f"{pcts} jobs with communication, expected at least {a.min_pct}")


def cmd_integrity(a):
    """The integrity flags of every ok result are exactly the expected kinds, in the report and on
    the console (its row's status 'ok!', each flag listed under the table)."""
    rep = json.load(open(a.report))
    console = open(a.console, encoding="utf-8").read().splitlines()
    kinds = sorted(k for k in a.kinds.split(",") if k)
    oks = ok_results(rep)
    check(len(oks) >= a.min_ok, f"{len(oks)} ok results, expected at least {a.min_ok}")
    for r in oks:
        key = f"{r['label']} seq={r['seq']}"
        g = r["integrity"]
        got = sorted(f.split(":", 1)[0] for f in g["flags"])
        check(got == kinds and g["ok"] == (not kinds), f"{key}: integrity {g}, expected the kinds {kinds}")
        status = re.compile(r"^%s\s+%d\s+(ok!?)\s" % (re.escape(r["label"]), r["seq"]))
        shown = [m.group(1) for m in map(status.match, console) if m]
        check(shown == ["ok!" if kinds else "ok"], f"{key}: console status {shown}, expected {'ok!' if kinds else 'ok'}")
        for f in g["flags"]:
            check(f"  ! {key}: {f}" in console, f"{key}: flag not listed under the console table: {f}")
        print(f"{key}: {g['flags'] or 'no flags'}")


def cmd_plan(a):
    """plan.py's tier cells against the report; the cell's rounding (2 decimals of its unit) is the
    only slack."""
    rep = json.load(open(a.report))
    unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    cells, n, cols = {}, None, None
    for line in open(a.plan, encoding="utf-8"):
        m = re.match(r"^### N = (\d+)", line)
        if m:
            n = int(m.group(1))
        if not line.startswith("|"):
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if row[0] == "rank":
            cols = (row.index("bytes to own node"), row.index("bytes to other nodes"))
        elif row[0].isdigit():
            cells[(row[1], n)] = (row[cols[0]], row[cols[1]])
    cross = 0
    for r in ok_results(rep):
        key = (r["label"], r["seq"])
        if not check(key in cells, f"{key}: no row in the plan"):
            continue
        # every phase the report has: fwd, bwd and a --recompute's repeated forward (schema 14)
        per = list(zip(*(c["tiers"]["per_rank"] for c in r["comm"].values())))
        for cell, tier in zip(cells[key], ("intra_node_bytes", "inter_node_bytes")):
            want = max(sum(p[tier] for p in rank) for rank in per)
            m = re.fullmatch(r"([\d.]+) (B|KiB|MiB|GiB)", cell)
            got = float(m.group(1)) * unit[m.group(2)] if m else None
            check(m and abs(got - want) <= 0.005 * unit[m.group(2)], f"{key} {tier}: plan shows {cell!r}, report {want} B")
            print(f"{key[0]} N={key[1]} {tier}: plan {cell}, report {want} B")
        cross += any(sum(p["inter_node_bytes"] for p in rank) > 0 for rank in per)
    check(cross >= a.min_cross, f"{cross} results send to other nodes, expected at least {a.min_cross}")


def preset_vocab(model):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "models",
                           model + ".json"), encoding="utf-8") as f:
        return json.load(f)["vocab"]


def tp_degree(r, P):
    """The TP degree of a result: mesh.tp where the report has it, else megatron-sp's P, else 1."""
    return r["mesh"].get("tp") or (P if r["strategy"] == "megatron-sp" else 1)


def block_parameters(cfg, t):
    """Parameters one rank holds of one whole block of the report's shape (cpmodel.block_parameters;
    under MLA the sum of cpmodel.mla_block_parameter_groups)."""
    if cfg.get("mla"):
        return sum(block_parameter_groups(cfg, t, t))
    return cpmodel.block_parameters(cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["ffn_dim"], t)


def block_parameter_groups(cfg, t, mlp_tp):
    """(every rank's, the attention's, the MLP's) parameters of one block on a rank: cpmodel's GQA or MLA groups."""
    if cfg.get("mla"):
        return cpmodel.mla_block_parameter_groups(cfg["dim"], cfg["heads"], cfg["mla"], cfg["ffn_dim"], t, mlp_tp)
    return cpmodel.block_parameter_groups(cfg["dim"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["ffn_dim"],
                                          t, mlp_tp)


def cmd_estimate(a):
    sync_bytes = {}  # shard -> the step's gradient sync bytes of every train result checked
    for path in a.full:
        rep = json.load(open(path))
        cfg = rep["config"]
        P, L, V, D = cfg["world_size"], cfg["layers"], preset_vocab(cfg["model"]), cfg["dim"]
        check(cfg["block"] == "full" and isinstance(L, int) and L >= 1 and cfg["recompute"] in ("none", "selective", "full"),
              f"{path}: config block {cfg['block']} layers {L} recompute {cfg.get('recompute')}")
        oks = ok_results(rep)
        check(len(oks) >= a.min_ok, f"{path}: {len(oks)} ok results, expected at least {a.min_ok}")
        params = {}
        for r in oks:
            e, m = r["memory"]["model_estimate"], r["memory"]
            name = f"{path}: {r['label']} seq={r['seq']}"
            if not check(e is not None, f"{name}: no model_estimate under --block full"):
                continue
            t = tp_degree(r, P)
            mlp_tp = r["mesh"].get("mlp_tp") or t
            want = cpmodel.model_parameters(L, block_parameters(cfg, t), V, D, t)
            params[(r["label"], r["seq"])] = (e["parameters"], t)
            check(e["layers"] == L, f"{name}: layers {e['layers']} != config {L}")
            check(e["parameters"] == want, f"{name}: parameters {e['parameters']} != {want} (t={t})")
            # --shard: the groups rebuilt from the shape and the mesh (single: one rank alone, one
            # replica; the others P), then the states and the step's gradient sync from them.
            shard = cfg["shard"]
            replicas = 1 if r["strategy"] == "single" else P
            parts = block_parameter_groups(cfg, t, mlp_tp)
            groups = cpmodel.weight_groups(L, *parts, cpmodel.model_parameters(0, 0, V, D, t), replicas, t, mlp_tp)
            check(e["shard"] == shard, f"{name}: shard {e['shard']} != config {shard}")
            rebuilt = [{"name": n, "copies": c, "parameters": k, "replicas": g, "shard": cpmodel.shard_of(k, g)}
                       for n, c, k, g in groups]
            check(e["groups"] == rebuilt, f"{name}: groups {e['groups']} != {rebuilt}")
            states = cpmodel.model_state_bytes(groups, shard)
            check((e["weights"], e["grads"], e["optimizer"]) == states,
                  f"{name}: weights/grads/optimizer {e['weights']}/{e['grads']}/{e['optimizer']} != {states} (shard {shard})")
            step = r["step"]
            if cfg["pass"] == "train":
                rs, ag = cpmodel.grad_sync_bytes(groups, shard)
                got = None if step is None else (step["shard"], step["executed"], step["reduce_scatter_bytes"],
                                                 step["all_gather_bytes"], step["grad_sync_bytes"])
                check(got == (shard, False, rs, ag, rs + ag),
                      f"{name}: step {got} != (shard, executed, reduce-scatter, all-gather, sum) "
                      f"{(shard, False, rs, ag, rs + ag)}")
                if step is not None:
                    check(step["formula"].startswith("model") and f"= {rs + ag} B" in step["formula"],
                          f"{name}: step formula {step['formula']!r}")
                sync_bytes.setdefault(shard, []).append(rs + ag)
            else:
                check(step is None, f"{name}: step {step} under --pass {cfg['pass']}")
            T = r["seq"] if r["strategy"] == "single" else r["seq"] // P  # tokens on a rank
            block_input = cpmodel.block_input_bytes(cfg["batch"], T, D, cpmodel.elem_bytes(cfg["dtype"]))
            core = e.get("core_activations", 0)  # schema 14: the attention core's share of m["activations"]
            check(0 <= core <= m["activations"], f"{name}: core activations {core} not within {m['activations']}")
            acts = cpmodel.model_activations(L, block_input, m["activations"], cfg["recompute"], core)
            check(e["activations"] == acts, f"{name}: activations {e['activations']} != {acts} ({cfg['recompute']})")
            check(e["total"] == e["weights"] + e["grads"] + e["optimizer"] + e["activations"],
                  f"{name}: total {e['total']} is not the sum of its terms")
            check(e["formula"].startswith("estimate") and "recompute " + cfg["recompute"] in e["formula"],
                  f"{name}: formula {e['formula']!r} does not say it is an estimate and which recompute")
        # megatron-sp holds 1/P of the projections and of the embedding/head: its parameters less the
        # replicated norms (and MLA's down-projections), times P, are every sequence-sharded
        # strategy's (no KV replication: G >= P).
        if cfg["kv_heads"] >= P and P > 1:
            norms = L * block_parameter_groups(cfg, 1, 1)[0]
            for (label, seq), (p_msp, t) in params.items():
                if t != P:
                    continue
                others = [p for (lb, s), (p, t1) in params.items() if s == seq and t1 == 1]
                check(others and all((p_msp - norms) * P == p - norms for p in others),
                      f"{path}: {label} seq={seq}: parameters {p_msp} x {P} (less norms) != the others' {others}")
                print(f"{label} seq={seq}: {p_msp} parameters per rank, the others {sorted(set(others))}")
    rep = json.load(open(a.attn))
    check(rep["config"]["block"] == "attn" and rep["config"]["layers"] is None and rep["config"]["recompute"] is None,
          f"{a.attn}: config block {rep['config']['block']} layers {rep['config']['layers']}")
    oks = ok_results(rep)
    check(oks, f"{a.attn}: no ok result")
    for r in oks:
        check(r["memory"]["model_estimate"] is None,
              f"{a.attn}: {r['label']}: model_estimate {r['memory']['model_estimate']} under --block attn")
        check(r["step"] is None, f"{a.attn}: {r['label']}: step {r['step']} under --block attn")
    for shard in a.shards:
        check(shard in sync_bytes and any(b > 0 for b in sync_bytes[shard]),
              f"no train result under --shard {shard} with a gradient sync to check (checked: {sorted(sync_bytes)})")
    print("step gradient sync bytes by shard:", {k: sorted(set(v)) for k, v in sorted(sync_bytes.items())})


def cmd_tp(a):
    """Meshes with a tp level (usp --tp, megatron-sp = {tp = P}): DESIGN's per-level bytes from
    cpmodel.ulysses_ring_bytes (T = B*N/P, hk' = d*max(G, t*U); tp 2/3*s*T*D*(t-1) per sub-layer, Ulysses
    s*T*(2hq + 2hk')*(U-1)/U, ring s*T*2hk'*(R-1) (+ s_acc*T*2hk'*R backward)), rank 0's ops per
    level, every rank's total, mesh.levels (innermost first, product P), the label, and, on
    nodes of config.ranks_per_node ranks, each rank's tier split from the groups the levels define
    (for ring levels of at most 2 ranks, where every hop goes to the one other member)."""
    rep = json.load(open(a.report))
    cfg = rep["config"]
    P = cfg["world_size"]
    K = cfg["ranks_per_node"] or P
    s = cpmodel.elem_bytes(cfg["dtype"])
    B, H, G, d, D = cfg["batch"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["dim"]
    check(not cfg["mask"]["window"] and not cfg["mask"]["docs"], "tp check: no window or documents (full rings)")
    n = 0
    for r in ok_results(rep):
        m = r["mesh"]
        t, U, R = m["tp"], m["ulysses"], m["ring"]
        if t == 1 or "inner_ring" in m:
            continue
        n += 1
        lv = m["levels"]
        names = [x["name"] for x in lv]
        prod = 1
        for x in lv:
            prod *= x["size"]
        check(names[0] == "tp" and lv[0]["size"] == t and prod == P and set(names) == {"tp", "ulysses", "ring"},
              f"{r['label']}: mesh.levels {lv} (tp first, product P={P})")
        if r["strategy"] == "usp":
            check(r["label"] == f"usp[t{t}xu{U}xr{R}]", f"label {r['label']} for t={t} U={U} R={R}")
        else:
            check(r["strategy"] == "megatron-sp" and (t, U, R) == (P, 1, 1), f"{r['label']}: mesh {m}")
        T = cpmodel.tokens_per_rank(B, r["seq"], P)
        latent = cpmodel.mla_latent_row(cfg["mla"]) if (cfg.get("mla") or {}).get("travel") == "latent" else 0
        levels = cpmodel.ulysses_ring_bytes(T, T, H, G, d, D, t, U, R, s, cfg["block"], mesh=r["mesh"], dv=value_dim(cfg),
                                            latent=latent)
        want = {ph: {name: fb[i] for name, fb in levels.items()} for i, ph in enumerate(("fwd", "bwd"))}
        # groups from the levels: level i's members are strided by the product of the sizes inside it
        stride, groups = 1, {}
        for x in lv:
            groups[x["name"]] = (stride, x["size"])
            stride *= x["size"]
        for ph in ("fwd", "bwd"):
            c = r["comm"][ph]
            got = {}
            for op in c["ops"]:
                got[op["group"]] = got.get(op["group"], 0) + op["bytes_sent"]
            check(all(got.get(k, 0) == v for k, v in want[ph].items()) and set(got) <= set(want[ph]),
                  f"{r['label']} seq={r['seq']} {ph}: rank 0's bytes by level {got} != DESIGN's {want[ph]}")
            total = sum(want[ph].values())
            check(c["per_rank"] == [total] * P, f"{r['label']} {ph}: per rank {c['per_rank']} != {total}")
            if R > 2:
                continue
            for q in range(P):
                intra = inter = 0
                for name, bytes_ in want[ph].items():
                    st, g = groups[name]
                    if g < 2:
                        continue
                    first = q - (q // st % g) * st
                    peers = [first + j * st for j in range(g) if first + j * st != q]
                    same = sum(1 for p_ in peers if p_ // K == q // K)
                    i_, o_ = cpmodel.spread_tiers(bytes_, g, same)
                    intra, inter = intra + i_, inter + o_
                tr = c["tiers"]["per_rank"][q]
                check((tr["intra_node_bytes"], tr["inter_node_bytes"]) == (intra, inter),
                      f"{r['label']} {ph} rank {q}: tiers {tr} != recomputed intra {intra} inter {inter} (K={K})")
    check(n >= a.min_ok, f"{n} ok results with a tp level, expected at least {a.min_ok}")


def splitmix64(state):
    M = (1 << 64) - 1
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)


def sample_pack(name, N, seed):
    """bench/workloads.cpp's sampler, re-implemented from DESIGN's description (not from its code)."""
    import math
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "workloads",
                           name + ".json"), encoding="utf-8") as f:
        comps = [(c["share"], c["mean_tokens"]) for c in json.load(f)["distribution"]["components"]]
    total = sum(c[0] for c in comps)
    state, left, lens = seed ^ 0x5A3B1E5D15757A7F, N, []
    while left > 0:
        state, r = splitmix64(state)
        pick, k = (r >> 11) * 2.0 ** -53 * total, 0
        while k + 1 < len(comps) and pick >= comps[k][0]:
            pick -= comps[k][0]
            k += 1
        state, r = splitmix64(state)
        x = -comps[k][1] * math.log1p(-((r >> 11) * 2.0 ** -53))
        n = left if x >= left else max(1, math.ceil(x))
        lens.append(n)
        left -= n
    return lens


def cmd_resample(a):
    """--docs-resample: one pack per timed iteration (seed + i), every pack's bytes = its model."""
    rep = json.load(open(a.report))
    cfg = rep["config"]
    docs, N, seed, iters = cfg["mask"]["docs"], cfg["seqs"][0], cfg["seed"], cfg["iters"]
    check(docs.get("resample") is True, f"config.mask.docs.resample: {docs.get('resample')}")
    want = [sample_pack(docs["spec"], N, seed + i) for i in range(iters)]
    check(docs["lens"] == want[0], f"config lens {docs['lens']} != pack 0 {want[0]}")
    check(len({tuple(w) for w in want}) > 1, f"the packs drawn are all the same: {want}")
    oks = ok_results(rep)
    check(len(oks) >= a.min_ok, f"{len(oks)} ok results, expected >= {a.min_ok}")
    for r in oks:
        rs = r["balance"].get("resample")
        if not check(rs is not None, f"{r['label']}: no balance.resample"):
            continue
        packs = rs["packs"]
        check([p["lens"] for p in packs] == want, f"{r['label']}: packs {[p['lens'] for p in packs]} != {want}")
        check(all(p["bytes_match_model"] for p in packs) and rs["bytes_match_model"],
              f"{r['label']}: a pack's bytes differ from its model: {[p['bytes_match_model'] for p in packs]}")
        # The comm and balance fields describe the last pack.
        check(r["comm"]["fwd"]["matches_model"] and r["comm"]["bwd"]["matches_model"], f"{r['label']}: comm != model")
        check(abs(r["balance"]["flops_imbalance"] - packs[-1]["flops_imbalance"]) < 1e-9,
              f"{r['label']}: flops_imbalance {r['balance']['flops_imbalance']} is not the last pack's")
        imb = sorted(p["flops_imbalance"] for p in packs)
        check(rs["flops_imbalance"]["min"] == imb[0] and rs["flops_imbalance"]["max"] == imb[-1],
              f"{r['label']}: spread {rs['flops_imbalance']} vs {imb}")
        check(r["memory"]["timed_allocations"] == 0, f"{r['label']}: timed allocations {r['memory']['timed_allocations']}")


def layout_runs(scheme, lens, P, causal, window):
    """--balance, re-implemented from DESIGN: every document cut into 2P chunks (q = L // 2P each,
    the L % 2P remainder tokens round robin over ranks with a cursor kept across documents, a
    rank's first extra to its early chunk r, a second to its late chunk 2P-1-r); doc-zigzag gives
    rank r chunks r and 2P-1-r, greedy hands chunks out in decreasing visible-pair order to the
    least-loaded rank with room, split at the room. Returns each rank's list of (doc, start, count)."""
    def keys(t, L):
        if causal:
            return min(t + 1, window) if window else t + 1
        return (min(L - 1, t + window - 1) - max(0, t - window + 1) + 1) if window else L
    starts = [sum(lens[:d]) for d in range(len(lens))]
    chunks, cursor = [], 0
    for d, L in enumerate(lens):
        size = [L // (2 * P)] * (2 * P)
        extra = [0] * P
        for _ in range(L % (2 * P)):
            extra[cursor % P] += 1
            cursor += 1
        for r in range(P):
            size[r] += extra[r] >= 1
            size[2 * P - 1 - r] += extra[r] >= 2
        at = starts[d]
        for c in range(2 * P):
            chunks.append((d, at, size[c], c if c < P else 2 * P - 1 - c))
            at += size[c]
    pairs = lambda d, s, n: sum(keys(p - starts[d], lens[d]) for p in range(s, s + n))
    runs = [[] for _ in range(P)]
    if scheme == "doc-zigzag":
        for d, s, n, r in chunks:
            if n:
                runs[r].append((d, s, n))
        return runs, pairs
    cap, load, held = sum(lens) // P, [0] * P, [0] * P
    for d, s, n, _ in sorted(chunks, key=lambda c: -pairs(c[0], c[1], c[2])):  # stable: ties in document order
        while n:
            r = min((x for x in range(P) if held[x] < cap), key=lambda x: (load[x], x))
            take = min(n, cap - held[r])
            runs[r].append((d, s, take))
            load[r] += pairs(d, s, take)
            held[r] += take
            s, n = s + take, n - take
    return runs, pairs


def cmd_layout(a):
    """--balance doc-zigzag|greedy: the layout rebuilt here over the strategy's ring positions (ring,
    double-ring: P; usp: its ring level R); visible pairs per rank (a usp rank: its ring index's),
    N/R tokens per position, and on a single ring level (ring; usp's ring) that level's bytes from
    K_eff found by brute force on the layout (a double ring's schedule: the `hops` check)."""
    rep = json.load(open(a.report))
    cfg = rep["config"]
    P, mask, scheme = cfg["world_size"], cfg["mask"], cfg.get("balance")
    check(scheme in ("doc-zigzag", "greedy"), f"config.balance {scheme}")
    seen = 0
    for r in ok_results(rep):
        check(r["balance"]["scheme"] == scheme, f"{r['label']}: balance.scheme {r['balance'].get('scheme')}")
        if r["strategy"] == "single":
            continue
        seen += 1
        N = r["seq"]
        lens = (mask["docs"] or {}).get("lens_by_seq", {}).get(str(N)) or (mask["docs"] or {}).get("lens") or [N]
        usp = r["strategy"] == "usp"
        R = r["mesh"]["ring"] if usp else P
        t, U = (r["mesh"].get("tp") or 1, r["mesh"].get("ulysses") or 1) if usp else (1, 1)
        runs, pairs = layout_runs(scheme, lens, R, mask["causal"], mask["window"])
        check(all(sum(n for _, _, n in rr) == N // R for rr in runs), f"{r['label']}: tokens per position not N/R")
        pos_pairs = [sum(pairs(d, s, n) for d, s, n in rr) for rr in runs]
        want_pairs = [pos_pairs[ring_position_of(r, q, P)] for q in range(P)]
        check(r["balance"]["visible_pairs_per_rank"] == want_pairs,
              f"{r['label']}: visible pairs {r['balance'].get('visible_pairs_per_rank')} != {want_pairs}")
        doc_of = [d for d, n in enumerate(lens) for _ in range(n)]
        pos = [[p for _, s, n in rr for p in range(s, s + n)] for rr in runs]
        # The strategy ran that layout: a rank's model FLOPs are the same GEMMs everywhere plus
        # attention in proportion to the pairs it computes, so flops - min = c * (pairs - min).
        # Those are its queries' visible pairs, or under pass-Q its keys' (the visiting queries
        # are computed where the keys are).
        work = want_pairs
        if cfg.get("ring_pass") == "q":
            key_pairs = [sum(visible(i, j, mask["causal"], mask["window"], doc_of) for j in pos[x] for i in range(N))
                         for x in range(R)]
            work = [key_pairs[ring_position_of(r, q, P)] for q in range(P)]
        f, lo = r["balance"]["model_flops_per_rank"], min(range(P), key=lambda q: work[q])
        hi = max(range(P), key=lambda q: work[q])
        c = (f[hi] - f[lo]) / (work[hi] - work[lo]) if work[hi] > work[lo] else 0.0
        check(all(abs((f[q] - f[lo]) - c * (work[q] - work[lo])) <= 1e-9 * f[q] for q in range(P)) and
              (c > 0 or len(set(f)) == 1),
              f"{r['label']}: model FLOPs per rank {f} are not the GEMMs plus c * the pairs each computes {work}")
        print(f"{r['label']} seq={N} {scheme}: visible pairs {want_pairs}, flops_imbalance {r['balance']['flops_imbalance']:.3f}")
        if r["mesh"].get("inner_ring") and (r["strategy"] == "double-ring" or r["mesh"]["inner_ring"] not in (0, R)):
            continue  # a double ring's schedule and bytes: cmd_hops
        K = 0
        for k in range(R - 1, 0, -1):
            if any(visible(i, j, mask["causal"], mask["window"], doc_of)
                   for q in range(R) for i in pos[q] for j in pos[(q - k) % R]):
                K = k
                break
        # One rank's K,V block: its B*N/P tokens for the ring's KV heads after replication,
        # max(G, t*U) over the whole ring group (ring: G).
        T, elem = cpmodel.tokens_per_rank(cfg["batch"], N, P), cpmodel.elem_bytes(cfg["dtype"])
        kvh = cpmodel.replicated_kv_heads(cfg["kv_heads"], t * U)
        hk, hv = kvh * cfg["head_dim"], kvh * value_dim(cfg)
        if cfg.get("ring_pass") == "q":  # pass-Q: the Q block (H heads) and its partial, K hops and one back
            fwd, bwd = cpmodel.pass_q_bytes(T, cfg["heads"] * cfg["head_dim"], cfg["heads"], K, elem,
                                            acc=cpmodel.part_bytes(cfg.get("partial_dtype")), ho=cfg["heads"] * value_dim(cfg))
        else:
            fwd, bwd = cpmodel.for_pass(cpmodel.ring_kv_bytes(T, hk, K, elem, hv=hv), cfg["pass"])
        level = "ring" if usp else "cp"
        for ph, want in (("fwd", fwd), ("bwd", bwd)):
            c = r["comm"][ph]
            got = sum(op["bytes_sent"] for op in c["ops"] if op["group"] in (level, "ring_inner", "ring_outer"))
            check(got == want and c["matches_model"],
                  f"{r['label']} seq={N} {ph}: rank 0 sent {got} B on the {level} level, brute force {want} (K={K}); "
                  f"matches_model {c['matches_model']}")
            if not usp:
                check(c["per_rank"] == [want] * P, f"{r['label']} seq={N} {ph}: measured {c['per_rank']} != {want} (K={K})")
        print(f"  K_eff={K} over R={R}: ring-level bytes fwd {fwd}, bwd {bwd}")
    check(seen >= a.min_ok, f"{seen} balanced results, expected at least {a.min_ok}")


def mesh_coord(levels, rank, name):
    """Rank's coordinate on the mesh level `name` (levels innermost first, as results[].mesh.levels):
    its index in that level's group."""
    stride = 1
    for x in levels:
        if x["name"] == name:
            return rank // stride % x["size"]
        stride *= x["size"]
    return 0


def cmd_uneven(a):
    """--uneven-heads (usp, ulysses): the split recomputed in Python (cpmodel.ulysses_uneven_split) and
    every member's Ulysses bytes (cpmodel.ulysses_uneven_bytes) against the MEASURED bytes: on a mesh
    with a Ulysses level only (R = 1, t = 1) every rank's total, elsewhere rank 0's ulysses-group
    ops (member 0); the per-rank model the report carries equals the measured bytes of every rank;
    and the model FLOPs rank by rank follow the query heads each holds (equal heads, equal FLOPs;
    more heads, more FLOPs)."""
    rep = json.load(open(a.report))
    cfg = rep["config"]
    check(cfg.get("uneven_heads") is True, f"config.uneven_heads {cfg.get('uneven_heads')}")
    P, s = cfg["world_size"], cpmodel.elem_bytes(cfg["dtype"])
    B, H, G, d = cfg["batch"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    seen, split_seen = 0, False
    for r in ok_results(rep):
        if r["strategy"] not in ("usp", "ulysses"):
            continue
        m = r["mesh"]
        t, U, R = m["tp"], m["ulysses"], m["ring"]
        if U == 1:
            continue
        seen += 1
        Ht, Gt = H // t, max(G, t) // t  # a tp rank's heads (KV replicated over tp when t > G)
        _, qn, _, _ = cpmodel.ulysses_uneven_split(Ht, Gt, U)
        split_seen |= len(set(qn)) > 1
        if cfg["pass"] == "decode":
            # Each rank's member u: its partial of qn[u] heads over the merge levels, its share of the
            # head group's o gather, tp's all-reduce (cpmodel.decode_block_bytes with hq = qn[u]).
            S = cfg["decode_steps"]
            want = []
            for q in range(P):
                u = mesh_coord(m["levels"], q, "ulysses")
                lv = cpmodel.decode_block_bytes(S, B, H, value_dim(cfg), cfg["dim"], cpmodel.decode_merge_levels(r["strategy"], m, R),
                                                U, t, m, P, cfg["block"], s, acc=cpmodel.part_bytes(cfg.get("partial_dtype")),
                                                hq=qn[u])
                want.append(sum(lv.values()))
            check(r["comm"]["fwd"]["per_rank"] == want and r["comm"]["fwd"]["per_rank"] == r["comm"]["fwd"]["predicted_per_rank"],
                  f"{r['label']} decode: per rank {r['comm']['fwd']['per_rank']} != cpmodel's {want}")
            continue
        tokens = t * cpmodel.tokens_per_rank(B, r["seq"], P)
        for i, ph in enumerate(("fwd", "bwd")):
            c = r["comm"][ph]
            check(c["per_rank"] == c["predicted_per_rank"],
                  f"{r['label']} {ph}: measured per rank {c['per_rank']} != the model's {c['predicted_per_rank']}")
            got0 = sum(op["bytes_sent"] for op in c["ops"] if op["group"] == "ulysses")
            want0 = cpmodel.ulysses_uneven_bytes(tokens, Ht, Gt, d, U, 0, s, dv=value_dim(cfg))[i]
            check(got0 == want0, f"{r['label']} {ph}: rank 0's Ulysses bytes {got0} != cpmodel's {want0}")
            if R == 1 and t == 1:
                want = [cpmodel.ulysses_uneven_bytes(tokens, Ht, Gt, d, U, u, s, dv=value_dim(cfg))[i] for u in range(P)]
                check(c["per_rank"] == want, f"{r['label']} {ph}: per rank {c['per_rank']} != cpmodel's {want}")
        if R == 1 and t == 1:
            fl = r["balance"]["model_flops_per_rank"]
            ok = all((qn[x] == qn[y]) == (fl[x] == fl[y]) and (qn[x] < qn[y]) == (fl[x] < fl[y])
                     for x in range(P) for y in range(P))
            check(ok, f"{r['label']}: model FLOPs per rank {fl} do not follow the query heads {qn}")
    check(seen >= a.min_ok, f"only {seen} Ulysses results with U > 1 checked (want {a.min_ok})")
    check(split_seen, "no result split the heads unevenly")


def cmd_dynamic(a):
    """ring --balance dynamic: each document's CP group size recomputed here from its length and the
    cap; then, from the tokens each rank holds of each group size (the report's
    balance.dynamic.tokens_by_degree), every rank's bytes by cpmodel.dynamic_ring_bytes's reading of
    the schedule (per group size c, a ring over the aligned group of c ranks: K,V blocks c-1 hops in
    both passes, float32 dK,dV accumulators c-1 sends) against the MEASURED bytes of every rank; and the model
    FLOPs of every rank = a * its tokens + b * its visible pairs (one a, b for all ranks)."""
    rep = json.load(open(a.report))
    cfg = rep["config"]
    P, mask = cfg["world_size"], cfg["mask"]
    check(cfg.get("balance") == "dynamic", f"config.balance {cfg.get('balance')}")
    seen, spread = 0, 0
    for r in ok_results(rep):
        if r["strategy"] == "single":
            continue
        seen += 1
        N, dyn = r["seq"], r["balance"]["dynamic"]
        lens = (mask["docs"] or {}).get("lens_by_seq", {}).get(str(N)) or (mask["docs"] or {}).get("lens") or [N]
        cap = cfg.get("cp_cap") or N // P
        check(dyn["cp_cap"] == cap, f"{r['label']}: cp_cap {dyn['cp_cap']} != {cap}")

        def degree(L):
            c = 1
            while c < -(-L // cap) and c < P:
                c *= 2
            return min(c, P)
        want = [degree(L) for L in lens]
        check(dyn["cp_degrees"] == want, f"{r['label']}: cp_degrees {dyn['cp_degrees']} != {want}")
        degrees, by = dyn["degrees"], dyn["tokens_by_degree"]
        check(degrees == sorted(set(want)), f"{r['label']}: degrees {degrees}")
        for i, c in enumerate(degrees):
            held = sum(by[q][i] for q in range(P))
            check(held == sum(L for L, g in zip(lens, want) if g == c),
                  f"{r['label']}: {held} tokens of group size {c} held, documents have another count")
        check(dyn["tokens_per_rank"] == [sum(row) for row in by] and sum(dyn["tokens_per_rank"]) == N,
              f"{r['label']}: tokens_per_rank {dyn['tokens_per_rank']}")
        row = cfg["batch"] * cfg["kv_heads"] * (cfg["head_dim"] + value_dim(cfg))  # k and v of one token, all batch rows
        fwd, bwd = cpmodel.dynamic_ring_bytes(degrees, by, P, row, cpmodel.elem_bytes(cfg["dtype"]))
        if cfg["pass"] == "prefill":
            bwd = [0] * P
        for ph, w in (("fwd", fwd), ("bwd", bwd)):
            got = r["comm"][ph]["per_rank"]
            check(got == w and r["comm"][ph]["matches_model"],
                  f"{r['label']} seq={N} {ph}: measured {got} != schedule {w}")
        spread += len(set(fwd)) > 1
        f, pairs, tok = r["balance"]["model_flops_per_rank"], r["balance"]["visible_pairs_per_rank"], dyn["tokens_per_rank"]
        # Solve a, b from two ranks whose (tokens, pairs) are independent, check every rank.
        sol = None
        for x in range(P):
            for y in range(x + 1, P):
                det = tok[x] * pairs[y] - tok[y] * pairs[x]
                if det != 0:
                    sol = ((f[x] * pairs[y] - f[y] * pairs[x]) / det, (tok[x] * f[y] - tok[y] * f[x]) / det)
                    break
            if sol:
                break
        if sol:
            check(all(abs(f[q] - sol[0] * tok[q] - sol[1] * pairs[q]) <= 1e-9 * f[q] for q in range(P)),
                  f"{r['label']}: model FLOPs {f} are not a * tokens {tok} + b * pairs {pairs}")
        print(f"{r['label']} seq={N} dynamic cap={cap}: degrees {want}, tokens {tok}, fwd bytes {fwd}, "
              f"flops_imbalance {r['balance']['flops_imbalance']:.3f}")
    check(seen >= a.min_ok, f"{seen} dynamic results, expected at least {a.min_ok}")
    check(spread >= a.min_spread, f"{spread} results whose ranks send different bytes, expected at least {a.min_spread}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model"); m.add_argument("report"); m.add_argument("--min-ok", type=int, default=1)
    tpp = sub.add_parser("tp"); tpp.add_argument("report"); tpp.add_argument("--min-ok", type=int, default=1)
    for name in ("memory", "weights"):
        p = sub.add_parser(name); p.add_argument("p1"); p.add_argument("p4"); p.add_argument("strategies", nargs="+")
    b = sub.add_parser("balance"); b.add_argument("report")
    b.add_argument("--above", nargs="*", default=[]); b.add_argument("--below", nargs="*", default=[])
    t = sub.add_parser("trace"); t.add_argument("trace"); t.add_argument("--ranks", type=int, required=True)
    h = sub.add_parser("hops"); h.add_argument("report"); h.add_argument("--min-ok", type=int, default=1)
    h.add_argument("--min-cut", type=int, default=1)
    c = sub.add_parser("console"); c.add_argument("report"); c.add_argument("console")
    c.add_argument("--min-dash", type=int, default=1); c.add_argument("--min-pct", type=int, default=1)
    p = sub.add_parser("plan"); p.add_argument("report"); p.add_argument("plan")
    p.add_argument("--min-cross", type=int, default=1)
    e = sub.add_parser("estimate"); e.add_argument("full", nargs="+"); e.add_argument("--attn", required=True)
    e.add_argument("--shards", default="", type=lambda s: [x for x in s.split(",") if x],
                   help="comma-separated --shard choices that must each have been checked on a result that syncs")
    e.add_argument("--min-ok", type=int, default=1)
    rs = sub.add_parser("resample"); rs.add_argument("report"); rs.add_argument("--min-ok", type=int, default=1)
    lay = sub.add_parser("layout"); lay.add_argument("report"); lay.add_argument("--min-ok", type=int, default=1)
    dy = sub.add_parser("dynamic"); dy.add_argument("report"); dy.add_argument("--min-ok", type=int, default=1)
    un = sub.add_parser("uneven"); un.add_argument("report"); un.add_argument("--min-ok", type=int, default=1)
    dy.add_argument("--min-spread", type=int, default=1)
    ig = sub.add_parser("integrity"); ig.add_argument("report"); ig.add_argument("console")
    ig.add_argument("--kinds", required=True); ig.add_argument("--min-ok", type=int, default=1)
    a = ap.parse_args()
    if a.cmd == "dynamic":
        cmd_dynamic(a)
    elif a.cmd == "uneven":
        cmd_uneven(a)
    elif a.cmd == "layout":
        cmd_layout(a)
    elif a.cmd == "resample":
        cmd_resample(a)
    elif a.cmd == "model":
        cmd_model(a)
    elif a.cmd == "memory":
        ratio_check(a, "activations")
    elif a.cmd == "weights":
        ratio_check(a, "weights")
    elif a.cmd == "balance":
        cmd_balance(a)
    elif a.cmd == "hops":
        cmd_hops(a)
    elif a.cmd == "tp":
        cmd_tp(a)
    elif a.cmd == "console":
        cmd_console(a)
    elif a.cmd == "integrity":
        cmd_integrity(a)
    elif a.cmd == "plan":
        cmd_plan(a)
    elif a.cmd == "estimate":
        cmd_estimate(a)
    else:
        cmd_trace(a)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
