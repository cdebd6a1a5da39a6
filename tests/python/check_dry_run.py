#!/usr/bin/env python3
"""`cpbench run --dry-run` plans 64-bit sizes correctly (issue 14 item 6).

Runs the dry run for llama3-405b at N = 4,194,304 with P = 1,024 (and P = 8, where ulysses and
megatron-sp can run) and compares every planned job's predicted bytes with DESIGN's analytic
model computed here with Python's exact integers; checks that exactly the jobs whose constraints
fail are skipped, and that the written plan agrees with the printed one.

usage: check_dry_run.py CPBENCH_BIN MODELS_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys
from fractions import Fraction

N = 4_194_304
B = 2
S, S_ACC = 2, 4  # bf16 communicated, fp32 ring-gradient accumulators


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def expected_jobs(m, P):
    """{label: (fwd, bwd)} for runnable jobs and {label: None} for skipped ones (DESIGN's table)."""
    H, G, d, D = m["heads"], m["kv_heads"], m["head_dim"], m["dim"]
    T = Fraction(B * N, P)
    assert T.denominator == 1
    hq, hk = H * d, G * d
    ring_f = S * T * 2 * hk * (P - 1)
    ring_b = ring_f + S_ACC * T * 2 * hk * P
    out = {"single": (0, 0)}

    def heads_ok(U):  # U | H, and G, U divide one another (U > G: KV heads replicated U/G times)
        return H % U == 0 and (G % U == 0 or U % G == 0)

    def a2a(U):  # DESIGN: s*T*(2hq + 2*d*max(G, U))*(U-1)/U
        return S * T * (2 * hq + 2 * d * max(G, U)) * Fraction(U - 1, U)

    out["megatron-sp"] = (2 * S * T * D * (P - 1), 3 * S * T * D * (P - 1)) if heads_ok(P) else None
    out["ulysses"] = (a2a(P), a2a(P)) if heads_ok(P) and N % P == 0 else None
    for name, div in (("ring", P), ("ring-zigzag", 2 * P), ("ring-striped", P)):
        out[name] = (ring_f, ring_b) if N % div == 0 else None
    for t in divisors(P):  # usp: every t x U x R = P (DESIGN "Tensor parallelism inside the CP mesh")
        for U in divisors(P // t):
            R = P // t // U
            hk_u = d * max(G, t * U)  # hk': the KV heads held after any replication
            uly = S * T * (2 * hq + 2 * hk_u) * Fraction(U - 1, U)
            rf = S * T * 2 * hk_u * (R - 1) if R > 1 else 0
            rb = rf + S_ACC * T * 2 * hk_u * R if R > 1 else 0
            tf, tb = 2 * S * T * D * (t - 1), 3 * S * T * D * (t - 1)
            label = f"usp[{'t%dx' % t if t > 1 else ''}u{U}xr{R}]"
            out[label] = (tf + uly + rf, tb + uly + rb) if heads_ok(t) and heads_ok(t * U) else None
    out["allgather-kv"] = (ring_f, ring_f + S_ACC * T * 2 * hk * (P - 1)) if N % (2 * P) == 0 else None
    for w in divisors(P):  # double ring: inner rings of w, W = P/w windows
        W = P // w
        bwd = ring_f + S_ACC * T * 2 * hk * (P + W) if 1 < w < P else ring_b
        out[f"double-ring[w{w}]"] = (ring_f, bwd) if N % (2 * P) == 0 else None
    for k, v in out.items():
        if v is not None:
            assert all(Fraction(x).denominator == 1 for x in v), (k, v)
            out[k] = (int(v[0]), int(v[1]))
    return out


def main():
    binary, models_dir, out_dir = sys.argv[1:4]
    with open(os.path.join(models_dir, "llama3-405b.json")) as f:
        model = json.load(f)
    failures = 0
    for P in (1024, 8):
        plan_path = os.path.join(out_dir, f"dry_run_p{P}.json")
        if os.path.exists(plan_path):
            os.remove(plan_path)
        cmd = [binary, "run", "--dry-run", "--world-size", str(P), "--model", "llama3-405b", "--seq", str(N),
               "--batch", str(B), "--backend", "cuda", "--dtype", "bf16", "--mesh", "all", "--out", plan_path]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        print(proc.stdout, proc.stderr)
        if proc.returncode != 0:
            print(f"FAIL: dry run P={P} exited {proc.returncode}")
            return 1
        with open(plan_path) as f:
            plan = json.load(f)
        assert plan["dry_run"] is True and plan["config"]["world_size"] == P
        want = expected_jobs(model, P)
        got = {j["label"]: j for j in plan["jobs"]}
        if set(got) != set(want):
            print(f"FAIL: P={P} jobs {sorted(got)} != expected {sorted(want)}")
            failures += 1
        large = 0
        for label, exp in want.items():
            job = got.get(label)
            if job is None:
                continue
            if exp is None:
                if job["status"] != "skipped" or not job.get("reason"):
                    print(f"FAIL: P={P} {label} should be skipped, got {job['status']}")
                    failures += 1
                continue
            pb = job.get("predicted_bytes", {})
            if job["status"] != "planned" or (pb.get("fwd"), pb.get("bwd")) != exp:
                print(f"FAIL: P={P} {label}: cpbench {pb} status {job['status']}, DESIGN {exp}")
                failures += 1
            elif job["activation_estimate_bytes"] <= 0:
                print(f"FAIL: P={P} {label}: activation estimate {job['activation_estimate_bytes']}")
                failures += 1
            large += exp[1] >= 2**32
            # The printed table carries the same numbers.
            line = next((ln for ln in proc.stdout.splitlines() if ln.split()[:1] == [label]), "")
            if str(exp[0]) not in line.split() or str(exp[1]) not in line.split():
                print(f"FAIL: P={P} {label}: table line '{line}' lacks {exp}")
                failures += 1
        if large == 0:
            print(f"FAIL: P={P}: no predicted size above 2^32; the test does not exercise 64-bit sizes")
            failures += 1
        print(f"P={P}: {len(want)} jobs, {sum(v is not None for v in want.values())} planned and equal to DESIGN, "
              f"{large} above 2^32 bytes")
    print("dry run: OK" if failures == 0 else f"dry run: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
