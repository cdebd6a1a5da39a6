#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention with its flash backend on the shapes of
cpbench_cuda_bench, timed the same way (device events, warm-up discarded, median), so the CUDA
kernels are compared with what a user would otherwise pick. Run by scripts/gpu_check.sh.

    scripts/sdpa_bench.py [--seqs 4096,16384] [--batch 1] [--heads 16] [--kv-heads 16]
        [--head-dim 128] [--dtype bf16|fp16] [--causal both|yes|no] [--warmup 2] [--iters 5]
        [--json FILE] [--cpbench-json cuda_attn_bench.json]

Layout as cpbench's: q, k, v allocated [B, N, heads, d] and passed as transposed views. Forward
is one SDPA call (grad enabled, so the flash kernel also keeps its logsumexp, as cpbench's does);
backward is torch.autograd.grad of the kept graph with a fixed dout. FLOPs as cpbench_cuda_bench:
fwd 4*d*H*B*pairs (pairs: N(N+1)/2 causal, N^2 otherwise), bwd hardware 2.5x fwd. With
--cpbench-json, the ratios cpbench/torch of TFLOP/s per (seq, causal) are added (goal >= 0.8).
Exit status: 0 ok, 1 error (e.g. the flash backend refused the shape), 2 no torch or no CUDA.
"""
import argparse
import json
import statistics
import sys


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="4096,16384,65536")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--cpbench-json")
    a = ap.parse_args()
    a.seqs = [int(s) for s in a.seqs.split(",") if s]
    if a.heads % a.kv_heads or a.iters < 1 or a.warmup < 0 or not a.seqs:
        ap.error("need kv-heads | heads, iters >= 1, warmup >= 0, at least one seq")
    return a


def timed(torch, fn, warmup, iters):
    ms = []
    for it in range(warmup + iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        if it >= warmup:
            ms.append(e0.elapsed_time(e1))
    return statistics.median(ms)


def run(a):
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(f"sdpa_bench: no usable torch ({e})", file=sys.stderr)
        return 2, None
    if not torch.cuda.is_available():
        print("sdpa_bench: no CUDA device", file=sys.stderr)
        return 2, None
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    dev = torch.device("cuda")
    out = {"tool": "sdpa_bench", "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(0), "backend": "flash", "dtype": a.dtype,
           "batch": a.batch, "heads": a.heads, "kv_heads": a.kv_heads, "head_dim": a.head_dim,
           "warmup": a.warmup, "iters": a.iters, "results": []}
    causal_modes = [c for c, on in ((False, a.causal != "yes"), (True, a.causal != "no")) if on]
    B, H, G, d = a.batch, a.heads, a.kv_heads, a.head_dim
    for N in a.seqs:
        g = torch.Generator(device=dev).manual_seed(N)
        q = torch.empty(B, N, H, d, device=dev, dtype=dt).uniform_(-1, 1, generator=g).requires_grad_()
        k = torch.empty(B, N, G, d, device=dev, dtype=dt).uniform_(-1, 1, generator=g).requires_grad_()
        v = torch.empty(B, N, G, d, device=dev, dtype=dt).uniform_(-1, 1, generator=g).requires_grad_()
        dout = torch.empty(B, H, N, d, device=dev, dtype=dt).uniform_(-1, 1, generator=g)
        for causal in causal_modes:
            pairs = N * (N + 1) // 2 if causal else N * N
            fwd_flops = 4.0 * d * H * B * pairs
            kw = {"is_causal": causal}
            if G != H:
                kw["enable_gqa"] = True
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                def fwd():
                    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                          v.transpose(1, 2), **kw)
                fwd_ms = timed(torch, fwd, a.warmup, a.iters)
                o = fwd()
                bwd_ms = timed(torch, lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True),
                               a.warmup, a.iters)
                del o
            row = {"seq": N, "causal": causal, "fwd_ms": fwd_ms,
                   "fwd_tflops": fwd_flops / (fwd_ms * 1e-3) / 1e12, "bwd_ms": bwd_ms,
                   "bwd_tflops": 2.5 * fwd_flops / (bwd_ms * 1e-3) / 1e12}
            out["results"].append(row)
            print(f"sdpa flash seq={N} causal={causal}: fwd {fwd_ms:.3f} ms {row['fwd_tflops']:.1f} TFLOP/s, "
                  f"bwd {bwd_ms:.3f} ms {row['bwd_tflops']:.1f} TFLOP/s", flush=True)
        del q, k, v, dout
        torch.cuda.empty_cache()
    return 0, out


def add_ratios(out, cpbench_json):
    with open(cpbench_json) as f:
        cp = json.load(f)
    same = all(cp.get(k) == out[k] for k in ("batch", "heads", "kv_heads", "head_dim", "dtype"))
    ours = {(r["seq"], r["causal"]): r for r in cp.get("results", [])}
    out["ratios"] = {"goal": 0.8, "same_shapes": same, "rows": []}
    for r in out["results"]:
        c = ours.get((r["seq"], r["causal"]))
        if c is None:
            continue
        row = {"seq": r["seq"], "causal": r["causal"],
               "fwd_cpbench_over_torch": c["fwd_tflops"] / r["fwd_tflops"],
               "bwd_cpbench_over_torch": c["bwd_tflops"] / r["bwd_tflops"]}
        out["ratios"]["rows"].append(row)
        print(f"cpbench/torch seq={r['seq']} causal={r['causal']}: fwd {row['fwd_cpbench_over_torch']:.2f}, "
              f"bwd {row['bwd_cpbench_over_torch']:.2f} (goal >= 0.8)")


def main():
    a = parse()
    try:
        rc, out = run(a)
    except Exception as e:  # a refused shape or an out-of-memory is a result, reported
        print(f"sdpa_bench: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if rc:
        return rc
    if a.cpbench_json:
        try:
            add_ratios(out, a.cpbench_json)
        except (OSError, ValueError, KeyError) as e:
            print(f"sdpa_bench: no ratios ({a.cpbench_json}: {e})", file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
