#!/usr/bin/env python3
"""Tests of scripts/plan.py --sensitivity (scripts/plan_sensitivity.py): which platform inputs it
perturbs and how (the validity rule, on a small platform and on every shipped one), the rerun
command it builds from a report, and, with a stub simulation (sensitivity_stub.py) whose ranking
flips when one named input is perturbed, that exactly that input is named; and the reports it
refuses with exit 2 and the reason.

Run: python3 -m unittest test_sensitivity -v  (from tests/python; ctest: 'python_sensitivity')
"""
import json
import shlex
import sys
import unittest

from test_tools import HERE, ROOT, SCRIPTS, TempDirCase, run_script, synth

sys.path.insert(0, str(SCRIPTS))
import plan_sensitivity as sens  # noqa: E402

STUB = "%s %s {platform} {out}" % (shlex.quote(sys.executable), shlex.quote(str(HERE / "sensitivity_stub.py")))


def small_platform():
    """A platform of the shape the loader reads, with uncertainties the stub's ranking responds to:
    network.inter.bw_gbs (10%: ring's step), memory_bw_gbs (2.4%: ulysses', too little to matter),
    overlap_interference (1.12: usp's); kernel_launch_us and the GEMM grid change nothing."""
    return {
        "name": "stub-platform", "hbm_gib": 80, "peak_tflops": {"bf16": 1000},
        "memory_bw_gbs": 2900, "kernel_launch_us": 5.0, "band": {"lo": 0.99, "hi": 1.01, "source": "test"},
        "overlap_interference": {"compute_slowdown": 0.189, "source": "test",
                                 "uncertainty": {"rel": 1.12, "reason": "test"}},
        "efficiency": {"gemm": {"shapes": [[256, 256, 256, 0.5], [256, 256, 512, 0.95]], "source": "test",
                                "uncertainty": {"rel": 0.07, "reason": "test"}}},
        "network": {"intra": {"bw_gbs": 360, "lat_us": 0.5,
                              "p2p": {"size_time_us": [[1024, 4.0], [2048, 6.0]], "floor_us": 3.0, "source": "test",
                                      "uncertainty": {"rel": 0.2, "reason": "test"}}},
                    "inter": {"bw_gbs": 45, "lat_us": 1.0}},
        "uncertainty": {"peak_tflops": {"rel": 0, "reason": "a definition"},
                        "memory_bw_gbs": {"rel": 0.024, "reason": "test"},
                        "kernel_launch_us": {"rel": 1.5, "reason": "test"},
                        "network.inter.bw_gbs": {"rel": 0.1, "reason": "test"},
                        "network.intra.bw_gbs": {"rel": 2.3, "reason": "test"}},
    }


class InputsTest(unittest.TestCase):
    """platform_inputs and perturb: names, factors and the validity rule."""

    def test_inputs_named_by_their_path(self):
        names = [i["name"] for i in sens.platform_inputs(small_platform())]
        self.assertEqual(names, ["memory_bw_gbs", "kernel_launch_us", "network.inter.bw_gbs", "network.intra.bw_gbs",
                                 "overlap_interference.compute_slowdown", "efficiency.gemm", "network.intra.p2p"])
        with open(ROOT / "configs" / "platforms" / "dgx-h100.json", encoding="utf-8") as f:
            h100 = {i["name"]: i["rel"] for i in sens.platform_inputs(json.load(f))}
        self.assertEqual((h100["network.intra.nccl"], h100["efficiency.gemm"],
                          h100["overlap_interference.compute_slowdown"]), (0.13, 0.07, 1.12))
        self.assertNotIn("peak_tflops", h100)  # rel 0: a definition, nothing to perturb
        self.assertEqual(h100["efficiency.attn_decode"], 0.12)  # FlashMLA's two releases (issue 43)
        self.assertEqual(len(h100), 17)

    def test_the_rule(self):
        plat = small_platform()
        p, f, kind = sens.perturb(plat, "network.inter.bw_gbs", -1, 0.1)
        self.assertEqual((kind, f, p["network"]["inter"]["bw_gbs"]), ("rate", 0.9, 45 * 0.9))
        self.assertEqual(plat["network"]["inter"]["bw_gbs"], 45)  # the original is left alone
        # a rate with rel >= 1 is divided by 1 + rel on the minus side; a time goes to 0
        p, f, _ = sens.perturb(plat, "network.intra.bw_gbs", -1, 2.3)
        self.assertAlmostEqual(p["network"]["intra"]["bw_gbs"], 360 / 3.3)
        p, f, kind = sens.perturb(plat, "kernel_launch_us", -1, 1.5)
        self.assertEqual((kind, f, p["kernel_launch_us"]), ("time", 0.0, 0.0))
        # the slowdown: to 0 below, at most 10 above
        p, f, _ = sens.perturb(plat, "overlap_interference.compute_slowdown", -1, 1.12)
        self.assertEqual(p["overlap_interference"]["compute_slowdown"], 0.0)
        p, f, _ = sens.perturb(plat, "overlap_interference.compute_slowdown", 1, 100)
        self.assertEqual(p["overlap_interference"]["compute_slowdown"], 10.0)
        # an efficiency table: every efficiency scaled, capped at 1, the shape left alone
        p, f, kind = sens.perturb(plat, "efficiency.gemm", 1, 0.07)
        self.assertEqual(kind, "efficiency")
        self.assertEqual(p["efficiency"]["gemm"]["shapes"], [[256, 256, 256, 0.5 * 1.07], [256, 256, 512, 1.0]])
        # a curve: every time and the floor, not the sizes
        p, f, kind = sens.perturb(plat, "network.intra.p2p", -1, 0.2)
        c = p["network"]["intra"]["p2p"]
        self.assertEqual((kind, c["size_time_us"], c["floor_us"]), ("curve", [[1024, 4.0 * 0.8], [2048, 6.0 * 0.8]], 3.0 * 0.8))
        with self.assertRaises(sens.Refused):
            sens.perturb(plat, "network.inter.nccl", 1, 0.1)  # not a value of the file

    def test_every_shipped_platform_stays_valid(self):
        """Both sides of every input of every shipped platform keep the loader's bounds
        (kernels/sim/sim_platform.cpp): efficiencies in (0, 1], rates > 0, times >= 0, the slowdown
        in [0, 10], curve times > 0 and the floor at most the first row."""
        for path in sorted((ROOT / "configs" / "platforms").glob("*.json")):
            with open(path, encoding="utf-8") as f:
                plat = json.load(f)
            for inp in sens.platform_inputs(plat):
                for sign in (-1, 1):
                    p, _, kind = sens.perturb(plat, inp["name"], sign, inp["rel"])
                    parent, key = sens.resolve(p, inp["name"])
                    v = parent[key]
                    where = "%s %s %+d" % (path.name, inp["name"], sign)
                    if kind == "rate":
                        self.assertGreater(v, 0, where)
                    elif kind == "time":
                        self.assertGreaterEqual(v, 0, where)
                    elif kind == "slowdown":
                        self.assertTrue(0 <= v <= 10, where)
                    elif kind == "curve":
                        self.assertTrue(all(t > 0 for _, t in v["size_time_us"]), where)
                        self.assertLessEqual(v.get("floor_us", 0), v["size_time_us"][0][1], where)
                    else:
                        tables = (v["by_head_dim"].values() if "by_head_dim" in v else
                                  [v["points"]] if "points" in v else [[r[3:] for r in v["shapes"]]])
                        for t in tables:
                            self.assertTrue(all(0 < row[-1] <= 1 for row in t), where)

    def test_rerun_command_from_the_reports_argv(self):
        rep = synth.make_report(world_size=16)
        rep["context"]["argv"] = ["/b/cpbench-sim", "run", "--backend", "sim", "--peak-tflops", "989.4",
                                  "--ranks-per-node", "8", "--model", "llama3-8b", "--out", "x.json",
                                  "--trace=t.json", "--seq", "32768,131072"]
        cmd = sens.default_rerun(rep, exe="/b/cpbench-sim")
        self.assertEqual(cmd, "%s --platform {platform} -np 16 --exe /b/cpbench-sim -- run --peak-tflops 989.4 "
                              "--ranks-per-node 8 --model llama3-8b --seq 32768,131072 --out {out}"
                         % (ROOT / "scripts" / "simulate.sh"))
        # without --exe: the binary that wrote the report, where it exists
        rep["context"]["argv"][0] = sys.executable
        self.assertIn("-np 16 --exe %s -- run" % sys.executable, sens.default_rerun(rep))
        rep["context"]["argv"] = ["cpbench-sim", "verify"]
        with self.assertRaises(sens.Refused):
            sens.default_rerun(rep)


class ChangeTest(unittest.TestCase):
    """change and describe: the tied set is the verdict; a new fastest inside the same tie is not a change."""

    def test_changes(self):
        rk = lambda w, *t: {"winner": w, "tied": sorted(t)}  # noqa: E731
        self.assertIsNone(sens.change(rk("a", "b"), rk("a", "b")))
        self.assertEqual(sens.change(rk("a", "b"), rk("b", "a")), {"within_tie": ["a", "b"]})
        ch = sens.change(rk("a", "b", "c"), rk("b", "d"))
        self.assertEqual(ch, {"tied_set": [["a", "b", "c"], ["b", "d"]], "winner": ["a", "b"]})
        self.assertEqual(sens.describe("x.y", 0.87, ch), "depends on x.y (x0.87): winner a → b; d joins the tie; a, c leave the tie")
        self.assertEqual(sens.describe("x.y", 2, sens.change(rk("a"), rk("b"))), "depends on x.y (x2): winner a → b")


class SensitivityTest(TempDirCase):
    """plan.py --sensitivity with the stub simulation."""

    def setUp(self):
        super().setUp()
        self.plat = self.tmp / "platform.json"
        self.plat.write_text(json.dumps(small_platform()), encoding="utf-8")
        res = run_stub(self.plat, self.tmp / "base.json")
        self.assertEqual(res.returncode, 0, res.stderr)

    def sensitivity(self, *args, report="base.json"):
        return run_script("plan.py", self.tmp / report, "--sensitivity", "--sens-dir", self.tmp / "sens", *args)

    def test_names_the_input_that_flips_the_ranking(self):
        res = self.sensitivity("--rerun", STUB, "--jobs", "2")
        self.assertEqual(res.returncode, 0, res.stderr)
        out = res.stdout
        # ring wins alone; 10% less rate across nodes makes ulysses the winner at both N
        self.assertIn("### N = 1024: winner **ring**\n", out)
        self.assertIn("- depends on network.inter.bw_gbs (x0.9): winner ring → ulysses\n", out)
        # no interference ties usp with ring: a tie, not a new winner
        self.assertIn("- depends on overlap_interference.compute_slowdown (x0): usp[u2xr2] joins the tie\n", out)
        self.assertEqual(out.count("depends on"), 4)  # each of the two at N = 1024 and 2048
        for quiet in ("memory_bw_gbs", "kernel_launch_us", "efficiency.gemm", "network.intra.p2p", "network.intra.bw_gbs"):
            self.assertNotIn("depends on %s" % quiet, out)
            self.assertIn("| %s |" % quiet, out)  # listed among the inputs, with "none"
        self.assertIn("| kernel_launch_us | 1.5 | x0, x2.5 | none |", out)
        self.assertIn("Measure first: network.inter.bw_gbs (2 of 2 N), overlap_interference.compute_slowdown (2 of 2 N).", out)
        # the machine-readable file: every perturbation's ranking, and what each decides
        with open(self.tmp / "sens" / "sensitivity.json", encoding="utf-8") as f:
            js = json.load(f)
        self.assertEqual(js["reruns"], 1 + 2 * 7)
        self.assertEqual(js["depends_on"], {"1024": ["network.inter.bw_gbs", "overlap_interference.compute_slowdown"],
                                            "2048": ["network.inter.bw_gbs", "overlap_interference.compute_slowdown"]})
        self.assertEqual(js["baseline"]["1024"]["winner"], "ring")
        by = {(p["input"], p["sign"]): p for p in js["perturbations"]}
        self.assertEqual(len(by), 14)
        self.assertEqual(by[("network.inter.bw_gbs", "-")]["rankings"]["1024"]["winner"], "ulysses")
        self.assertEqual(by[("network.inter.bw_gbs", "-")]["decides"], [1024, 2048])
        self.assertEqual(by[("network.inter.bw_gbs", "+")]["decides"], [])
        self.assertEqual(by[("memory_bw_gbs", "+")]["rankings"]["2048"]["order"], ["ring", "ulysses", "usp[u2xr2]"])

    def test_refusals_exit_2_with_the_reason(self):
        cases = []
        measured = synth.make_report()
        self.write("measured.json", measured)
        cases.append((("measured.json", "--rerun", STUB), "is a measured report (no context.simulated)"))
        cases.append((("base.json", "--rerun", STUB + " --seqs 1024"), "is another sweep: config.seqs is [1024], the report's [1024, 2048]"))
        cases.append((("base.json", "--rerun", "false {platform} {out}"), "exited 1"))
        cases.append((("base.json", "--rerun", "true {platform}"), "the rerun command must contain {out}"))
        with open(self.tmp / "base.json", encoding="utf-8") as f:
            changed = json.load(f)
        changed["results"][0]["timing"]["step_ms"]["median"] *= 1.01
        self.write("changed.json", changed)
        cases.append((("changed.json", "--rerun", STUB), "does not reproduce the report (ring N=1024"))
        for (report, *args), reason in cases:
            res = self.sensitivity(*args, report=report)
            self.assertEqual(res.returncode, 2, (report, args, res.stdout))
            self.assertIn(reason, res.stderr, (report, args))
        res = run_script("plan.py", self.tmp / "base.json", self.tmp / "base.json", "--sensitivity")
        self.assertEqual(res.returncode, 2)
        self.assertIn("--sensitivity takes one report (got 2)", res.stderr)


def run_stub(platform, out):
    import subprocess
    return subprocess.run([sys.executable, str(HERE / "sensitivity_stub.py"), str(platform), str(out)],
                          capture_output=True, text=True)


if __name__ == "__main__":
    unittest.main()
