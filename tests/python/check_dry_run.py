#!/usr/bin/env python3
"""`cpbench run --dry-run` plans 64-bit sizes correctly (issue 14 item 6).

Runs the dry run for llama3-405b at N = 4,194,304 with P = 1,024 (and P = 8, where ulysses and
megatron-sp can run) and compares every planned job's predicted bytes with DESIGN's analytic
model in Python's exact integers (scripts/cpmodel.py, whose divisions must be exact); checks that exactly the jobs whose constraints
fail are skipped, and that the written plan agrees with the printed one.

usage: check_dry_run.py CPBENCH_BIN MODELS_DIR OUT_DIR
"""
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))
import cpmodel  # noqa: E402

N = 4_194_304
B = 2
S = cpmodel.elem_bytes("bf16")  # bf16 communicated; the ring-gradient accumulators fp32 (cpmodel.ACC_BYTES)


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def expected_jobs(m, P):
    """{label: (fwd, bwd)} for runnable jobs and {label: None} for skipped ones (DESIGN's table)."""
    H, G, d, D = m["heads"], m["kv_heads"], m["head_dim"], m["dim"]
    T = cpmodel.tokens_per_rank(B, N, P)  # exact, or ValueError
    hk = G * d
    ring = cpmodel.ring_kv_bytes(T, hk, P - 1, S)
    out = {"single": (0, 0)}

    def heads_ok(U):  # U | H, and G, U divide one another (U > G: KV heads replicated U/G times)
        return H % U == 0 and (G % U == 0 or U % G == 0)

    def mesh(t, U, R):  # usp's t x U x R (ulysses: U = P): DESIGN's tp, all-to-all and ring terms
        return cpmodel.levels_total(cpmodel.ulysses_ring_bytes(T, T, H, G, d, D, t, U, R, S, "attn"))

    out["megatron-sp"] = cpmodel.levels_total(cpmodel.megatron_sp_bytes(B, N, D, P, S, "attn")) if heads_ok(P) else None
    out["ulysses"] = mesh(1, P, 1) if heads_ok(P) and N % P == 0 else None
    for name, div in (("ring", P), ("ring-zigzag", 2 * P), ("ring-striped", P)):
        out[name] = ring if N % div == 0 else None
    for t in divisors(P):  # usp: every t x U x R = P (DESIGN "Tensor parallelism inside the CP mesh")
        for U in divisors(P // t):
            R = P // t // U
            label = f"usp[{'t%dx' % t if t > 1 else ''}u{U}xr{R}]"
            out[label] = mesh(t, U, R) if heads_ok(t) and heads_ok(t * U) else None
    out["allgather-kv"] = cpmodel.allgather_kv_bytes(T, hk, P, S) if N % (2 * P) == 0 else None
    for w in divisors(P):  # double ring: inner rings of w, W = P/w windows, the full schedule
        dbl = cpmodel.levels_total(cpmodel.double_ring_kv_bytes(T, hk, *cpmodel.double_ring_full_hops(w, P // w), S))
        out[f"double-ring[w{w}]"] = dbl if N % (2 * P) == 0 else None
    for k, v in out.items():
        assert v is None or all(isinstance(x, int) for x in v), (k, v)
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
