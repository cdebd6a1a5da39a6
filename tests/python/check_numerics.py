#!/usr/bin/env python3
"""ctest numerics_p4: scripts/numerics.py's JSON from a small run (P = 1, 2, 4; bf16; f32 and
bf16-acc variants) says what DESIGN's rounding points imply, deterministically (fixed seeds, the
CPU's fixed summation orders):
  - with float32 accumulators the ring family's dv error equals single's to 1% at every P (the
    ring's float32 running output and accumulators add no rounding beyond the blocks');
  - with --acc-dtype bf16 the ring's dv error is above its float32 error at P = 4 (one rounding
    per hop) and equal to it at P = 1 (no hop);
  - --dtype fp8 (fp8-block, fp8-tensor; the forward only): single's o error is more than 5x its
    bf16 error at every P (e4m3's unit roundoff is 2^-4 against bf16's 2^-8; measured 11x), and
    the ring family's o error stays within 25% of single's at P = 2 and 4 (measured within 1%:
    the casts of q, k, v and P's rounding dominate; where a rank's running max differs moves little);
  - --comm-dtype fp8 (comm-fp8): at P = 1 nothing travels and the error is f32's exactly; at P = 4
    the ring's o and dq errors are above 2x f32's (the remote blocks' k, v rounded to e4m3; measured 4x);
  - every run measured every tensor of every strategy it ran.

With --report (ctest numerics_verify_p4) it checks the numerics block of `cpbench verify --numerics`
reports instead (bench/numerics.h), from a bf16 run (P = 4, S = 2 seeds, window, documents and
sinks; dumped to --dump) and an fp32 run (--fp32-report):
  - the block is complete: the seeds --seed, --seed + 1, every figure's per_seed of that length with
    min <= median <= max, the tensors o, dq, dk, dv (dsinks under --sinks), single's error the same
    in every job (one single run per seed);
  - check_dump.py reproduces every figure in float64 from the dump, and a report doctored by 1e-5
    of one figure is caught;
  - what the rounding points imply: allgather-kv's o and dq are single's (one attention call over the
    gathered keys per rank); ulysses's o and dq are single's (the same kernel on a subset of heads; dq
    compared as the block hands it on, rounded once) - a ratio within 1e-3 of 1 (measured: exactly
    1 here; OpenBLAS promises no identical bits for the q projection's different row counts, and
    one bf16 element of q flipped moves an error by far less than that; a rounding more is 5% or
    more), while its dk, dv, where U = 4 exceeds
    G = 2 so two ranks hold each kv head, are above 1.05x single's (each replica's partial is rounded
    before their sum); ring-zigzag's o is above single's (its P partial outputs are each rounded by
    their kernel before the float32 merge);
  - fp32: every error below 1e-5, single's below 1e-6.
usage: check_numerics.py NUMERICS_JSON
       check_numerics.py --report BF16_REPORT --dump DIR --fp32-report FP32_REPORT
"""
import copy
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_dump import check_numerics as reproduce  # noqa: E402


def check_reports(bf16_path, dump_dir, fp32_path):
    """The --report mode (see the module's docstring); returns the failures' messages."""
    fails = []
    bf16, fp32 = json.load(open(bf16_path)), json.load(open(fp32_path))
    for rep, name in ((bf16, "bf16"), (fp32, "fp32")):
        seed, S = rep["config"]["seed"], None
        single = {}
        for r in rep["results"]:
            num = r.get("numerics")
            if r["status"] != "ok" or num is None:
                fails.append(f"{name} {r['label']}: status {r['status']}, numerics {'absent' if num is None else 'present'}")
                continue
            S = S or len(num["seeds"])
            if num["seeds"] != [seed + i for i in range(S)]:
                fails.append(f"{name} {r['label']}: seeds {num['seeds']}, expected {seed} onwards")
            for t, figs in num["tensors"].items():
                for f, v in figs.items():
                    if len(v["per_seed"]) != S or not v["min"] <= v["median"] <= v["max"]:
                        fails.append(f"{name} {r['label']} {t} {f}: {v}")
                prev = single.setdefault(t, figs["single_rel_fro"]["per_seed"])
                if prev != figs["single_rel_fro"]["per_seed"]:
                    fails.append(f"{name} {r['label']} {t}: single's error {figs['single_rel_fro']['per_seed']} is not {prev}")
    by = {r["label"]: r["numerics"]["tensors"] for r in bf16["results"] if r.get("numerics")}
    for lab, tensors in by.items():
        if set(tensors) != {"o", "dq", "dk", "dv", "dsinks"}:
            fails.append(f"bf16 {lab}: tensors {sorted(tensors)}")
    ratio = lambda lab, t: by[lab][t]["ratio"]["per_seed"] if lab in by else [float("nan")]  # noqa: E731
    for lab in ("allgather-kv", "ulysses"):
        for t in ("o", "dq"):
            if not all(abs(x - 1.0) <= 1e-3 for x in ratio(lab, t)):
                fails.append(f"bf16 {lab} {t}: ratio to single {ratio(lab, t)}, expected 1 (within 1e-3)")
    for t in ("dk", "dv"):
        if not all(x > 1.05 for x in ratio("ulysses", t)):
            fails.append(f"bf16 ulysses {t}: ratio {ratio('ulysses', t)}, expected above 1.05 (replicated kv heads)")
    if not all(x > 1.0 for x in ratio("ring-zigzag", "o")):
        fails.append(f"bf16 ring-zigzag o: ratio {ratio('ring-zigzag', 'o')}, expected above 1")
    for r in fp32["results"]:
        for t, figs in (r.get("numerics") or {}).get("tensors", {}).items():
            if not figs["rel_fro"]["max"] < 1e-5 or not figs["single_rel_fro"]["max"] < 1e-6:
                fails.append(f"fp32 {r['label']} {t}: error {figs['rel_fro']['max']:.3e}, single's "
                             f"{figs['single_rel_fro']['max']:.3e} (bounds 1e-5, 1e-6)")
    if reproduce(dump_dir, bf16_path) != 0:
        fails.append("check_dump.py did not reproduce the bf16 report's numerics")
    doctored = copy.deepcopy(bf16)
    fig = next(r for r in doctored["results"] if r.get("numerics"))["numerics"]["tensors"]["o"]["rel_fro"]
    fig["per_seed"][0] *= 1 + 1e-5
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doctored, f)
    try:
        if reproduce(dump_dir, f.name) == 0:
            fails.append("check_dump.py accepted a report with one figure off by 1e-5")
    finally:
        os.unlink(f.name)
    return fails


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--report":
        args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
        fails = check_reports(args["--report"], args["--dump"], args["--fp32-report"])
        for f in fails:
            print("FAIL:", f)
        print(f"numerics reports: {len(fails)} failures")
        return 1 if fails else 0
    rep = json.load(open(sys.argv[1]))
    s = {(x["P"], x["variant"], x["label"], x["tensor"]): x for x in rep["summary"]}
    fails = []

    def err(P, variant, label, tensor="dv"):
        x = s.get((P, variant, label, tensor))
        if x is None:
            fails.append(f"no measurement of {label} {variant} {tensor} at P={P}")
            return float("nan")
        return x["rel_fro_median"]

    for P in (1, 2, 4):
        for lab in ("ring", "ring-zigzag"):
            a, b = err(P, "f32", lab), err(P, "f32", "single")
            if not abs(a - b) <= 0.01 * b:
                fails.append(f"P={P} {lab} f32 dv error {a:.4e} is not single's {b:.4e} (1%)")
    for lab in ("ring", "ring-zigzag"):
        if not err(4, "bf16-acc", lab) > err(4, "f32", lab):
            fails.append(f"P=4 {lab}: bf16 accumulators' dv error {err(4, 'bf16-acc', lab):.4e} is not above "
                         f"float32's {err(4, 'f32', lab):.4e}")
        if err(1, "bf16-acc", lab) != err(1, "f32", lab):
            fails.append(f"P=1 {lab}: bf16 accumulators changed the error without a hop")
    for P in (1, 2, 4):
        for v in ("fp8-block", "fp8-tensor"):
            a, b = err(P, v, "single", "o"), err(P, "f32", "single", "o")
            if not a > 5 * b:
                fails.append(f"P={P} {v}: single's o error {a:.4e} is not above 5x bf16's {b:.4e}")
            if P > 1:
                for lab in ("ring", "ring-zigzag"):
                    r = err(P, v, lab, "o") / a
                    if not 1 / 1.25 <= r <= 1.25:
                        fails.append(f"P={P} {v} {lab}: o error {r:.3f} x single's, beyond 1.25")
            if (P, v, "single", "dq") in s:
                fails.append(f"P={P} {v}: a forward-only variant measured a gradient")
    for lab in ("ring", "ring-zigzag"):
        for t in ("o", "dq"):
            if err(1, "comm-fp8", lab, t) != err(1, "f32", lab, t):
                fails.append(f"P=1 {lab}: --comm-dtype fp8 changed the {t} error with nothing travelling")
            if not err(4, "comm-fp8", lab, t) > 2 * err(4, "f32", lab, t):
                fails.append(f"P=4 {lab}: --comm-dtype fp8's {t} error {err(4, 'comm-fp8', lab, t):.4e} is not above "
                             f"2x f32's {err(4, 'f32', lab, t):.4e}")
    tensors = {x["tensor"] for x in rep["summary"]}
    if tensors != {"o", "dq", "dk", "dv"}:
        fails.append(f"tensors measured {sorted(tensors)}")
    for f in fails:
        print("FAIL:", f)
    print(f"{len(rep['rows'])} measurements, {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
