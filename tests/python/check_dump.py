#!/usr/bin/env python3
"""Independent float64 check of a `cpbench verify --dump DIR` directory.

Recomputes DESIGN's layer (RMSNorm, QKV projection, RoPE at global positions, attention with
the causal mask, output projection, residual; with meta "attention" "mla" MLA's projections in the
QKV projection's place (d_v-wide values); with meta.json's block "full" also the SwiGLU MLP
sub-layer after it; with meta "sinks" the attention sinks' logits in each row's softmax and their
gradient dsinks) and its backward from the dumped inputs alone, in float64 NumPy, and
compares every dumped result of every strategy with it by verify's rule
(scripts/verify_bound.py: ||a - b|| <= tol * max(||b||, m), m from the float64 reference for dq
and dk, 0 otherwise). Also checks that every strategy saw the same inputs. Exit 0 when all agree
within the tolerance, 1 otherwise.

Under a KV cache (meta "cached" C > 0: `--pass prefill --cached C`, or `--pass decode`) only the
forward runs and the dump holds the new tokens alone (prefill: N - C of them at positions C..N-1;
decode: decode_steps S at C..C+S-1) plus the cache k_cache, v_cache [B, C, G, d]: the forward of
the new tokens is recomputed with their queries attending the cache and, causally, each other,
and the forward tensors are compared (there are no gradients to check).

With --report R (the report of the same `cpbench verify --numerics S --dump DIR` run) it also
reproduces the report's numerics block on its first seed, the one dumped: float64 attention of
single's dumped q, k, v, do (and sinks), and each strategy's relative Frobenius and largest absolute
error of o, dq, dk, dv (dsinks; the gradients rounded to the run dtype, as the block hands them on)
against it, and single's; each must equal the report's figure within
1e-6 of it (two float64 computations of one quantity, summed in different orders).

usage: check_dump.py DIR [--tol 1e-5] [--report R]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from verify_bound import gradient_scales, verify_error, visibility  # noqa: E402
from layer_reference import (attention_backward, attention_forward, cached_reference, new_tokens,  # noqa: E402
                             reference, uses_cache)  # (DESIGN's layer in float64)


def input_shapes(meta):
    """The shapes of a KV-cache dump's token-shaped inputs, checked before they are used so that a
    wrong row count fails with its name rather than as a NumPy error (or, worse, as a result
    compared with the wrong positions)."""
    B, D, G, d, C, T = meta["B"], meta["D"], meta["G"], meta["d"], meta["cached"], new_tokens(meta)
    m = meta.get("mla") or {}
    return dict(x=(B, T, D), dy=(B, T, D), k_cache=(B, C, G, d), v_cache=(B, C, G, d),
                latent_cache=(B, C, m.get("kv_rank", 0) + m.get("d_rope", 0)))


def handed_on(name, x, dtype):
    """A gradient of q, k or v as the block hands it on: rounded once to a 16-bit run dtype (round to
    nearest even), as bench/numerics.cpp compares it."""
    x = np.asarray(x, dtype=np.float32)
    if name not in ("dq", "dk", "dv") or dtype not in ("bf16", "fp16"):
        return x
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def numerics_errors(got, want):
    """(relative Frobenius error, largest absolute error) of got against want, as bench/numerics.cpp."""
    diff = got.astype(np.float64) - want
    norm = np.linalg.norm(want)
    return float(np.linalg.norm(diff) / norm if norm > 0 else np.linalg.norm(diff)), float(np.abs(diff).max())


def check_numerics(dump_dir, report_path, rtol=1e-6):
    """Reproduces the report's numerics figures on the dumped seed; returns the failures."""
    report = json.load(open(report_path))
    dirs = {}
    for s in os.listdir(dump_dir):
        if os.path.isfile(os.path.join(dump_dir, s, "meta.json")):
            dirs[json.load(open(os.path.join(dump_dir, s, "meta.json")))["strategy"]] = os.path.join(dump_dir, s)
    load = lambda d, n: np.load(os.path.join(d, n + ".npy"))  # noqa: E731
    failures, checked = 0, 0
    single = dirs.get("single")
    if single is None:
        print(f"numerics: no single dump under {dump_dir}")
        return 1
    meta = json.load(open(os.path.join(single, "meta.json")))
    inp = {"sinks": load(single, "sinks")} if meta.get("sinks") else {}
    q, k, v = (load(single, n).astype(np.float64) for n in ("q", "k", "v"))
    o, lse, ctx = attention_forward(q, k, v, inp, meta, visibility(meta))
    ref = {"o": o}
    if os.path.isfile(os.path.join(single, "dq.npy")):
        ref.update(attention_backward(load(single, "do").astype(np.float64), o, lse, ctx, inp, meta))
    for r in report["results"]:
        num = r.get("numerics")
        if num is None:
            continue
        if r["label"] not in dirs:
            print(f"numerics: {r['label']} has no dump under {dump_dir}")
            failures += 1
            continue
        if num["seeds"][0] != meta["seed"]:
            print(f"numerics: the report's first seed {num['seeds'][0]} is not the dump's {meta['seed']}")
            failures += 1
        for name, fig in num["tensors"].items():
            mine = numerics_errors(handed_on(name, load(dirs[r["label"]], name), meta["dtype"]), ref[name])
            theirs = numerics_errors(handed_on(name, load(single, name), meta["dtype"]), ref[name])
            for what, value, want in (("rel_fro", mine[0], fig["rel_fro"]["per_seed"][0]),
                                      ("max_abs", mine[1], fig["max_abs"]["per_seed"][0]),
                                      ("single_rel_fro", theirs[0], fig["single_rel_fro"]["per_seed"][0])):
                checked += 1
                if not abs(value - want) <= rtol * abs(want):
                    print(f"numerics: {r['label']} {name} {what}: float64 here {value:.9e}, report {want:.9e}")
                    failures += 1
    if checked == 0:
        print(f"numerics: {report_path} has no numerics figures to reproduce")
        return 1
    print(f"numerics: {checked} figures of {report_path} reproduced in float64 within {rtol:g}"
          + (f", {failures} not" if failures else ""))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--report", help="the run's report: reproduce its numerics block (verify --numerics)")
    args = ap.parse_args()
    strategies = sorted(s for s in os.listdir(args.dir) if os.path.isfile(os.path.join(args.dir, s, "meta.json")))
    if not strategies:
        print(f"check_dump: no strategy directories with meta.json under {args.dir}", file=sys.stderr)
        return 1
    failures = 0
    failed_strategies = 0
    inputs0 = None
    for s in strategies:
        before = failures
        sd = os.path.join(args.dir, s)
        meta = json.load(open(os.path.join(sd, "meta.json")))
        t = {f[:-4]: np.load(os.path.join(sd, f)) for f in os.listdir(sd) if f.endswith(".npy")}
        for name, arr in t.items():
            if arr.dtype != np.float32:
                print(f"{s}: {name} has dtype {arr.dtype}, expected float32")
                failures += 1
        mlp_inputs = ("norm2_w", "w_gate", "w_up", "w_down") if meta.get("block") == "full" else ()
        cache = uses_cache(meta)
        # Under a KV cache the cache is an input every strategy must read the same. Prefill's dy
        # ([B, N - C, D] under --cached) feeds no forward tensor but is still compared across
        # strategies as an input; decode dumps none.
        proj_inputs = (("w_qkv",) if meta.get("attention") != "mla" else
                       (("w_dq", "q_norm_w") if meta["mla"]["q_rank"] > 0 else ()) +
                       ("w_uq", "w_qr", "w_dkv", "kv_norm_w", "w_kr", "w_uk", "w_uv"))
        input_names = ("x", "norm_w", "w_o") + proj_inputs + (("dy",) if meta.get("pass") != "decode" else ()) \
            + mlp_inputs + (() if not cache else ("latent_cache",) if meta.get("attention") == "mla" else ("k_cache", "v_cache")) \
            + (("sinks",) if meta.get("sinks") else ())
        missing = [k for k in input_names if k not in t]
        bad_shapes = [f"{k} shape {t[k].shape}, expected {want}" for k, want in input_shapes(meta).items()
                      if cache and k in t and t[k].shape != want]
        if missing or bad_shapes:
            for problem in ([f"input {k}.npy is missing" for k in missing] + [f"input {b}" for b in bad_shapes]):
                print(f"{s}: {problem}")
            failures += 1
            failed_strategies += 1
            continue
        inp = {k: t[k] for k in input_names}
        if inputs0 is None:
            inputs0 = inp
        else:
            for k in inp:
                if k not in inputs0 or not np.array_equal(inp[k], inputs0[k]):
                    print(f"{s}: input {k} differs from {strategies[0]}'s")
                    failures += 1
        if cache:
            ref = cached_reference(inp, meta)
            scales = {}  # forward only: no dq, dk, hence no scale m (plain relative L2 error)
        else:
            ref = reference(inp, meta)
            scales = gradient_scales(ref, meta)
            if (meta.get("mla") or {}).get("travel") == "latent":
                # --mla-travel latent: the tokens' owners form neither their keys' k, v nor dk, dv
                # (the levels expand and contract the latent); y, the up-projections' gradients
                # and dx check that path.
                for name in ("k", "v", "dk", "dv"):
                    ref.pop(name)
        # A dumped tensor that is neither an input nor recomputed would pass unchecked.
        for name in sorted(set(t) - set(inp) - set(ref)):
            print(f"{s}: {name}.npy is dumped but not checked (no reference for it under pass={meta.get('pass')})")
            failures += 1
        worst, worst_name = 0.0, ""
        for name, want in ref.items():
            if name not in t:  # every tensor the pass computes must be there (gradients are not
                # in a KV-cache reference at all, so none is looked for)
                print(f"{s}: {name}.npy is missing")
                failures += 1
                continue
            if t[name].shape != want.shape:
                print(f"{s}: {name} shape {t[name].shape}, expected {want.shape}")
                failures += 1
                continue
            e, problem = verify_error(t[name], want, scales.get(name, 0.0))
            if not e <= worst:
                worst, worst_name = e, name
            if not e <= args.tol:
                print(f"{s}: {name} error={e:.3e} > {args.tol}" + (f" ({problem})" if problem else ""))
                failures += 1
        print(f"{s:24s} max error vs float64 = {worst:.3e} ({worst_name})")
        failed_strategies += failures > before
    print(f"{len(strategies) - failed_strategies} passed, {failed_strategies} failed")
    if args.report:
        failures += check_numerics(args.dir, args.report)
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
