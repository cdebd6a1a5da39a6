#!/usr/bin/env python3
"""scripts/workloads_table.py's scheme table on small synthetic reports (ctest: python_tools)."""
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "workloads_table.py"


def report(scheme, P, results):
    """A report with only what the table reads: config (docs, P, N, balance) and ok results."""
    cfg = {"world_size": P, "seqs": [4096], "mask": {"docs": {"spec": "outlier"}}, "dtype": "fp32"}
    if scheme is not None:
        cfg["balance"] = scheme
    res = [{"status": "ok", "label": label, "strategy": label, "balance": {"flops_imbalance": imb},
            "timing": {"step_ms": {"median": step}},
            "comm": {"fwd": {"bytes_sent": fwd}, "bwd": {"bytes_sent": 2 * fwd}}}
           for label, imb, step, fwd in results]
    res.append({"status": "failed", "label": "ulysses", "reason": "x"})  # not ok: left out
    return {"config": cfg, "results": res}


class SchemesTable(unittest.TestCase):
    def run_table(self, reps):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for i, rep in enumerate(reps):
                paths.append(Path(d) / f"r{i}.json")
                paths[-1].write_text(json.dumps(rep))
            out = subprocess.run([sys.executable, str(SCRIPT), "table", "--schemes", *map(str, paths)],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_ratios_bytes_and_losses(self):
        mib = 2 ** 20
        out = self.run_table([
            report(None, 4, [("ring", 2.0, 100.0, mib), ("ring-zigzag", 1.5, 80.0, mib)]),  # no key: none
            report("greedy", 4, [("ring", 1.02, 60.0, 2 * mib), ("ring-zigzag", 1.6, 88.0, mib)]),
            report("doc-zigzag", 8, [("ring", 1.1, 50.0, mib)]),  # no none at P = 8: ratio '-'
        ])
        self.assertIn("### outlier — P = 4, N = 4096, by --balance scheme", out)
        self.assertIn("| ring | none | 2.000 | 1.00x | 3.00 |", out)
        self.assertIn("| ring | greedy | 1.020 | 0.60x | 6.00 |", out)       # 60 / 100; (2 + 4) MiB
        self.assertIn("| ring-zigzag | greedy | 1.600 | 1.10x | 3.00 |", out)  # 88 / 80
        self.assertIn("| ring | doc-zigzag | 1.100 | - | 3.00 |", out)
        self.assertNotIn("ulysses", out)
        losses = out.split("Where balancing loses:")[1]
        self.assertIn("- outlier, P = 4, ring-zigzag, greedy: flops_imbalance 1.600 > none's 1.500; "
                      "step 1.10x none's", losses)
        self.assertNotIn("ring, greedy", losses)  # greedy wins on ring
        # none is listed before the schemes, in DESIGN's order
        self.assertLess(out.index("| ring | none |"), out.index("| ring | greedy |"))

    def test_repeats_median_of_ratios(self):
        with tempfile.TemporaryDirectory() as d:
            dirs = []
            for i, (none_ms, greedy_ms) in enumerate([(100.0, 80.0), (100.0, 95.0), (50.0, 55.0)]):
                dirs.append(Path(d) / f"run{i}")
                dirs[-1].mkdir()
                (dirs[-1] / "a.json").write_text(json.dumps(report(None, 4, [("ring", 2.0, none_ms, 0)])))
                (dirs[-1] / "b.json").write_text(json.dumps(report("greedy", 4, [("ring", 1.0, greedy_ms, 0)])))
            out = subprocess.run([sys.executable, str(SCRIPT), "repeats", *map(str, dirs)],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        # ratios 0.80, 0.95, 1.10: median 0.95, not a gain in every repeat
        self.assertIn("| outlier | 4 | ring | greedy | 0.95x | 0.80 - 1.10 |", out.stdout)
        self.assertNotIn("gain", out.stdout)

    def test_no_losses_said(self):
        out = self.run_table([report("none", 4, [("ring", 2.0, 100.0, 0)]),
                              report("dynamic", 4, [("ring", 1.0, 90.0, 0)])])
        self.assertIn("| ring | dynamic | 1.000 | 0.90x | 0.00 |", out)
        self.assertIn("- none of these cases", out)

    def test_simulated_reports_apart(self):
        """A simulated report (context.simulated) gets its own heading and is never the `none`
        baseline of a CPU report of the same workload, P and N."""
        sim_none = report("none", 4, [("ring", 2.0, 10.0, 0)])
        sim_none["context"] = {"simulated": {"platform": "dgx-h100"}}
        sim_greedy = report("greedy", 4, [("ring", 1.0, 12.0, 0)])
        sim_greedy["context"] = {"simulated": {"platform": "dgx-h100"}}
        out = self.run_table([report("none", 4, [("ring", 2.0, 100.0, 0)]), sim_none, sim_greedy])
        self.assertIn("### outlier — P = 4, N = 4096, by --balance scheme", out)
        self.assertIn("### outlier — P = 4, N = 4096, simulated on dgx-h100, by --balance scheme", out)
        self.assertIn("| ring | greedy | 1.000 | 1.20x | 0.00 |", out)  # 12 / the simulated none's 10
        self.assertIn("- outlier, P = 4, simulated on dgx-h100, ring, greedy: step 1.20x none's", out)


if __name__ == "__main__":
    unittest.main()
