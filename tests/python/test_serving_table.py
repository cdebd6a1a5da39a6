#!/usr/bin/env python3
"""scripts/serving_table.py on small synthetic reports (ctest: python_serving_table): the rows, the
faster pass and the crossover sentence, and the choice of C per miss rate."""
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))
import serving_table  # noqa: E402


def report(C, ring_pass, fwd, ttft, N=4096, P=4, platform=None, matches=True):
    """Only what the table reads: config, context and one ok ring result (plus single, left out)."""
    ctx = {"simulated": {"platform": platform}} if platform else {}
    inf = {"pass": "prefill", "ring_pass": ring_pass, "cached": C, "new_tokens": N - C,
           "miss_rate": (N - C) / N, "kv_cache_bytes": 0, "ttft_ms": ttft}
    ring = {"status": "ok", "label": "ring-zigzag", "strategy": "ring-zigzag", "seq": N, "inference": inf,
            "comm": {"fwd": {"bytes_sent": fwd, "matches_model": matches}}}
    single = dict(ring, label="single", strategy="single")
    return {"config": {"world_size": P}, "context": ctx, "results": [single, ring]}


class ServingTable(unittest.TestCase):
    def table(self, reps):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, rep in enumerate(reps):
                p = Path(d) / f"r{i}.json"
                p.write_text(json.dumps(rep))
                paths.append(str(p))
            return serving_table.table(paths)

    def test_rows_faster_and_crossover(self):
        M = 1 << 20
        out = self.table([report(0, "kv", 4 * M, 10.0), report(0, "q", 40 * M, 30.0),
                          report(3584, "kv", 4 * M, 6.0), report(3584, "q", 5 * M, 5.0),
                          report(3840, "kv", 4 * M, 5.5), report(3840, "q", 2 * M, 3.0)])
        self.assertIn("### ring-zigzag — cpu, P = 4, N = 4096", out)
        self.assertIn("| 1 | 0 | 4.00 | 40.00 | 10.000 | 30.000 | pass-KV |", out)
        self.assertIn("| 0.125 | 3584 | 4.00 | 5.00 | 6.000 | 5.000 | pass-Q |", out)
        self.assertIn("| 0.0625 | 3840 | 4.00 | 2.00 | 5.500 | 3.000 | pass-Q |", out)
        # highest miss rate first
        self.assertLess(out.index("| 1 | 0 |"), out.index("| 0.125 |"))
        self.assertIn("pass-Q is faster up to miss rate 0.125; it sends fewer bytes up to miss rate 0.0625.", out)
        self.assertNotIn("single", out)

    def test_never_faster_and_off_model_flagged(self):
        out = self.table([report(0, "kv", 10, 1.0, platform="dgx-h100"),
                          report(0, "q", 20, 2.0, platform="dgx-h100", matches=False)])
        self.assertIn("— dgx-h100, P = 4", out)
        self.assertIn("pass-KV (bytes off the model!) |", out)
        self.assertIn("pass-Q is faster at no miss rate measured; it sends fewer bytes at none.", out)

    def test_meta_pass_q_columns(self):
        M = 1 << 20
        out = self.table([report(0, "kv", 4 * M, 10.0), report(0, "q", 40 * M, 30.0), report(0, "q-a2a", 39 * M, 29.0),
                          report(3840, "kv", 4 * M, 5.5), report(3840, "q", 2 * M, 3.0),
                          report(3840, "q-a2a", 1 * M, 2.5, matches=False)])
        self.assertIn("| pass-Q a2a MiB/rank |", out)
        self.assertIn("| 1 | 0 | 4.00 | 40.00 | 39.00 | 10.000 | 30.000 | 29.000 | pass-KV |", out)
        self.assertIn("| 0.0625 | 3840 | 4.00 | 2.00 | 1.00 | 5.500 | 3.000 | 2.500 | pass-Q a2a (bytes off the model!) |", out)

    def test_a_pass_alone_makes_no_row(self):
        self.assertEqual(self.table([report(0, "kv", 10, 1.0)]), "")

    def test_cached_for_rounds_new_tokens_to_2P(self):
        self.assertEqual(serving_table.cached_for(4096, 4, 1.0), 0)
        self.assertEqual(serving_table.cached_for(4096, 4, 0.125), 4096 - 512)
        self.assertEqual(serving_table.cached_for(4096, 4, 0.1), 4096 - 408)  # 409.6 -> 51 x 8
        self.assertEqual(serving_table.cached_for(4096, 4, 1e-6), 4096 - 8)   # at least 2P new tokens


def decode_report(P, tpot, C=1024, S=8, per_step=100, platform=None, matches=True):
    """A decode report: single (the P = 1 row when P is 1, left out otherwise) and one ring result."""
    ctx = {"simulated": {"platform": platform}} if platform else {}
    def result(strategy, cache, sent):
        inf = {"pass": "decode", "ring_pass": None, "cached": C, "new_tokens": S, "miss_rate": None,
               "decode_steps": S, "kv_cache_bytes": cache, "ttft_ms": None, "tpot_ms": tpot}
        return {"status": "ok", "label": strategy, "strategy": strategy, "seq": C, "inference": inf,
                "comm": {"fwd": {"bytes_sent": sent, "matches_model": matches}}}
    results = [result("single", 2 * C * 64, 0)]
    if P > 1:
        results.append(result("ring-zigzag", 2 * C * 64 // P, per_step * S))
    return {"config": {"world_size": P}, "context": ctx, "results": results}


class DecodeTable(unittest.TestCase):
    def table(self, reps):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, rep in enumerate(reps):
                p = Path(d) / f"d{i}.json"
                p.write_text(json.dumps(rep))
                paths.append(str(p))
            return serving_table.decode_table(paths), serving_table.table(paths)

    def test_rows_per_P_with_speed_up(self):
        out, prefill = self.table([decode_report(1, 2.0), decode_report(4, 0.8, per_step=2048),
                                   decode_report(2, 1.25, per_step=1024)])
        self.assertEqual(prefill, "")  # decode reports make no prefill row
        self.assertIn("### decode — cpu, cached C = 1024", out)
        lines = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
        self.assertEqual(len(lines), 3)
        self.assertEqual(lines[0], "| 1 | single | 0.12 | 0.00 | 2.0000 | 1.00x |")
        self.assertEqual(lines[1], "| 2 | ring-zigzag | 0.06 | 1.00 | 1.2500 | 1.60x |")
        self.assertEqual(lines[2], "| 4 | ring-zigzag | 0.03 | 2.00 | 0.8000 | 2.50x |")

    def test_single_at_P_above_one_is_left_out_and_off_model_flagged(self):
        out, _ = self.table([decode_report(4, 0.5, platform="dgx-h100", matches=False)])
        self.assertIn("— dgx-h100, cached C = 1024", out)
        self.assertNotIn("| single |", out)
        self.assertIn("1.00x (bytes off the model!) |", out)


class DecodeMeshTable(unittest.TestCase):
    def test_fastest_against_pure_cp_and_tp(self):
        def rep(P, rows, C=4096):
            res = []
            for label, strategy, tpot, fit in rows:
                inf = {"pass": "decode", "cached": C, "decode_steps": 8, "tpot_ms": tpot, "kv_cache_bytes": 2 << 20,
                       "max_cached_tokens": fit}
                res.append({"status": "ok", "label": label, "strategy": strategy, "inference": inf})
            res.append({"status": "failed", "label": "usp[t3]", "strategy": "usp", "reason": "x"})
            return {"config": {"world_size": P}, "context": {"simulated": {"platform": "dgx-h100"}}, "results": res}
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, r in enumerate([rep(8, [("ring-zigzag", "ring-zigzag", 0.85, 0), ("megatron-sp", "megatron-sp", 0.30, 1576679),
                                           ("usp[t4xu1xr2]", "usp", 0.36, 1158884)]),
                                   rep(16, [("ring-zigzag", "ring-zigzag", 0.89, 0), ("usp[t8xu1xr2]", "usp", 0.305, 3153358)])]):
                paths.append(str(Path(d) / f"m{i}.json"))
                Path(paths[-1]).write_text(json.dumps(r))
            out = serving_table.decode_mesh_table(paths)
        self.assertIn("### decode by mesh — dgx-h100, cached C = 4096", out)
        self.assertIn("| 8 | megatron-sp | 0.3000 | 0.8500 | 0.3000 | 2.0 | 1576679 |", out)
        self.assertIn("| 16 | usp[t8xu1xr2] | 0.3050 | 0.8900 | - | 2.0 | 3153358 |", out)  # no megatron-sp row: '-'
        self.assertNotIn("usp[t3]", out)


class HelixTable(unittest.TestCase):
    def test_fastest_helix_against_the_fastest_mesh_and_megatron(self):
        # Per P: the fastest '+mlpP' result (Helix), the fastest without '+mlp' (megatron-sp apart),
        # megatron-sp; cache tokens per rank = C over the result's ring level; '+mlp2' at P = 8 is
        # not Helix and is left out; a result off the model is flagged.
        C = 1 << 20
        def res(label, strategy, tpot, ring, matches=True):
            inf = {"pass": "decode", "cached": C, "decode_steps": 8, "tpot_ms": tpot, "kv_cache_bytes": 1}
            return {"status": "ok", "label": label, "strategy": strategy, "inference": inf, "mesh": {"ring": ring},
                    "comm": {"fwd": {"bytes_sent": 8 * 100, "matches_model": matches}}}
        reps = [{"config": {"world_size": 8}, "context": {"simulated": {"platform": "dgx-h100"}}, "results": [
                    res("usp[u1xr8]+mlp8", "usp", 0.75, 8), res("usp[t4xu1xr2]+mlp8", "usp", 0.58, 2, matches=False),
                    res("usp[t2xu1xr4]+mlp2", "usp", 0.10, 4), res("usp[t8xu1xr1]", "usp", 0.54, 1),
                    res("ring-zigzag", "ring-zigzag", 1.0, 8), res("megatron-sp", "megatron-sp", 0.54, 1)]},
                {"config": {"world_size": 16}, "context": {"simulated": {"platform": "dgx-h100"}}, "results": [
                    res("usp[t8xu1xr2]+mlp16", "usp", 0.45, 2), res("usp[t16xu1xr1]", "usp", 0.50, 1)]}]
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, r in enumerate(reps):
                paths.append(str(Path(d) / f"h{i}.json"))
                Path(paths[-1]).write_text(json.dumps(r))
            out = serving_table.helix_table(paths)
        self.assertIn("| 1048576 | 8 | usp[t4xu1xr2]+mlp8 | 0.580 (bytes off the model!) | 524288 | usp[t8xu1xr1] | 0.540 | "
                      "1048576 | 0.540 | 1048576 |", out)
        self.assertIn("| 1048576 | 16 | usp[t8xu1xr2]+mlp16 | 0.450 | 524288 | usp[t16xu1xr1] | 0.500 | 1048576 | - | - |", out)
        self.assertNotIn("+mlp2", out)


if __name__ == "__main__":
    unittest.main()
