#!/usr/bin/env python3
"""Tests of scripts/plan.py: its tables (tier columns, bands, ties, memory, what it says when nothing
fits) and its figures' data (plan.figure_rows: order, relative times, families, ties, bytes per tier,
fits), on synthetic reports; the figures are checked to be written, never their pixels.

Run: python3 -m unittest test_plan -v  (from tests/python; ctest: 'python_plan')
"""
import copy
import re
import subprocess
import sys
import unittest

from test_tools import HERE, ROOT, SCRIPTS, TempDirCase, run_script, synth

sys.path.insert(0, str(SCRIPTS))
import plan  # noqa: E402
import plan_figures  # noqa: E402

GiB = 2**30


def plan_tables(markdown):
    """plan.py's Markdown -> {N: [row dict by header]}."""
    tables, n, header = {}, None, None
    for line in markdown.splitlines():
        if line.startswith("### N = "):
            n = int(line.split("=")[1])
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "rank":
            header = cells
        elif cells[0].isdigit():
            tables.setdefault(n, []).append(dict(zip(header, cells)))
    return tables


class PlanTest(TempDirCase):
    """scripts/plan.py: tier columns from the report, bands, ties, the plot."""

    def markdown(self, report, *args):
        res = run_script("plan.py", self.write("plan.json", report), *args)
        self.assertEqual(res.returncode, 0, res.stderr)
        return res.stdout

    def test_tier_columns_equal_the_reports_tiers(self):
        rep = synth.make_report(strategies=["ring", "ulysses", "usp[u2xr2]"], seqs=[1024, 2048])
        rep["context"]["nodes"] = {"source": "host", "node_of_rank": [0, 0, 1, 1]}
        oks = [r for r in rep["results"] if r["status"] == "ok"]
        # Per-rank bytes whose busiest rank differs by tier and phase: the column is the maximum over
        # ranks of fwd + bwd (5 KiB x k), not the sum of the phases' maxima (7 KiB x k), and the
        # busiest rank to other nodes (rank 3) is not the busiest in its node (rank 0).
        intra = {"fwd": [1024, 3072, 2048, 0], "bwd": [4096, 1024, 1024, 0]}
        inter = {"fwd": [0, 2**19, 2**20, 2**20], "bwd": [0, 2**19, 0, 2**19]}
        for k, r in enumerate(oks, 1):
            for ph in ("fwd", "bwd"):
                per = [{"intra_node_bytes": k * a, "inter_node_bytes": k * b} for a, b in zip(intra[ph], inter[ph])]
                r["comm"][ph]["tiers"] = {"intra_node_bytes": max(x["intra_node_bytes"] for x in per),
                                          "inter_node_bytes": max(x["inter_node_bytes"] for x in per),
                                          "per_rank": per}
        # --recompute (schema 14): its repeated forward's bytes join the column, rank by rank (rank 1
        # now sends most inside its node: 1 + 3 + 2 KiB; rank 3 to other nodes: 1 + 0.5 + 0.5 MiB)
        rec = oks[0]["comm"]["recompute"] = copy.deepcopy(oks[0]["comm"]["fwd"])
        rec["tiers"]["per_rank"] = [{"intra_node_bytes": a, "inter_node_bytes": b}
                                    for a, b in zip([0, 2048, 0, 0], [0, 0, 0, 2**19])]
        del oks[-1]["comm"]["fwd"]["tiers"]  # an older report's result: no tiers, nothing invented
        out = self.markdown(rep)
        self.assertIn("4 GPUs (2 nodes)", out)
        tables = plan_tables(out)
        shown = {(row["strategy"], n): row for n, rows in tables.items() for row in rows}
        self.assertEqual(len(shown), len(oks))
        for k, r in enumerate(oks, 1):
            row = shown[(r["label"], r["seq"])]
            if k == len(oks):
                self.assertEqual((row["bytes to own node"], row["bytes to other nodes"]), ("n/a", "n/a"))
            elif k == 1:
                self.assertEqual((row["bytes to own node"], row["bytes to other nodes"]), ("6.00 KiB", "2.00 MiB"))
            else:
                self.assertEqual(row["bytes to own node"], "%.2f KiB" % (5 * k))
                self.assertEqual(row["bytes to other nodes"], "%.2f MiB" % (1.5 * k))
        # the checker used by ctest agrees, and fails on a changed cell
        md = self.tmp / "plan.md"
        del rep["results"][-1]  # (the n/a result is not a real report's)
        self.write("plan.json", rep)
        md.write_text(run_script("plan.py", self.tmp / "plan.json").stdout, encoding="utf-8")
        chk = [sys.executable, str(HERE / "check_report.py"), "plan", str(self.tmp / "plan.json"), str(md)]
        res = subprocess.run(chk + ["--min-cross", "5"], capture_output=True, text=True)
        self.assertEqual(res.returncode, 0, res.stdout)
        md.write_text(md.read_text(encoding="utf-8").replace("| 3.00 MiB |", "| 3.01 MiB |"), encoding="utf-8")
        res = subprocess.run(chk, capture_output=True, text=True)
        self.assertEqual(res.returncode, 1, res.stdout)
        self.assertIn("plan shows '3.01 MiB'", res.stdout)

    def test_overlapping_bands_are_tied(self):
        # spread 0.02: bands are median x [0.99, 1.01]; ulysses (10.1) overlaps ring (10.0), usp does not.
        rep = synth.make_report(strategies=["usp[u2xr2]", "ulysses", "ring"], seqs=[1024],
                                step_ms={"ring": 10.0, "ulysses": 10.1, "usp[u2xr2]": 12.0})
        rep["results"][0]["mfu"] = None  # usp: no peak known
        out = self.markdown(rep)
        rows = {r["strategy"]: r for r in plan_tables(out)[1024]}
        self.assertEqual([rows[s]["tie"] for s in ("ring", "ulysses", "usp[u2xr2]")], ["=1", "=1", ""])
        self.assertEqual([rows[s]["rank"] for s in ("ring", "ulysses", "usp[u2xr2]")], ["1", "2", "3"])
        self.assertEqual(rows["ring"]["band ms"], "9.900-10.100")
        self.assertEqual(rows["ulysses"]["vs best"], "+1.0%")
        self.assertEqual((rows["usp[u2xr2]"]["MFU"], rows["ring"]["MFU"]), ("-", "%.1f%%" % (100 * rep["results"][2]["mfu"])))
        self.assertIn("Tie at N = 1024: **ring** is fastest by median, but ulysses is 1.0% slower: "
                      "their bands overlap the best's (ring 9.900-10.100 ms (p10-p90); "
                      "ulysses 9.999-10.201 ms (p10-p90))", out)
        self.assertNotIn("Winner", out)
        self.assertIn("Best per N (4 GPUs): N=1024: ring (tied: ulysses)", out)

    def test_disjoint_bands_name_one_winner(self):
        rep = synth.make_report(strategies=["ulysses", "ring"], seqs=[1024], step_ms={"ring": 10.0, "ulysses": 10.5})
        out = self.markdown(rep)
        rows = {r["strategy"]: r for r in plan_tables(out)[1024]}
        self.assertEqual([rows["ring"]["tie"], rows["ulysses"]["tie"]], ["", ""])
        self.assertEqual(rows["ring"]["vs best"], "best")
        self.assertIn("Winner at N = 1024: **ring**; the next, ulysses, is 5.0% slower", out)
        self.assertNotIn("Tie", out)
        self.assertNotIn("Caution", out)
        self.assertIn("Best per N (4 GPUs): N=1024: ring\n", out)
        # one timed step: zero-width bands cannot overlap, and the verdict says so
        rep = synth.make_report(strategies=["ulysses", "ring"], seqs=[1024], iters=1,
                                step_ms={"ring": 10.0, "ulysses": 10.1})
        out = self.markdown(rep)
        self.assertIn("Winner at N = 1024: **ring**; the next, ulysses, is 1.0% slower", out)
        self.assertIn("Caution: a band of zero width", out)

    def test_band_from_timing_step_ms_band_when_present(self):
        # p10..p90 alone: disjoint (as above). With band {0.9, 1.1}: 9-11 ms and 9.45-11.55 ms, tied.
        rep = synth.make_report(strategies=["ulysses", "ring"], seqs=[1024], step_ms={"ring": 10.0, "ulysses": 10.5})
        for r in rep["results"]:
            r["timing"]["step_ms"]["band"] = {"lo": 0.9, "hi": 1.1}
        out = self.markdown(rep)
        rows = {r["strategy"]: r for r in plan_tables(out)[1024]}
        self.assertEqual((rows["ring"]["band ms"], rows["ulysses"]["band ms"]), ("9.000-11.000", "9.450-11.550"))
        self.assertEqual([rows["ring"]["tie"], rows["ulysses"]["tie"]], ["=1", "=1"])
        self.assertIn("ring 9.000-11.000 ms (timing.step_ms.band)", out)
        # and the other way: p10..p90 overlap (spread 0.2) but the band is narrow: one winner
        rep = synth.make_report(strategies=["ulysses", "ring"], seqs=[1024], spread=0.2,
                                step_ms={"ring": 10.0, "ulysses": 10.5})
        self.assertIn("Tie at N = 1024", self.markdown(rep))
        for r in rep["results"]:
            r["timing"]["step_ms"]["band"] = {"lo": 0.99, "hi": 1.01}
        self.assertIn("Winner at N = 1024: **ring**", self.markdown(rep))

    def test_bad_band_exit_2(self):
        rep = synth.make_report(strategies=["ring"], seqs=[1024])
        rep["results"][0]["timing"]["step_ms"]["band"] = {"lo": 1.2, "hi": 1.1}
        res = run_script("plan.py", self.write("bad.json", rep))
        self.assertEqual(res.returncode, 2)
        self.assertIn("ring N=1024: timing.step_ms.band {lo: 1.2, hi: 1.1} must satisfy 0 < lo <= 1 <= hi", res.stderr)

    def test_fits_under_each_shard_choice_from_the_estimates_groups(self):
        # ring on 4 ranks: 4 blocks of 2^24 attention parameters (1/64 GiB-param), every group over 4
        # replicas; held 2^26, sharded 2^24, largest unit one block 2^24. States in GiB: none 16/16 = 1;
        # optimizer 4/16 + 12/64 = 0.4375; grads 2/16 + 2 x 2/64 + 12/64 = 0.375; params 2 x 2 x 2/64
        # + 12/64 = 0.3125; activations 1 GiB per 1024 tokens. Against 2.4 GiB at N = 2048: none
        # 3.00 and optimizer 2.44 do not fit, grads 2.38 and params 2.31 do.
        GiB = 2**30
        rep = synth.make_report(strategies=["ring"], seqs=[1024, 2048])
        rep["config"]["shard"] = "optimizer"
        groups = [{"name": "norms", "copies": 4, "parameters": 0, "replicas": 4, "shard": 0},
                  {"name": "attention", "copies": 4, "parameters": GiB // 64, "replicas": 4, "shard": GiB // 256},
                  {"name": "mlp", "copies": 4, "parameters": 0, "replicas": 4, "shard": 0},
                  {"name": "embedding", "copies": 1, "parameters": 0, "replicas": 4, "shard": 0}]
        for r in rep["results"]:
            act = GiB * r["seq"] // 1024
            r["memory"]["model_estimate"] = {
                "layers": 4, "parameters": GiB // 16, "weights": GiB // 8, "grads": GiB // 8,
                "optimizer": 3 * GiB // 16, "activations": act, "total": 7 * GiB // 16 + act,
                "shard": "optimizer", "groups": groups, "formula": "estimate, per rank: the formula"}
        out = self.markdown(rep, "--hbm-gib", "2.4")
        self.assertIn("| strategy | none | optimizer (run) | grads | params |", out)
        self.assertIn("| ring | **no** 3.00 GiB | **no** 2.44 GiB | yes 2.38 GiB | yes 2.31 GiB |", out)
        self.assertIn("Fit at N = 2048: none: none; optimizer: none; grads: ring; params: ring.", out)
        self.assertIn("Least memory under the run's choice, ring: estimate, per rank: the formula", out)
        # longest N: (2.4 - states) GiB at 1 GiB per 1024 tokens; sync: one reduce-scatter of
        # 4 x 2 B x 2^22 x 3 = 96 MiB, twice (all-reduce, ZeRO-2) or three times (FSDP)
        self.assertIn("| ring | 1,433, sync 192.00 MiB | 2,009, sync 192.00 MiB | 2,073, sync 192.00 MiB "
                      "| 2,137, sync 288.00 MiB |", out)
        rows = {r["strategy"]: r for r in plan_tables(out)[2048]}
        self.assertEqual(rows["ring"]["fits HBM"], "**no** (est. 2.44 GiB)")  # the ranking is the run's choice
        for r in rep["results"]:  # a report before --shard: said so, no table
            del r["memory"]["model_estimate"]["groups"]
        out = self.markdown(rep, "--hbm-gib", "2.4")
        self.assertIn("this report's estimate predates --shard (schema < 7)", out)
        self.assertNotIn("| strategy | none |", out)

    def test_fits_use_the_model_estimate_when_present(self):
        GiB = 2**30
        rep = synth.make_report(strategies=["ring", "ulysses"], seqs=[1024, 2048],
                                step_ms={"ring": 10.0, "ulysses": 20.0})
        for r in rep["results"]:
            if r["label"] == "ring":  # the whole model: 1 GiB of parameters' state + 1 GiB per 1024 tokens
                act = GiB * r["seq"] // 1024
                r["memory"]["model_estimate"] = {
                    "layers": 4, "parameters": GiB // 16, "weights": GiB // 8, "grads": GiB // 8,
                    "optimizer": 3 * GiB // 4, "activations": act, "total": GiB + act,
                    "formula": "estimate, per rank: ..."}
        self.assertLess(max(r["memory"]["peak_bytes"] for r in rep["results"]), GiB // 4)  # the block alone is small
        rep["config"]["recompute"] = "none"
        out = self.markdown(rep, "--hbm-gib", "10")
        self.assertIn("memory.model_estimate.total, an **estimate** of the whole model per rank (4 layers", out)
        rows = {r["strategy"]: r for r in plan_tables(out)[2048]}
        self.assertEqual(rows["ring"]["fits HBM"], "yes (est. 3.00 GiB)")
        self.assertEqual(rows["ring"]["longest N that fits"], "9,216 (est.)")  # (10 - 1) GiB / (1 GiB / 1024)
        self.assertEqual(rows["ulysses"]["fits HBM"], "yes")  # no estimate: the measured peak, as before
        self.assertNotIn("est.", rows["ulysses"]["longest N that fits"])
        # 2.5 GiB: the block's peak would fit, the whole model does not; ring is out of the ranking
        out = self.markdown(rep, "--hbm-gib", "2.5")
        rows = {r["strategy"]: r for r in plan_tables(out)[2048]}
        self.assertEqual(rows["ring"]["fits HBM"], "**no** (est. 3.00 GiB)")
        self.assertEqual(rows["ring"]["longest N that fits"], "1,536 (est.)")
        self.assertEqual(rows["ulysses"]["vs best"], "best")
        self.assertIn("Best per N (4 GPUs): N=1024: ring, N=2048: ulysses", out)
        # 0.5 GiB: the parameters' state alone (1 GiB) does not fit, at no N
        rows = {r["strategy"]: r for r in plan_tables(self.markdown(rep, "--hbm-gib", "0.5"))[2048]}
        self.assertEqual(rows["ring"]["longest N that fits"], "none (est.)")
        # one N: the estimate's non-activation part stays, its activations grow with N
        rep["results"] = [r for r in rep["results"] if r["seq"] == 1024]
        rows = {r["strategy"]: r for r in plan_tables(self.markdown(rep, "--hbm-gib", "10"))[1024]}
        self.assertEqual(rows["ring"]["longest N that fits"], "9,216 (est.)")

    def test_verify_report_exit_2(self):
        res = run_script("plan.py", self.write("v.json", synth.make_report(command="verify", seqs=[1024])))
        self.assertEqual(res.returncode, 2)
        self.assertIn("is a 'verify' report: it has no step times to rank", res.stderr)


def strategies_in_design():
    """The registered strategy names: DESIGN.md's strategy table (ctest design_cli holds it equal to
    `cpbench list --json`)."""
    text = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    body = re.search(r"^## Strategies\s*$(.*?)(?=^## )", text, re.M | re.S).group(1)
    return re.findall(r"^\| `([a-z0-9-]+)` \|", body, re.M)


# Medians at N = 1024 (ms); spread 0.02 makes every band median x [0.99, 1.01].
STEP = {"usp[u2xr2]": 10.0, "double-ring[w2]": 10.05, "ulysses": 10.1, "ring-zigzag": 10.5, "megatron-sp": 11.0,
        "allgather-kv": 12.0, "usp[t2xu2xr1]": 15.0, "ring": 20.0, "single": 30.0}


def family_report():
    """A report of every family at two N; double-ring and the tp mesh are made from results the
    synthetic generator can build (ring-zigzag's, usp's) by renaming them and setting mesh.tp."""
    made = {"double-ring[w2]": "ring-striped", "usp[t2xu2xr1]": "usp[u1xr4]"}
    step = {made.get(k, k): v for k, v in STEP.items()}
    rep = synth.make_report(strategies=list(step), seqs=[1024, 2048], step_ms=step)
    for r in rep["results"]:
        if r["label"] == "ring-striped":
            r.update(strategy="double-ring", label="double-ring[w2]")
        elif r["label"] == "usp[u1xr4]":
            r.update(label="usp[t2xu2xr1]", mesh=synth.mesh_block(2, 1, tp=2))
    return rep


class FigureDataTest(TempDirCase):
    """plan.figure_rows: what the three figures draw."""

    def test_order_relative_times_ties_and_families(self):
        rep = family_report()
        rows = plan.figure_rows(plan.ok_results(rep), None)
        at = [r for r in rows if r["N"] == 1024]
        self.assertEqual([r["label"] for r in at], sorted(STEP, key=STEP.get))  # fastest first
        self.assertEqual([r["N"] for r in rows], [1024] * len(STEP) + [2048] * len(STEP))
        for r in at:
            self.assertAlmostEqual(r["rel_time"], STEP[r["label"]] / 10.0, places=9)
            self.assertAlmostEqual(r["band_lo"], 0.99 * STEP[r["label"]] / 10.0, places=9)
            self.assertAlmostEqual(r["band_hi"], 1.01 * STEP[r["label"]] / 10.0, places=9)
            self.assertIsNone(r["fits"])  # a measured report without --hbm-gib: no HBM known
        self.assertEqual([r["label"] for r in at if r["best"]], ["usp[u2xr2]"])
        # bands 9.9-10.1 (best), 9.9495-10.1505 and 9.999-10.201 overlap it; 10.395-10.605 does not
        self.assertEqual([r["label"] for r in at if r["tied"]], ["usp[u2xr2]", "double-ring[w2]", "ulysses"])
        self.assertEqual({r["label"]: r["family"] for r in at}, {
            "usp[u2xr2]": "usp", "double-ring[w2]": "ring family", "ulysses": "ulysses", "ring-zigzag": "ring family",
            "megatron-sp": "megatron-sp", "allgather-kv": "allgather-kv", "usp[t2xu2xr1]": "usp with tp",
            "ring": "ring family", "single": "single"})
        # the table says the same: its order, its ties
        md = plan_tables(run_script("plan.py", self.write("f.json", rep)).stdout)[1024]
        self.assertEqual([m["strategy"] for m in md], [r["label"] for r in at])
        self.assertEqual([m["tie"] == "=1" for m in md], [r["tied"] for r in at])

    def test_every_registered_strategy_has_a_family(self):
        names = strategies_in_design()
        self.assertIn("double-ring", names)
        for name in names:
            self.assertNotEqual(plan.family(name), "other", name)
        self.assertEqual([plan.family("usp", t) for t in (None, 1, 2, 16)], ["usp", "usp", "usp with tp", "usp with tp"])
        self.assertEqual(plan.family("ring-zigzag", 4), "ring family")  # tp is usp's level only
        self.assertEqual(plan.family("a-new-one"), "other")

    def test_bytes_per_tier_are_the_reports(self):
        rep = family_report()
        r0 = next(r for r in rep["results"] if r["label"] == "ring" and r["seq"] == 1024)
        for ph, k in (("fwd", 1), ("bwd", 3)):  # rank 2 sends most to other nodes, rank 0 within its own
            r0["comm"][ph]["tiers"]["per_rank"] = [{"intra_node_bytes": k * a, "inter_node_bytes": k * b}
                                                   for a, b in ((500, 0), (100, 10), (0, 70), (20, 30))]
        del next(r for r in rep["results"] if r["label"] == "single")["comm"]["fwd"]["tiers"]
        rows = {(r["label"], r["N"]): r for r in plan.figure_rows(plan.ok_results(rep), None)}
        self.assertEqual((rows[("ring", 1024)]["intra"], rows[("ring", 1024)]["inter"]), (2000, 280))
        self.assertEqual((rows[("single", 1024)]["intra"], rows[("single", 1024)]["inter"]), (None, None))
        ul = next(r for r in rep["results"] if r["label"] == "ulysses" and r["seq"] == 2048)
        self.assertEqual((rows[("ulysses", 2048)]["intra"], rows[("ulysses", 2048)]["inter"]),
                         (ul["comm"]["fwd"]["bytes_sent"] + ul["comm"]["bwd"]["bytes_sent"], 0))

    def test_fits_and_the_best_that_fits(self):
        rep = family_report()
        for r in rep["results"]:
            r["memory"]["peak_bytes"] = 100 * GiB if r["label"] in ("usp[u2xr2]", "ring") else 10 * GiB
        rows = [r for r in plan.figure_rows(plan.ok_results(rep), 80 * GiB) if r["N"] == 1024]
        self.assertEqual({r["label"] for r in rows if r["fits"] is False}, {"usp[u2xr2]", "ring"})
        self.assertTrue(all(r["fits"] for r in rows if r["label"] not in ("usp[u2xr2]", "ring")))
        self.assertEqual([r["mem"] for r in rows], [100 * GiB] + [10 * GiB] * 6 + [100 * GiB, 10 * GiB])
        # the best is the fastest that fits: double-ring; usp[u2xr2], faster, stays above it at < 1
        self.assertEqual([r["label"] for r in rows if r["best"]], ["double-ring[w2]"])
        self.assertAlmostEqual(rows[0]["rel_time"], 10.0 / 10.05, places=9)
        self.assertEqual([r["label"] for r in rows if r["tied"]], ["double-ring[w2]", "ulysses"])
        self.assertFalse(any(r["nothing_fits"] for r in rows))
        # the verdict names the faster results that do not fit
        out = run_script("plan.py", self.write("fits.json", rep), "--hbm-gib", "80").stdout
        self.assertIn("Tie at N = 1024: **double-ring[w2]** is fastest by median of those that fit, but ulysses is 0.5% "
                      "slower", out)
        self.assertIn("so these runs cannot rank them. 1 faster result does not fit in HBM (the fastest, usp[u2xr2], "
                      "0.5% less time).", out)
        self.assertEqual(plan_tables(out)[1024][0]["vs best"], "-0.5%")


class RecomputeFitsTest(unittest.TestCase):
    """plan.py's "Fits under each --recompute": the estimate's activations rebuilt per choice from
    the report's numbers (hand-computed), and a report before schema 14 said to predate them."""

    @staticmethod
    def result(seq, core=None):
        e = {"layers": 4, "total": 1000 + 4 * 300, "activations": 4 * 300, "shard": "optimizer"}
        if core is not None:
            e["core_activations"] = core
        return {"strategy": "ring", "label": "ring", "seq": seq, "status": "ok",
                "memory": {"activations": 300, "model_estimate": e}}

    def test_each_choice_from_the_reports_numbers(self):
        cfg = {"batch": 2, "dim": 8, "dtype": "bf16", "recompute": "none", "shard": "optimizer"}
        r = self.result(64, core=100)  # T = 64 / 4 = 16 tokens: the block input 2 x 16 x 8 x 2 B = 512
        self.assertEqual(plan.recompute_total(r, cfg, 4, "none"), 1000 + 4 * 300)
        self.assertEqual(plan.recompute_total(r, cfg, 4, "selective"), 1000 + 4 * (300 - 100) + 100)
        self.assertEqual(plan.recompute_total(r, cfg, 4, "full"), 1000 + 4 * 512 + 300)
        rep = {"config": cfg, "context": {"world_size": 4}}
        lines = plan.recompute_section(rep, [r], {"ring": [r]}, 2000)
        self.assertIn("| strategy | none (run) | selective | full |", lines)
        self.assertIn("| ring | **no** 2.15 KiB | yes 1.86 KiB | **no** 3.27 KiB |", lines)  # 2200, 1900, 3348 B
        self.assertIn("Fit at N = 64: none: none; selective: ring; full: none.", lines)
        # one N: 1000 B stay, the rest grows with N: (2000 - 1000) / (1200, 900, 2348 B per 64 tokens)
        self.assertEqual(lines[-2], "| ring | 53 | 71 | 27 |")
        old = self.result(64)  # schema 13: no core_activations
        self.assertIsNone(plan.recompute_total(old, cfg, 4, "none"))
        self.assertIn("predates core_activations (schema < 14)",
                      plan.recompute_section(rep, [old], {"ring": [old]}, 2000)[0])


class NothingFitsTest(TempDirCase):
    """No result fits in HBM: every row still has its margin and tie, against the fastest."""

    def test_every_row_has_vs_best_and_ties(self):
        rep = family_report()
        res = run_script("plan.py", self.write("n.json", rep), "--hbm-gib", "0.0001")
        self.assertEqual(res.returncode, 0, res.stderr)
        for n, md in plan_tables(res.stdout).items():
            self.assertEqual([m["fits HBM"] for m in md], ["**no**"] * len(STEP))
            self.assertEqual(md[0]["vs best"], "fastest")
            for m in md[1:]:
                self.assertRegex(m["vs best"], r"^\+\d+\.\d%$")
            self.assertEqual([m["strategy"] for m in md if m["tie"] == "=1"], ["usp[u2xr2]", "double-ring[w2]", "ulysses"])
            self.assertEqual(md[3]["vs best"], "+5.0%")  # ring-zigzag, 10.5 against 10.0
        self.assertIn("Nothing fits in HBM at N = 1024: the least memory, ", res.stdout)
        self.assertIn("the ranking is of step time only. Tie at N = 1024: **usp[u2xr2]** is fastest by median", res.stdout)
        self.assertIn("their bands overlap the fastest's", res.stdout)
        self.assertIn("N=1024: none fits (fastest: usp[u2xr2], tied: double-ring[w2], ulysses)", res.stdout)
        rows = plan.figure_rows(plan.ok_results(rep), 0.0001 * GiB)
        self.assertTrue(all(r["nothing_fits"] and r["fits"] is False for r in rows))
        self.assertEqual([r["label"] for r in rows if r["best"]], ["usp[u2xr2]"] * 2)
        self.assertEqual([r["rel_time"] for r in rows if r["best"]], [1.0, 1.0])

    def test_one_winner_by_step_time_alone(self):
        rep = synth.make_report(strategies=["ulysses", "ring"], seqs=[1024], step_ms={"ring": 10.0, "ulysses": 10.5})
        out = run_script("plan.py", self.write("w.json", rep), "--hbm-gib", "0.0001").stdout
        md = plan_tables(out)[1024]
        self.assertEqual([(m["strategy"], m["vs best"], m["tie"]) for m in md],
                         [("ring", "fastest", ""), ("ulysses", "+5.0%", "")])
        self.assertIn("the ranking is of step time only. Fastest at N = 1024: **ring**; the next, ulysses, is 5.0% "
                      "slower, and the fastest's band lies below every other's", out)
        self.assertNotIn("Winner", out)


class FiguresTest(TempDirCase):
    """--plot writes one figure per question; not their pixels."""

    def test_paths(self):
        self.assertEqual(plan_figures.paths("out/plan.png"),
                         {"time": "out/plan-time.png", "bytes": "out/plan-bytes.png", "memory": "out/plan-memory.png"})
        self.assertEqual(plan_figures.paths("out/plan")["time"], "out/plan-time.png")
        self.assertEqual(plan_figures.paths("plan.svg")["memory"], "plan-memory.svg")
        self.assertEqual(plan_figures.paths("run.v2")["bytes"], "run.v2-bytes.png")

    def test_plot_writes_the_three_figures(self):
        a = self.write("a.json", family_report())
        b = self.write("b.json", synth.make_report(strategies=["ring", "ulysses"], seqs=[4096], world_size=8))
        for prefix, args in (("p.png", ()), ("q", ("--hbm-gib", "0.0001"))):  # the second: nothing fits
            res = run_script("plan.py", a, b, "--plot", self.tmp / prefix, *args)
            self.assertEqual(res.returncode, 0, res.stderr)
            for q, path in plan_figures.paths(str(self.tmp / prefix)).items():
                self.assertIn("plot: %s" % path, res.stdout)
                self.assertGreater((self.tmp / path).stat().st_size, 0, q)
        self.assertFalse((self.tmp / "p.png").exists())


if __name__ == "__main__":
    unittest.main()
