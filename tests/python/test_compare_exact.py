#!/usr/bin/env python3
"""Tests of `compare_reports.py --exact`, the check that a refactor changed no byte, tier byte,
FLOP or verification outcome (docs/CONTRIBUTING.md "Refactoring without changing a byte").

Each case starts from one synthetic report, changes one thing in a copy (keeping the copy valid,
so that the loader's exit 2 cannot stand in for a detected difference), and asserts the exit
status and that the output names the changed field. The unchanged case and the timing-only case
assert 0, so every mutation case is shown to fail only because of its mutation.

Run: python3 -m unittest tests/python/test_compare_exact.py -v  (ctest: 'python_compare_exact')
"""
import contextlib
import copy
import functools
import io
import json
import math
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent.parent / "scripts"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SCRIPTS))

import compare_reports  # noqa: E402
import make_synthetic_report as synth  # noqa: E402
import validate_report  # noqa: E402

P = 4
STRATEGIES = ["ring", "usp[u2xr2]", "ulysses"]


class ExactCompareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Every case reads the same schema file: compile it once (0.7 s a time) so the test stays
        # fast. The reports themselves are validated in full on every call, as on the command line.
        cls._load_schema = validate_report.load_schema
        validate_report.load_schema = functools.lru_cache(maxsize=None)(cls._load_schema)

    @classmethod
    def tearDownClass(cls):
        validate_report.load_schema = cls._load_schema

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="cpbench-exact-")
        self.tmp = Path(self._tmp.name)
        self.base = synth.make_report(strategies=STRATEGIES, seqs=[1024, 2048], world_size=P, verify=True)

    def tearDown(self):
        self._tmp.cleanup()

    def exact(self, base, new, *extra):
        """(exit status, printed text) of compare_reports --exact BASE NEW."""
        paths = []
        for name, rep in (("base.json", base), ("new.json", new)):
            path = self.tmp / name
            path.write_text(json.dumps(rep), encoding="utf-8")
            paths.append(str(path))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = compare_reports.main(["--exact", *paths, *extra])
        return rc, out.getvalue() + err.getvalue()

    def result(self, rep, label, seq):
        return next(r for r in rep["results"] if r["label"] == label and r["seq"] == seq)

    def assertDiffers(self, new, *fragments):
        rc, text = self.exact(self.base, new)
        self.assertEqual(rc, 1, text)
        self.assertIn("DIFFERENT", text)
        for f in fragments:
            self.assertIn(f, text)
        return text

    def test_identical(self):
        rc, text = self.exact(self.base, copy.deepcopy(self.base))
        self.assertEqual(rc, 0, text)
        self.assertIn("IDENTICAL: 6 of 6 BASE job(s) identical", text)

    def test_one_byte_count(self):
        new = copy.deepcopy(self.base)
        bwd = self.result(new, "ring", 2048)["comm"]["bwd"]
        # Rank 1 sends 4 more bytes; the report stays consistent (max, tiers, flag).
        bwd["per_rank"][1] += 4
        bwd["bytes_sent"] = max(bwd["per_rank"])
        bwd["matches_model"] = False
        bwd["tiers"]["per_rank"][1]["intra_node_bytes"] += 4
        bwd["tiers"]["intra_node_bytes"] = max(t["intra_node_bytes"] for t in bwd["tiers"]["per_rank"])
        self.assertDiffers(new, "ring seq 2048:", "$.comm.bwd.per_rank[1]", "$.comm.bwd.bytes_sent")

    def test_one_tier_byte(self):
        # Same total per rank, 4 bytes moved from the node's links to the network on rank 2.
        new = copy.deepcopy(self.base)
        tiers = self.result(new, "usp[u2xr2]", 1024)["comm"]["fwd"]["tiers"]
        tiers["per_rank"][2]["intra_node_bytes"] -= 4
        tiers["per_rank"][2]["inter_node_bytes"] += 4
        tiers["inter_node_bytes"] = max(t["inter_node_bytes"] for t in tiers["per_rank"])
        text = self.assertDiffers(new, "usp[u2xr2] seq 1024: 3 difference(s)",
                                  "$.comm.fwd.tiers.per_rank[2].inter_node_bytes: 0 -> 4")
        self.assertNotIn("per_rank[2]: ", text)  # the bytes sent per rank did not change

    def test_one_flop_count(self):
        # 2 FLOPs out of ~1e9: inside the validator's 1e-4 tolerance for tflops, not exact.
        new = copy.deepcopy(self.base)
        self.result(new, "ulysses", 1024)["flops"]["model"] += 2
        self.assertDiffers(new, "ulysses seq 1024: 1 difference(s)", "$.flops.model")

    def test_counted_flops_per_rank(self):
        new = copy.deepcopy(self.base)
        bal = self.result(new, "ring", 1024)["balance"]
        bal["model_flops_per_rank"] = [f + 1 for f in bal["model_flops_per_rank"]]
        self.assertDiffers(new, "$.balance.model_flops_per_rank[0]")

    def test_missing_job(self):
        new = copy.deepcopy(self.base)
        new["results"] = [r for r in new["results"] if not (r["label"] == "ulysses" and r["seq"] == 2048)]
        self.assertDiffers(new, "ulysses seq 2048: in BASE only (ok)")
        # ... and the other way round: a job only the new code runs.
        rc, text = self.exact(new, self.base)
        self.assertEqual(rc, 1, text)
        self.assertIn("ulysses seq 2048: in NEW only (ok)", text)

    def test_verify_status(self):
        base = synth.make_report(strategies=STRATEGIES, seqs=[1024], world_size=P, command="verify", verify=True)
        new = synth.make_report(strategies=STRATEGIES, seqs=[1024], world_size=P, command="verify",
                                verify={lab: lab != "ring" for lab in STRATEGIES})
        self.assertEqual(self.exact(base, copy.deepcopy(base))[0], 0)
        rc, text = self.exact(base, new)
        self.assertEqual(rc, 1, text)
        self.assertIn("ring seq 1024:", text)
        self.assertIn('$.status: "ok" -> "failed"', text)
        self.assertIn("$.verify.passed: true -> false", text)

    def test_one_verify_error_bit(self):
        # One tensor's error, not the largest, one ulp larger: still passes, still a difference.
        new = copy.deepcopy(self.base)
        tensors = self.result(new, "usp[u2xr2]", 2048)["verify"]["tensors"]
        tensors["dv"] = math.nextafter(tensors["dv"], 1.0)
        self.assertDiffers(new, "$.verify.tensors.dv")

    def test_timing_only(self):
        # Slower, noisier, other op times and bandwidths: the same work, so identical; the
        # regression gate (without --exact) does see the 30 % slowdown.
        new = synth.make_report(strategies=STRATEGIES, seqs=[1024, 2048], world_size=P, verify=True,
                                step_ms=13.0, spread=0.01)
        rc, text = self.exact(self.base, new)
        self.assertEqual(rc, 0, text)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            paths = [str(self.tmp / "base.json"), str(self.tmp / "new.json")]
            self.assertEqual(compare_reports.main(paths), 1)

    def test_config_difference(self):
        new = copy.deepcopy(self.base)
        new["config"]["seed"] += 1
        self.assertDiffers(new, "report: 1 difference(s)", "$.config.seed: 42 -> 43")

    def test_max_diffs_and_count(self):
        # Every byte of every job scaled: all jobs differ; one line per difference up to N a job.
        new = synth.make_report(strategies=STRATEGIES, seqs=[1024, 2048], world_size=P, verify=True, comm_scale=2.0)
        rc, text = self.exact(self.base, new, "--max-diffs", "2")
        self.assertEqual(rc, 1, text)
        self.assertIn("DIFFERENT (6 problem(s))", text)
        self.assertIn("more", text)
        job = text.split("ring seq 1024:")[1].split("\n")
        self.assertEqual(len([ln for ln in job[1:4] if ln.startswith("  $")]), 2)

    def test_invalid_report(self):
        new = copy.deepcopy(self.base)
        self.result(new, "ring", 1024)["comm"]["fwd"]["bytes_sent"] += 1  # != max(per_rank)
        rc, text = self.exact(self.base, new)
        self.assertEqual(rc, 2, text)


    def test_directories(self):
        # Two directories of reports (scripts/parts_compare.sh): pairs by file name.
        dirs = {}
        for side in ("base", "new"):
            dirs[side] = self.tmp / side
            dirs[side].mkdir()
            for name in ("a.json", "b.json"):
                (dirs[side] / name).write_text(json.dumps(self.base), encoding="utf-8")

        def run():
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                rc = compare_reports.main(["--exact", str(dirs["base"]), str(dirs["new"])])
            return rc, out.getvalue()

        rc, text = run()
        self.assertEqual(rc, 0, text)
        self.assertIn("2 of 2 report pair(s) identical", text)
        changed = copy.deepcopy(self.base)
        self.result(changed, "ring", 1024)["flops"]["hardware"] += 1
        (dirs["new"] / "b.json").write_text(json.dumps(changed), encoding="utf-8")
        rc, text = run()
        self.assertEqual(rc, 1, text)
        self.assertIn("$.flops.hardware", text)
        self.assertIn("1 of 2 report pair(s) identical, 1 different", text)
        (dirs["new"] / "b.json").unlink()
        rc, text = run()
        self.assertEqual(rc, 1, text)
        self.assertIn("b.json: in BASE only", text)
        (dirs["new"] / "a.json").write_text("{", encoding="utf-8")
        self.assertEqual(run()[0], 2)


if __name__ == "__main__":
    unittest.main()
