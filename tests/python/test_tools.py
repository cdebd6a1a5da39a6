#!/usr/bin/env python3
"""Tests of the report tools: the schema, validate_report, compare_reports, plot_report (plan.py: test_plan.py).

Run: python3 -m unittest test_tools -v   (from tests/python; ctest: 'python_tools'; every
tests/python/test_NAME.py is its own ctest, python_NAME)
The scripts are exercised through their command lines, as CI and users call them.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRIPTS = ROOT / "scripts"
SCHEMA = ROOT / "results_schema" / "report.schema.json"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SCRIPTS))

import make_synthetic_report as synth  # noqa: E402
import validate_report  # noqa: E402


def run_script(name, *args):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, str(SCRIPTS / name), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="cpbench-test-")
        self.tmp = Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, report):
        path = self.tmp / name
        path.write_text(json.dumps(report, indent=1), encoding="utf-8")
        return path


class SchemaTest(unittest.TestCase):
    """The schema itself and schema + semantic validation of synthetic reports."""

    @classmethod
    def setUpClass(cls):
        cls.validator = validate_report.load_schema()

    def problems(self, report):
        return validate_report.check_report(report, self.validator)

    def assertValid(self, report):
        self.assertEqual(self.problems(report), [])

    def assertInvalid(self, report, path_fragment, message_fragment=""):
        probs = self.problems(report)
        self.assertTrue(probs, "the broken report was accepted")
        hits = [p for p in probs if path_fragment in p[0] and message_fragment in p[1]]
        self.assertTrue(hits, f"no problem at {path_fragment!r} mentioning {message_fragment!r}; got {probs}")

    def test_schema_is_valid_draft_2020_12(self):
        import jsonschema
        schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator.check_schema(schema)
        self.assertEqual(schema["$schema"], "https://json-schema.org/draft/2020-12/schema")
        self.assertIn("$id", schema)
        self.assertEqual(schema["properties"]["schema_version"]["const"], 14)

    def test_every_field_has_a_description(self):
        schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
        missing = []

        def walk(node, where):
            if isinstance(node, dict):
                for name, sub in node.get("properties", {}).items():
                    if isinstance(sub, dict) and "description" not in sub:
                        # A bare $ref takes the description of its target.
                        target = sub.get("$ref", "")
                        if not (target.startswith("#/$defs/") and
                                "description" in schema["$defs"][target.split("/")[-1]]):
                            missing.append(f"{where}.{name}")
                for key, sub in node.items():
                    if key not in ("if", "then", "else"):  # conditions restate fields, not declare them
                        walk(sub, f"{where}.{key}")
            elif isinstance(node, list):
                for i, sub in enumerate(node):
                    walk(sub, f"{where}[{i}]")

        walk(schema, "$")
        self.assertEqual(missing, [])

    def test_accepts_synthetic_run_report(self):
        self.assertValid(synth.make_report())
        self.assertValid(synth.make_report(seqs=[512], world_size=1, strategies=["single", "ring"]))
        self.assertValid(synth.make_report(strategies=["usp[u2xr4]", "usp[u4xr2]", "ring-striped"], world_size=8,
                                           seqs=[4096], dtype="bf16", causal=False))

    def test_accepts_skipped_failed_and_verified_results(self):
        rep = synth.make_report(verify={"ring": True, "ulysses": False}, skipped={"megatron-sp": "P=4 does not divide H=6"},
                                failed={("allgather-kv", 2048): "MPI_ERR_TRUNCATE"})
        self.assertValid(rep)
        statuses = {r["status"] for r in rep["results"]}
        self.assertEqual(statuses, {"ok", "skipped", "failed"})

    def test_accepts_verify_report_without_metrics(self):
        rep = synth.make_report(command="verify", verify={"ring": False})
        self.assertValid(rep)
        self.assertTrue(all("timing" not in r for r in rep["results"]))

    def test_accepts_comm_model_mismatch_when_flagged(self):
        rep = synth.make_report(comm_scale=1.1)  # matches_model false and consistent: valid data
        self.assertValid(rep)

    def test_accepts_extra_env_keys(self):
        rep = synth.make_report()
        rep["context"]["env"]["NCCL_DEBUG"] = "INFO"
        self.assertValid(rep)

    def test_context_nccl(self):
        rep = synth.make_report(dtype="bf16")  # comm nccl: carries context.nccl
        self.assertValid(rep)
        bad = synth.make_report(dtype="bf16")
        del bad["context"]["nccl"]
        self.assertInvalid(bad, "$.context", "context.nccl")
        bad = synth.make_report()  # comm mpi
        bad["context"]["nccl"] = rep["context"]["nccl"]
        self.assertInvalid(bad, "$.context.nccl", "config.comm is 'mpi'")
        bad = synth.make_report(dtype="bf16")
        bad["context"]["nccl"]["communicators"] = 0
        self.assertInvalid(bad, "$.context.nccl.used", "0 NCCL communicators")
        self.assertInvalid(bad, "$.context.nccl.calls_through_nccl", "without any NCCL communicator")
        bad = synth.make_report(dtype="bf16")
        bad["context"]["nccl"]["calls_local"]["send"] = 1
        self.assertInvalid(bad, "$.context.nccl.calls_local", "self messages pair up")
        bad = synth.make_report(dtype="bf16")
        bad["context"]["nccl"]["calls_local"]["put"] = 1
        self.assertInvalid(bad, "$.context.nccl.calls_local", "put")

    def test_rejects_missing_field(self):
        rep = synth.make_report()
        del rep["results"][2]["timing"]
        self.assertInvalid(rep, "$.results[2]", "'timing' is a required property")
        rep = synth.make_report()
        del rep["results"][0]["comm"]["fwd"]["predicted_bytes"]
        self.assertInvalid(rep, "$.results[0].comm.fwd", "predicted_bytes")
        rep = synth.make_report()
        del rep["context"]["git_sha"]
        self.assertInvalid(rep, "$.context", "git_sha")

    def test_rejects_wrong_type(self):
        rep = synth.make_report()
        rep["results"][1]["seq"] = "1024"
        self.assertInvalid(rep, "$.results[1].seq", "not of type 'integer'")
        rep = synth.make_report()
        rep["results"][1]["comm"]["bwd"]["bytes_sent"] = 1.5
        self.assertInvalid(rep, "$.results[1].comm.bwd.bytes_sent", "integer")
        rep = synth.make_report()
        rep["config"]["causal"] = "yes"
        self.assertInvalid(rep, "$.config.causal", "boolean")

    def test_rejects_bad_schema_version(self):
        for bad in (1, 2, 15, 0, "3", 3.5):
            rep = synth.make_report()
            rep["schema_version"] = bad
            self.assertInvalid(rep, "$.schema_version")

    def test_recompute_phase_exactly_under_a_recompute(self):
        # Schema 14: comm.recompute is present exactly when config.recompute repeats a forward.
        rep = synth.make_report()
        rep["config"]["recompute"] = "selective"
        self.assertInvalid(rep, "$.results[0].comm", "recompute phase absent under config.recompute 'selective'")
        rep = synth.make_report()
        rep["config"]["recompute"] = "full"
        for r in rep["results"]:
            if r["status"] == "ok":
                r["comm"]["recompute"] = copy.deepcopy(r["comm"]["fwd"])
        self.assertValid(rep)
        rep["config"]["recompute"] = "none"
        self.assertInvalid(rep, "$.results[0].comm", "recompute phase present under config.recompute 'none'")

    def test_schema_3_reports_validate_against_the_v3_schema(self):
        # A v3 report (no integrity) is valid; the same with schema 4's field is not (v3's objects
        # are closed), and a v4 report must carry it.
        v3 = synth.make_report(schema_version=3)
        self.assertValid(v3)
        self.assertNotIn("integrity", v3["results"][0])
        with_integrity = copy.deepcopy(v3)
        with_integrity["results"][0]["integrity"] = {"ok": True, "flags": [], "expected_flops": 1.0}
        self.assertInvalid(with_integrity, "$.results[0]", "integrity")
        v4 = copy.deepcopy(v3)
        v4["schema_version"] = 4
        self.assertInvalid(v4, "$.results[0]", "'integrity' is a required property")

    def test_schema_5_adds_the_mlp_mesh_only(self):
        # mesh.mlp_tp (--mlp-tp) is valid from schema 5 on; schema 4's closed mesh object refuses it.
        v5 = synth.make_report(schema_version=5)
        self.assertEqual(v5["schema_version"], 5)
        v5["config"]["mesh"]["mlp_tp"] = 4
        lab = v5["results"][0]["label"]
        v5["results"][0]["label"] = lab + "+mlp4"
        v5["results"][0]["mesh"]["mlp_tp"] = 4
        v5["config"]["strategies"] = [s if s != lab else lab for s in v5["config"]["strategies"]]
        self.assertValid(v5)
        v4 = copy.deepcopy(v5)
        v4["schema_version"] = 4
        self.assertInvalid(v4, "$.config.mesh", "mlp_tp")
        no_suffix = copy.deepcopy(v5)
        no_suffix["results"][0]["label"] = lab
        self.assertInvalid(no_suffix, "$.results[0].label", "+mlpN")

    def test_integrity_flags_follow_the_reports_own_figures(self):
        rep = synth.make_report()
        r = rep["results"][0]
        self.assertEqual(r["integrity"], {"ok": True, "flags": [], "expected_flops": r["integrity"]["expected_flops"]})
        self.assertValid(rep)
        bad = copy.deepcopy(rep)
        bad["results"][0]["integrity"]["ok"] = False  # ok without flags
        self.assertInvalid(bad, "$.results[0].integrity.ok", "exactly when")
        # The rate over the peak it is divided by must be flagged, and then is valid.
        over = copy.deepcopy(rep)
        o = over["results"][0]
        o["peak"]["tflops"] = o["tflops"] / 2
        o["mfu"], o["hfu"] = o["mfu"] * 0.05 / o["peak"]["tflops"], o["hfu"] * 0.05 / o["peak"]["tflops"]
        self.assertInvalid(over, "$.results[0].integrity.flags", "tflops_over_peak not flagged")
        o["integrity"] = {"ok": False, "flags": [f"tflops_over_peak: {o['tflops']} > peak {o['peak']['tflops']}"],
                          "expected_flops": o["integrity"]["expected_flops"]}
        self.assertValid(over)
        # A flag with no cause, a flag twice, an unknown kind.
        extra = copy.deepcopy(rep)
        extra["results"][0]["integrity"] = {"ok": False, "flags": ["tflops_over_peak: 1 > peak 2"],
                                            "expected_flops": r["integrity"]["expected_flops"]}
        self.assertInvalid(extra, "$.results[0].integrity.flags", "there is nothing to flag")
        twice = copy.deepcopy(over)
        twice["results"][0]["integrity"]["flags"] *= 2
        self.assertInvalid(twice, "$.results[0].integrity.flags", "flagged 2 times")
        unknown = copy.deepcopy(rep)
        unknown["results"][0]["integrity"] = {"ok": False, "flags": ["slow: yes"], "expected_flops": None}
        self.assertInvalid(unknown, "$.results[0].integrity.flags[0]", "does not match")
        # Counted FLOPs (sum over ranks) off the model: flagged exactly when beyond 1e-6.
        off = copy.deepcopy(rep)
        off["results"][0]["integrity"]["expected_flops"] *= 1.01
        self.assertInvalid(off, "$.results[0].integrity.flags", "flops_mismatch not flagged")
        close = copy.deepcopy(rep)
        close["results"][0]["integrity"]["expected_flops"] *= 1 + 1e-8
        self.assertValid(close)
        none = copy.deepcopy(rep)
        none["results"][0]["integrity"] = {"ok": False, "flags": ["flops_mismatch: counted 1 != model 2"],
                                           "expected_flops": None}
        self.assertInvalid(none, "$.results[0].integrity.flags", "expected_flops is null")

    def test_peak_unavailable_means_null_mfu(self):
        rep = synth.make_report()
        ok = [r for r in rep["results"] if r["status"] == "ok"][0]
        ok["peak"] = {"tflops": None, "source": "unavailable", "reason": "GEMM calibration failed"}
        ok["mfu"] = ok["hfu"] = None
        self.assertValid(rep)
        ok["mfu"] = 0.5
        self.assertInvalid(rep, ".mfu", "null")
        ok["mfu"] = None
        ok["peak"]["source"] = "flag"
        self.assertInvalid(rep, ".peak.tflops", "unavailable")

    def test_hta_ratio_is_min_over_ranks(self):
        rep = synth.make_report()
        ok = [r for r in rep["results"] if r["status"] == "ok" and r["comm"]["fwd"]["bytes_sent"] > 0][0]
        ok["overlap"]["per_rank"][1]["hta_ratio"] = 0.25
        self.assertInvalid(rep, ".overlap.hta_ratio", "min over per_rank")
        ok["overlap"]["hta_ratio"] = 0.25
        self.assertValid(rep)

    def test_overlap_ratio_null_exactly_when_the_job_sends_nothing(self):  # schema 3
        rep = synth.make_report()
        silent = [r for r in rep["results"] if r["status"] == "ok" and r["strategy"] == "single"][0]
        self.assertIsNone(silent["overlap"]["ratio"])
        self.assertValid(rep)
        silent["overlap"]["ratio"] = 1.0
        self.assertInvalid(rep, ".overlap.ratio", "null exactly when the job sends nothing")
        rep = synth.make_report()
        sending = [r for r in rep["results"] if r["status"] == "ok" and r["comm"]["fwd"]["bytes_sent"] > 0][0]
        sending["overlap"]["ratio"] = None
        self.assertInvalid(rep, ".overlap.ratio", "null exactly when the job sends nothing")

    def test_config_block_and_ffn_dim(self):  # schema 3
        rep = synth.make_report()
        rep["config"]["block"] = "mlp"
        self.assertInvalid(rep, "$.config.block")
        rep = synth.make_report()
        rep["config"]["block"], rep["config"]["ffn_dim"] = "full", 0
        self.assertInvalid(rep, "$.config.ffn_dim")
        rep["config"]["ffn_dim"] = None  # full without F
        self.assertInvalid(rep, "$.config.ffn_dim", "an integer under 'full'")
        rep["config"]["ffn_dim"] = 96
        self.assertValid(rep)
        rep["config"]["block"] = "attn"  # F without an MLP
        self.assertInvalid(rep, "$.config.ffn_dim", "null under 'attn'")

    def test_tiers_add_up_to_bytes_sent(self):
        rep = synth.make_report()
        ok = [r for r in rep["results"] if r["status"] == "ok" and r["comm"]["fwd"]["bytes_sent"] > 0][0]
        t = ok["comm"]["fwd"]["tiers"]
        t["per_rank"][1]["inter_node_bytes"] = 8
        self.assertInvalid(rep, ".comm.fwd.tiers.per_rank[1]", "!= bytes sent")
        t["per_rank"][1]["intra_node_bytes"] -= 8
        self.assertInvalid(rep, ".comm.fwd.tiers.inter_node_bytes", "max over per_rank")
        t["inter_node_bytes"] = 8
        self.assertValid(rep)

    def test_rejects_unknown_keys(self):
        rep = synth.make_report()
        rep["extra"] = 1
        self.assertInvalid(rep, "$", "Additional properties")
        rep = synth.make_report()
        rep["results"][0]["timing"]["step_ms"]["mean"] = 1.0
        self.assertInvalid(rep, "$.results[0].timing.step_ms", "Additional properties")

    def test_rejects_status_rules(self):
        rep = synth.make_report(skipped={"ring": "N not divisible"})
        r = next(r for r in rep["results"] if r["status"] == "skipped")
        del r["reason"]
        self.assertInvalid(rep, "$.results", "'reason' is a required property")
        rep = synth.make_report()
        rep["results"][0]["reason"] = "why"
        self.assertInvalid(rep, "$.results[0].reason", "not allowed")
        rep = synth.make_report()
        ok = copy.deepcopy(rep["results"][0])
        rep["results"][0]["status"] = "skipped"
        rep["results"][0]["reason"] = "x"
        self.assertInvalid(rep, "$.results[0].timing", "not allowed")
        rep = synth.make_report(command="verify")
        rep["results"][0]["timing"] = ok["timing"]
        self.assertInvalid(rep, "$.results[0].timing", "verify")
        rep = synth.make_report(command="verify")
        del rep["results"][0]["verify"]
        self.assertInvalid(rep, "$.results[0]", "'verify' is a required property")
        rep = synth.make_report(verify=True)
        rep["results"][0]["verify"]["passed"] = False
        rep["results"][0]["verify"]["max_rel_l2"] = 1.0
        rep["results"][0]["verify"]["tensors"]["dx"] = 1.0
        self.assertInvalid(rep, "$.results[0].status", "'failed' was expected")

    def test_rejects_bytes_mismatch(self):
        # Schema-valid, caught by the semantic checks: the flag contradicts the numbers.
        rep = synth.make_report(comm_scale=1.1)
        c = rep["results"][1]["comm"]["fwd"]
        c["matches_model"] = True
        self.assertInvalid(rep, "$.results[1].comm.fwd.matches_model", "predicted_per_rank[0]")
        rep = synth.make_report()
        c = rep["results"][1]["comm"]["bwd"]
        c["predicted_bytes"] += 4
        self.assertInvalid(rep, "$.results[1].comm.bwd.matches_model", "predicted_per_rank[0]")
        # Ranks predicted different bytes (ring --balance dynamic): matches_model is rank by rank.
        rep = synth.make_report()
        c = rep["results"][1]["comm"]["fwd"]
        c["per_rank"][1] -= 4
        c["tiers"]["per_rank"][1]["intra_node_bytes"] -= 4
        c["predicted_per_rank"] = list(c["per_rank"])
        self.assertValid(rep)
        c["predicted_per_rank"][1] += 4
        c["predicted_bytes"] = max(c["predicted_per_rank"])
        self.assertInvalid(rep, "$.results[1].comm.fwd.matches_model", "per_rank[1]")
        rep = synth.make_report()
        c = rep["results"][1]["comm"]["fwd"]
        c["per_rank"][0] += 8
        self.assertInvalid(rep, "$.results[1].comm.fwd.bytes_sent", "max(per_rank)")
        rep = synth.make_report()  # the max matches, one rank does not
        rep["results"][1]["comm"]["bwd"]["per_rank"][2] -= 4
        self.assertInvalid(rep, "$.results[1].comm.bwd.matches_model", "per_rank[2]")
        rep = synth.make_report()  # ops do not add up to rank 0's bytes
        rep["results"][1]["comm"]["bwd"]["ops"][0]["bytes_sent"] += 4
        self.assertInvalid(rep, "$.results[1].comm.bwd.ops", "per_rank[0]")

    def test_rejects_semantic_errors(self):
        rep = synth.make_report()
        st = rep["results"][1]["timing"]["step_ms"]
        st["p10"], st["p90"] = st["p90"], st["p10"]
        self.assertInvalid(rep, "$.results[1].timing.step_ms", "percentiles not sorted")
        rep = synth.make_report()
        rep["results"][1]["timing"]["fwd_ms"]["samples"].pop()
        self.assertInvalid(rep, "$.results[1].timing.fwd_ms.samples", "config.iters")
        rep = synth.make_report()
        rep["results"][1]["memory"]["per_rank"].append(1)
        self.assertInvalid(rep, "$.results[1].memory.per_rank", "world_size")
        rep = synth.make_report()
        rep["results"][1]["balance"]["compute_ms_per_rank"].pop()
        self.assertInvalid(rep, "$.results[1].balance.compute_ms_per_rank", "world_size")
        rep = synth.make_report()
        rep["results"][1]["mfu"] *= 100  # percent instead of fraction
        self.assertInvalid(rep, "$.results[1].mfu", "peak.tflops")
        rep = synth.make_report()
        op = rep["results"][1]["comm"]["fwd"]["ops"][0]
        op["busbw_gbps"] *= 1000
        self.assertInvalid(rep, "$.results[1].comm.fwd.ops[0].busbw_gbps")
        rep = synth.make_report()
        rep["results"].append(copy.deepcopy(rep["results"][1]))
        self.assertInvalid(rep, "$.results", "duplicate")
        rep = synth.make_report()
        rep["results"][2]["overlap"]["ratio"] = 1.0
        self.assertInvalid(rep, "$.results[2].overlap.ratio", "min over per_rank")
        rep = synth.make_report()
        rep["results"][2]["mesh"]["ring"] = 3
        self.assertInvalid(rep, "$.results[2].mesh", "world_size")

    def test_inference_block(self):
        """results[].inference (--pass prefill): the schema's fields and the three formula rules."""
        def with_inference(**change):
            rep = synth.make_report()
            r = rep["results"][1]
            seq = r["seq"]
            r["inference"] = {"pass": "prefill", "ring_pass": "kv", "cached": seq // 4, "new_tokens": seq - seq // 4,
                              "miss_rate": (seq - seq // 4) / seq, "kv_cache_bytes": 4096,
                              "ttft_ms": r["timing"]["step_ms"]["median"]}
            r["inference"].update(change)
            return rep
        self.assertValid(with_inference())
        seq = synth.make_report()["results"][1]["seq"]
        self.assertInvalid(with_inference(new_tokens=seq), "$.results[1].inference.new_tokens", "!= seq")
        self.assertInvalid(with_inference(miss_rate=0.5), "$.results[1].inference.miss_rate", "new_tokens / seq")
        self.assertInvalid(with_inference(ttft_ms=1e6), "$.results[1].inference.ttft_ms", "step_ms.median")
        self.assertInvalid(with_inference(ring_pass="x"), "$.results[1].inference.ring_pass")
        rep = with_inference()
        del rep["results"][1]["inference"]["ttft_ms"]
        self.assertInvalid(rep, "$.results[1].inference")

    def test_rejects_nan(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "nan.json"
            p.write_text(json.dumps(synth.make_report()).replace('"tflops": 0.05', '"tflops": NaN', 1))
            with self.assertRaises(validate_report.ReportError) as cm:
                validate_report.load_report(p, self.validator)
            self.assertIn("NaN", str(cm.exception))


class ValidateCliTest(TempDirCase):
    def test_valid_reports_exit_0(self):
        a = self.write("a.json", synth.make_report())
        b = self.write("b.json", synth.make_report(command="verify"))
        res = run_script("validate_report.py", a, b)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertIn("valid", res.stdout)

    def test_invalid_report_exit_1_with_json_path(self):
        rep = synth.make_report()
        rep["results"][3]["comm"]["fwd"]["matches_model"] = not rep["results"][3]["comm"]["fwd"]["matches_model"]
        good = self.write("good.json", synth.make_report())
        bad = self.write("bad.json", rep)
        res = run_script("validate_report.py", good, bad)
        self.assertEqual(res.returncode, 1)
        self.assertIn(f"{bad}: $.results[3].comm.fwd.matches_model:", res.stderr)
        self.assertIn("1 of 2 report(s) invalid", res.stderr)

    def test_unreadable_exit_1(self):
        (self.tmp / "broken.json").write_text("{\"schema_version\": 2,")
        res = run_script("validate_report.py", self.tmp / "broken.json", self.tmp / "absent.json")
        self.assertEqual(res.returncode, 1)
        self.assertIn("not valid JSON", res.stderr)
        self.assertIn("cannot read", res.stderr)

    def test_usage_error_exit_2(self):
        self.assertEqual(run_script("validate_report.py").returncode, 2)
        a = self.write("a.json", synth.make_report())
        (self.tmp / "schema.json").write_text("{\"type\": 12}")
        self.assertEqual(run_script("validate_report.py", "--schema", self.tmp / "schema.json", a).returncode, 2)

    def test_generator_cli_writes_valid_report(self):
        out = self.tmp / "gen.json"
        res = subprocess.run([sys.executable, str(HERE / "make_synthetic_report.py"), "-o", str(out),
                              "--strategies", "ring,usp[u2xr2]", "--seqs", "256,512", "--verify", "pass"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(run_script("validate_report.py", out).returncode, 0)


class CompareTest(TempDirCase):
    LABELS = ["single", "ulysses", "ring-zigzag", "usp[u2xr2]"]

    def pair(self, base_kw=None, new_kw=None, *extra):
        kw = dict(strategies=self.LABELS, seqs=[1024, 2048])
        b = self.write("base.json", synth.make_report(**{**kw, **(base_kw or {})}))
        n = self.write("new.json", synth.make_report(**{**kw, **(new_kw or {})}))
        return run_script("compare_reports.py", b, n, *extra)

    def test_clean_pair_exit_0(self):
        res = self.pair()
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        self.assertIn("| label | seq |", res.stdout)
        self.assertIn("**PASS**", res.stdout)
        self.assertIn("p90 − p10", res.stdout)  # the footer states the rule

    def test_different_masks_or_passes_refused_exit_2(self):
        kw = dict(strategies=self.LABELS, seqs=[1024, 2048])
        b = self.write("base.json", synth.make_report(**kw))
        for key, value in (("mask", {"causal": True, "window": 256, "docs": None}), ("pass", "prefill"),
                           ("block", "full")):
            rep = synth.make_report(**kw)
            rep["config"][key] = value
            if key == "block":
                rep["config"]["ffn_dim"] = 96
            n = self.write("new.json", rep)
            res = run_script("compare_reports.py", b, n)
            self.assertEqual(res.returncode, 2, res.stdout + res.stderr)
            self.assertIn(f"config.{key}", res.stderr)

    def test_planted_25_percent_regression_exit_1(self):
        res = self.pair({"spread": 0.01}, {"spread": 0.01, "step_ms": {("ring-zigzag", 2048): 10.0 * 2 ** 1.5 * 1.25}})
        self.assertEqual(res.returncode, 1, res.stdout)
        self.assertIn("REGRESSION", res.stdout)
        self.assertIn("ring-zigzag seq 2048", res.stdout)
        self.assertNotIn("ring-zigzag seq 1024", res.stdout.split("**FAIL**")[1])

    def test_5_percent_change_exit_0(self):
        res = self.pair({"spread": 0.01}, {"spread": 0.01, "step_ms": {"ulysses": 10.5}})
        self.assertEqual(res.returncode, 0, res.stdout)
        self.assertIn("+5.0%", res.stdout)

    def test_change_inside_wide_noise_band_exit_0(self):
        # 25% slower, but the runs' p10..p90 spread is 30% of the median: 0.25 < 0.10 + 0.30.
        res = self.pair({"spread": 0.30}, {"spread": 0.05, "step_ms": {"ulysses": 12.5}})
        self.assertEqual(res.returncode, 0, res.stdout)
        # ... while the same change with tight noise fails, and a custom threshold is honoured.
        self.assertEqual(self.pair({"spread": 0.01}, {"spread": 0.01, "step_ms": {"ulysses": 12.5}}).returncode, 1)
        self.assertEqual(self.pair({"spread": 0.01}, {"spread": 0.01, "step_ms": {"ulysses": 12.5}},
                                   "--threshold", "0.30").returncode, 0)

    def test_verification_flip_exit_1(self):
        res = self.pair({"verify": True}, {"verify": {"single": True, "ulysses": False, "ring-zigzag": True,
                                                      "usp[u2xr2]": True}})
        self.assertEqual(res.returncode, 1, res.stdout)
        self.assertIn("VERIFY FAILED", res.stdout)
        # Same with verify reports.
        res = self.pair({"command": "verify"}, {"command": "verify", "verify": {"ring-zigzag": False}})
        self.assertEqual(res.returncode, 1, res.stdout)

    def test_ok_to_failed_exit_1(self):
        res = self.pair({}, {"failed": {("ring-zigzag", 1024): "MPI_ERR_TRUNCATE"}})
        self.assertEqual(res.returncode, 1, res.stdout)
        self.assertIn("ok → failed", res.stdout)

    def test_new_and_missing_listed_not_failing(self):
        b = self.write("base.json", synth.make_report(strategies=["ring", "ulysses"], seqs=[1024]))
        n = self.write("new.json", synth.make_report(strategies=["ulysses", "usp[u2xr2]"], seqs=[1024]))
        res = run_script("compare_reports.py", b, n)
        self.assertEqual(res.returncode, 0, res.stdout)
        self.assertIn("Missing from NEW", res.stdout)
        self.assertIn("- ring seq 1024", res.stdout)
        self.assertIn("New in NEW", res.stdout)
        self.assertIn("- usp[u2xr2] seq 1024", res.stdout)

    def test_missing_verified_fails_unless_allowed(self):
        b = self.write("base.json", synth.make_report(strategies=["ring", "ulysses"], seqs=[1024], verify=True))
        n = self.write("new.json", synth.make_report(strategies=["ulysses"], seqs=[1024], verify=True))
        self.assertEqual(run_script("compare_reports.py", b, n).returncode, 1)
        self.assertEqual(run_script("compare_reports.py", b, n, "--allow-missing-verified").returncode, 0)
        n2 = self.write("new2.json", synth.make_report(strategies=["ring", "ulysses"], seqs=[1024], verify=True,
                                                      skipped={"ring": "N not divisible by 2P"}))
        self.assertEqual(run_script("compare_reports.py", b, n2).returncode, 1)

    def test_comm_model_break_exit_1(self):
        res = self.pair({}, {"comm_scale": 1.5})
        self.assertEqual(res.returncode, 1, res.stdout)
        self.assertIn("COMM MODEL", res.stdout)

    def test_markdown_out(self):
        md = self.tmp / "cmp.md"
        res = self.pair({}, {}, "--markdown-out", md)
        self.assertEqual(res.returncode, 0)
        self.assertEqual(md.read_text(encoding="utf-8"), res.stdout)

    def test_invalid_input_exit_2(self):
        good = self.write("good.json", synth.make_report())
        rep = synth.make_report()
        del rep["config"]
        bad = self.write("bad.json", rep)
        (self.tmp / "notjson.json").write_text("not json")
        for args in ((good, bad), (bad, good), (good, self.tmp / "notjson.json"), (good, self.tmp / "absent.json")):
            res = run_script("compare_reports.py", *args)
            self.assertEqual(res.returncode, 2, f"{args}: {res.stdout}{res.stderr}")
            self.assertIn("invalid input", res.stderr)
        rep = synth.make_report()
        rep["results"][0]["timing"]["step_ms"]["samples"].pop()  # semantically invalid
        self.assertEqual(run_script("compare_reports.py", good, self.write("sem.json", rep)).returncode, 2)

    def test_help_states_the_rule(self):
        res = run_script("compare_reports.py", "--help")
        self.assertEqual(res.returncode, 0)
        self.assertIn("noise", res.stdout)
        self.assertIn("p90 - p10", res.stdout)


class PlotTest(TempDirCase):
    EXPECTED = sorted(f"{n}.{f}" for n in ("step_time", "mfu_vs_seq", "comm_bytes", "peak_memory", "comm_tiers", "balance")
                      for f in ("png", "svg"))

    def check_outputs(self, outdir, res):
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
        self.assertEqual(sorted(p.name for p in outdir.iterdir()), self.EXPECTED)
        for p in outdir.iterdir():
            self.assertGreater(p.stat().st_size, 1000, p)
            self.assertIn(str(p), res.stdout)  # every file written is printed
        self.assertEqual((outdir / "step_time.png").read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        self.assertIn("<svg", (outdir / "comm_bytes.svg").read_text(encoding="utf-8"))

    def test_multi_seq_multi_report(self):
        a = self.write("a.json", synth.make_report(seqs=[1024, 2048, 4096]))
        b = self.write("b.json", synth.make_report(seqs=[4096, 8192], step_ms=90.0,
                                                   strategies=[f"usp[u{u}xr{4 // u}]" for u in (1, 2, 4)] + ["ring"]))
        out = self.tmp / "plots"
        self.check_outputs(out, run_script("plot_report.py", a, b, "-o", out))

    def test_single_seq_with_skipped(self):
        rep = synth.make_report(seqs=[2048], skipped={"megatron-sp": "P=4 does not divide H=6", "ulysses": "x"},
                                failed={"ring": "MPI error"})
        a = self.write("one.json", rep)
        out = self.tmp / "single"
        res = run_script("plot_report.py", a, "-o", out)
        self.check_outputs(out, res)
        self.assertIn("not plotted: megatron-sp seq 2048: skipped", res.stdout)
        self.assertIn("not plotted: ring seq 2048: failed", res.stdout)

    def test_nothing_plottable_still_writes_files(self):
        a = self.write("v.json", synth.make_report(command="verify", seqs=[1024]))
        out = self.tmp / "verify"
        self.check_outputs(out, run_script("plot_report.py", a, "-o", out))

    def test_invalid_input_exit_2(self):
        rep = synth.make_report()
        rep["schema_version"] = 15
        res = run_script("plot_report.py", self.write("bad.json", rep), "-o", self.tmp / "x")
        self.assertEqual(res.returncode, 2)
        self.assertIn("not supported", res.stderr)


def with_scheme(rep, scheme, flops_per_rank=None):
    """rep under --balance scheme: config.balance and every ok result's balance.scheme; with
    flops_per_rank, model_flops_per_rank, flops_imbalance (max / mean) and integrity.expected_flops
    (their sum) follow it."""
    rep["config"]["balance"] = scheme
    for r in rep["results"]:
        if "balance" in r:
            r["balance"]["scheme"] = scheme
            if flops_per_rank:
                r["balance"]["model_flops_per_rank"] = list(flops_per_rank)
                r["balance"]["flops_imbalance"] = max(flops_per_rank) / (sum(flops_per_rank) / len(flops_per_rank))
                # The layer's FLOPs are what the ranks counted (schema 4: else flops_mismatch).
                r["integrity"]["expected_flops"] = float(sum(flops_per_rank))
    return rep


class PlotSchemeTest(TempDirCase):
    """plot_report with several --balance schemes: series names, step_vs_none, the balance figure."""

    SEQS = [1024, 2048]
    EXPECTED = PlotTest.EXPECTED

    @classmethod
    def setUpClass(cls):
        import plot_report
        cls.pr = plot_report
        cls.validator = validate_report.load_schema()

    def reports(self):
        """ring (and ring-zigzag) under none, ring alone under doc-zigzag and greedy."""
        none = with_scheme(synth.make_report(strategies=["ring", "ring-zigzag"], seqs=self.SEQS,
                                             step_ms={("ring", 1024): 10.0, ("ring", 2048): 40.0,
                                                      ("ring-zigzag", 1024): 7.0, ("ring-zigzag", 2048): 28.0}),
                           "none", [1, 2, 3, 6])
        dz = with_scheme(synth.make_report(strategies=["ring"], seqs=self.SEQS,
                                           step_ms={("ring", 1024): 9.0, ("ring", 2048): 30.0}),
                         "doc-zigzag", [3, 3, 3, 3])
        gr = with_scheme(synth.make_report(strategies=["ring"], seqs=self.SEQS,
                                           step_ms={("ring", 1024): 8.6, ("ring", 2048): 25.0}),
                         "greedy", [2, 3, 3, 4])
        return [none, dz, gr], ["none.json", "dz.json", "greedy.json"]

    def test_schemes_name_series(self):
        reps, paths = self.reports()
        for rep, path in zip(reps, paths):
            self.assertEqual(validate_report.check_report(rep, self.validator), [], path)
        points, excluded = self.pr.collect(reps, paths)
        self.assertEqual(excluded, [])
        self.assertEqual(self.pr.series_order(points),
                         ["ring [none]", "ring-zigzag [none]", "ring [doc-zigzag]", "ring [greedy]"])
        self.assertEqual(sorted((p["series"], p["label"], p["scheme"], p["seq"]) for p in points
                                if p["seq"] == 1024),
                         [("ring [doc-zigzag]", "ring", "doc-zigzag", 1024), ("ring [greedy]", "ring", "greedy", 1024),
                          ("ring [none]", "ring", "none", 1024), ("ring-zigzag [none]", "ring-zigzag", "none", 1024)])
        fl = {(p["series"], p["seq"]): p["flops_imbalance"] for p in points}
        self.assertAlmostEqual(fl[("ring [none]", 1024)], 2.0, places=12)
        self.assertAlmostEqual(fl[("ring [greedy]", 2048)], 4 / 3, places=12)

    def test_step_vs_none_values(self):
        points, _ = self.pr.collect(*self.reports())
        got = self.pr.step_vs_none(points)
        want = {("ring", "none", 1024): 1.0, ("ring", "doc-zigzag", 1024): 0.9, ("ring", "greedy", 1024): 0.86,
                ("ring", "none", 2048): 1.0, ("ring", "doc-zigzag", 2048): 0.75, ("ring", "greedy", 2048): 0.625,
                ("ring-zigzag", "none", 1024): 1.0, ("ring-zigzag", "none", 2048): 1.0}
        self.assertEqual(sorted(got), sorted(want))
        for k, v in want.items():
            self.assertAlmostEqual(got[k], v, places=12, msg=k)

    def test_step_vs_none_on_numbers(self):
        pts = [{"label": "ring", "scheme": "none", "seq": 8, "step": 4.0},
               {"label": "ring", "scheme": "greedy", "seq": 8, "step": 3.0},
               {"label": "ring", "scheme": "greedy", "seq": 16, "step": 3.0},   # no none at 16
               {"label": "usp", "scheme": "none", "seq": 8, "step": 0.0},       # zero reference
               {"label": "usp", "scheme": "greedy", "seq": 8, "step": 1.0}]
        self.assertEqual(self.pr.step_vs_none(pts), {("ring", "none", 8): 1.0, ("ring", "greedy", 8): 0.75})

    def test_balance_figure_annotates_step_vs_none(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        points, _ = self.pr.collect(*self.reports())
        written = []
        got = self.pr.plot_balance_schemes(plt, points, self.SEQS, "t", "", self.tmp, written)
        self.assertEqual(got, {("ring [none]", 1024): "1.00x", ("ring [doc-zigzag]", 1024): "0.90x",
                               ("ring [greedy]", 1024): "0.86x", ("ring-zigzag [none]", 1024): "1.00x",
                               ("ring [none]", 2048): "1.00x", ("ring [doc-zigzag]", 2048): "0.75x",
                               ("ring [greedy]", 2048): "0.62x", ("ring-zigzag [none]", 2048): "1.00x"})
        self.assertEqual(sorted(p.name for p in written), ["balance.png", "balance.svg"])

    def test_schemes_cli_writes_every_figure(self):
        reps, paths = self.reports()
        files = [self.write(n, r) for n, r in zip(paths, reps)]
        out = self.tmp / "plots"
        PlotTest.check_outputs(self, out, run_script("plot_report.py", *files, "-o", out))

    def test_same_scheme_twice_adds_the_file_tag(self):
        reps, paths = self.reports()
        reps.append(with_scheme(synth.make_report(strategies=["ring"], seqs=self.SEQS), "greedy"))
        paths.append("greedy2.json")
        points, _ = self.pr.collect(reps, paths)
        self.assertEqual(self.pr.series_order(points),
                         ["ring [none] (none)", "ring-zigzag [none] (none)", "ring [doc-zigzag] (dz)",
                          "ring [greedy] (greedy)", "ring [greedy] (greedy2)"])
        ratios = self.pr.step_vs_none(points)
        self.assertNotIn(("ring", "greedy", 1024), ratios)  # two greedy points: no unique ratio
        self.assertAlmostEqual(ratios[("ring", "doc-zigzag", 1024)], 0.9, places=12)

    def test_single_scheme_keeps_old_names(self):
        a = synth.make_report(strategies=["ring", "ulysses"], seqs=[1024])   # no scheme: 'none'
        b = with_scheme(synth.make_report(strategies=["ring"], seqs=[2048]), "none")
        points, _ = self.pr.collect([a, b], ["a.json", "b.json"])
        self.assertEqual(self.pr.series_order(points), ["ring", "ulysses"])
        self.assertEqual({p["scheme"] for p in points}, {"none"})
        g = with_scheme(synth.make_report(strategies=["ring"], seqs=[1024]), "greedy")
        points, _ = self.pr.collect([g], ["g.json"])
        self.assertEqual(self.pr.series_order(points), ["ring"])
        c = synth.make_report(strategies=["ring"], seqs=[1024])
        points, _ = self.pr.collect([a, c], ["a.json", "c.json"])
        self.assertEqual(self.pr.series_order(points), ["ring (a)", "ulysses (a)", "ring (c)"])


class GemmShapeTest(TempDirCase):
    """GEMM efficiency by the whole shape: scripts/sim_platform.py's gemm_efficiency (the Python form
    of SimPlatform::gemm_efficiency) and scripts/xla_gemm_table.py, which writes the grid."""

    def test_holds_out_published_shapes(self):
        from sim_platform import gemm_efficiency
        table = json.loads((ROOT / "configs/platforms/dgx-h100.json").read_text())["efficiency"]["gemm"]
        rows = table["shapes"]
        self.assertEqual(len(rows), 125)
        # the numbers test_sim_platform pins for the C++ form
        self.assertAlmostEqual(gemm_efficiency(table, 4096, 4096, 1024) * 989.4, 681.09, delta=0.7)
        self.assertAlmostEqual(gemm_efficiency(table, 1024, 2048, 4096) * 989.4, 658.74, delta=0.7)
        big = []
        for axis in range(3):
            for level in (512, 1024, 2048):
                fit = {"shapes": [r for r in rows if r[axis] != level]}
                for r in rows:
                    if r[axis] == level and len(set(r[:3])) > 1 and min(r[:3]) >= 1024:
                        big.append(abs(gemm_efficiency(fit, *r[:3]) / r[3] - 1))
        self.assertEqual(len(big), 48)
        self.assertEqual(sum(e <= 0.05 for e in big), 43)
        self.assertAlmostEqual(max(big), 0.0690, delta=5e-4)
        # a square table is read at (m n k)^(1/3)
        self.assertAlmostEqual(gemm_efficiency({"points": [[1024, 0.2], [4096, 0.8]]}, 1024, 4096, 2048), 0.5)

    def test_xla_table_to_grid(self):
        entry = ("entries {\n b: %d\n m: %d\n n: %d\n k: %d\n"
                 " flops { key: \"BF16xBF16->BF16\" value: %d }\n }\n")
        body = "".join(entry % (1, m, n, k, 100e12 * (m + n + k) / 3000)
                       for m in (256, 1024) for n in (256, 1024) for k in (256, 1024))
        body += entry % (2, 256, 256, 256, 1e12)  # batch 2: not a batch-1 GEMM, left out
        src = self.tmp / "table.h"
        src.write_text('x = R"pb(\n entries {\n key: "sm_90"\n value {\n' + body + ' }\n }\n)pb";\n')
        r = run_script("xla_gemm_table.py", src, "--arch", "sm_90", "--peak", "1000")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)["shapes"]
        self.assertEqual(len(rows), 8)
        self.assertEqual(rows[0], [256, 256, 256, 0.0256])
        self.assertEqual(rows[-1], [1024, 1024, 1024, 0.1024])
        r = run_script("xla_gemm_table.py", src, "--arch", "sm_80", "--peak", "1000")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no batch-1", r.stderr)
        r = run_script("xla_gemm_table.py", src, "--arch", "sm_90", "--peak", "10")
        self.assertEqual(r.returncode, 2)
        self.assertIn("above the peak", r.stderr)


class PlatformInputsTest(unittest.TestCase):
    """No platform input is set by a validation target: every `source` and `reason` string of
    configs/platforms/*.json (but the band's, which by definition is a validation's residuals)
    must give evidence about the input itself, never a validation result as its reason."""

    @staticmethod
    def strings(obj, path=""):
        if isinstance(obj, dict):
            for key, val in obj.items():
                if isinstance(val, str) and key in ("source", "reason"):
                    yield path + "." + key, val
                else:
                    yield from PlatformInputsTest.strings(val, path + "." + key)
        elif isinstance(obj, list):
            for i, val in enumerate(obj):
                yield from PlatformInputsTest.strings(val, "%s[%d]" % (path, i))

    @staticmethod
    def cites_a_validation(text, targets):
        """Why `text` cites a validation result, or None: the word, a validation file, or a
        published figure a validation compares against, given as a % or TFLOP/s."""
        low = text.lower()
        if "validation" in low or "validat" in low:
            return "names a validation"
        for name, figures in targets.items():
            if name in low:
                return "names configs/validation/" + name
            for v in figures:
                for form in ("%s%%" % v, "%s %%" % v, "%s tflop" % v):
                    if form in low:
                        return "quotes %s's published %s" % (name, form)
        return None

    def targets(self):
        out = {}
        for f in sorted((ROOT / "configs/validation").glob("*.json")):
            pub = json.loads(f.read_text())["published"]
            if isinstance(pub, dict):
                out[f.stem] = sorted({str(v) for v in pub.values()})
            else:  # a list of published sets (nccl_h100): every number in them
                nums = set()

                def walk(node):
                    if isinstance(node, dict):
                        for v in node.values():
                            walk(v)
                    elif isinstance(node, list):
                        for v in node:
                            walk(v)
                    elif isinstance(node, (int, float)) and not isinstance(node, bool):
                        nums.add(str(node))
                walk(pub)
                out[f.stem] = sorted(nums)
        return out

    def test_no_input_cites_a_validation(self):
        targets = self.targets()
        self.assertIn("90.2", targets["rfa_h100"])
        checked = 0
        for f in sorted((ROOT / "configs/platforms").glob("*.json")):
            for path, text in self.strings(json.loads(f.read_text())):
                if path.startswith(".band."):
                    continue
                checked += 1
                self.assertIsNone(self.cites_a_validation(text, targets), "%s%s: %s" % (f.name, path, text))
        self.assertGreater(checked, 20)

    @staticmethod
    def inputs(plat):
        """The paths of a platform's inputs (docs/SIMULATION.md, "Each input's uncertainty")."""
        out = ["peak_tflops", "hbm_gib", "memory_bw_gbs", "kernel_launch_us"]
        out += ["efficiency." + cls for cls in plat["efficiency"]]
        if "overlap_interference" in plat:
            out.append("overlap_interference")
        for tier in ("intra", "inter"):
            link = plat.get("network", {}).get(tier, {})
            out += ["network.%s.%s" % (tier, k) for k in ("bw_gbs", "lat_us", "fabric_lat_us", "op_us", "nccl", "p2p")
                    if k in link]
        return out

    @staticmethod
    def uncertainty_of(plat, path):
        """The input's {rel, reason}: beside it (an object input's own "uncertainty") or in the
        platform's top-level "uncertainty" map under its path; None when it states none."""
        node = plat
        for key in path.split("."):
            node = node[key]
        if isinstance(node, dict) and "uncertainty" in node:
            return node["uncertainty"]
        return plat.get("uncertainty", {}).get(path)

    def test_every_input_states_its_uncertainty(self):
        # Complete: every GPU platform (issue 40 item 5); local (written by calibrate_platform.py)
        # states one for its interference only, as docs/SIMULATION.md says.
        complete = {"dgx-h100", "dgx-a100", "a800", "l20-pcie"}
        for f in sorted((ROOT / "configs/platforms").glob("*.json")):
            plat = json.loads(f.read_text())
            for path in plat.get("uncertainty", {}):
                self.assertIn(path, self.inputs(plat), "%s: uncertainty for %s, not an input" % (f.name, path))
            for path in self.inputs(plat):
                u = self.uncertainty_of(plat, path)
                if u is None:
                    self.assertNotIn(plat["name"], complete, "%s: %s states no uncertainty" % (f.name, path))
                    continue
                self.assertIsInstance(u.get("rel"), (int, float), "%s: %s" % (f.name, path))
                self.assertGreaterEqual(u["rel"], 0, "%s: %s" % (f.name, path))
                self.assertTrue(u.get("reason"), "%s: %s has no reason" % (f.name, path))

    def test_catches_a_target_as_reason(self):
        targets = self.targets()
        # what dgx-h100's interference source said before issue 40
        old = ("charged to ring hops it puts ring-zigzag at 77.5% of one GPU x 8 on dgx-h100 against "
               "ring-flash-attention's published 90.2% (docs/SIMULATION.md, Overlap interference)")
        self.assertEqual(self.cites_a_validation(old, targets), "quotes rfa_h100's published 90.2%")
        self.assertEqual(self.cites_a_validation("moves Validation 3's order", targets), "names a validation")
        self.assertIsNone(self.cites_a_validation("nccl-tests sendrecv, 421.30 us at 32 MiB (79.6 GB/s)", targets))


class KernelTableTest(TempDirCase):
    """scripts/kernel_table.py: the CUDA kernel benchmark's JSON as efficiency tables."""

    def bench(self, **kw):
        b = {"tool": "cpbench_cuda_bench", "device": "Test GPU", "dtype": "bf16", "batch": 1, "heads": 16,
             "kv_heads": 16, "head_dim": 128, "warmup": 1, "iters": 3, "check_passed": True,
             "gemm": {"m": 4096, "n": 4096, "k": 4096, "tflops": 700.0},
             "results": [{"seq": 1024, "causal": False, "fwd_tflops": 300.0, "bwd_tflops": 200.0},
                         {"seq": 4096, "causal": False, "fwd_tflops": 400.0, "bwd_tflops": 250.0},
                         {"seq": 1024, "causal": True, "fwd_tflops": 200.0, "bwd_tflops": 150.0},
                         {"seq": 4096, "causal": True, "fwd_tflops": 350.0, "bwd_tflops": 220.0}]}
        b.update(kw)
        return self.write("bench.json", b)

    def test_tables_follow_the_sim_lookup(self):
        out = self.tmp / "table.json"
        plat_out = self.tmp / "measured.json"
        r = run_script("kernel_table.py", self.bench(), "--platform", ROOT / "configs/platforms/dgx-h100.json",
                       "--out", out, "--write-platform", plat_out)
        self.assertEqual(r.returncode, 0, r.stderr)
        t = json.loads(out.read_text())
        peak = 989.4
        e = t["efficiency"]
        src = e["attn_fwd"]["source"]
        fwd = e["attn_fwd"]["by_head_dim"]["128"]  # the benchmark's head dim, with its source
        self.assertEqual(fwd, [[1024.0, round(300 / peak, 4)], [4096.0, round(400 / peak, 4)]])
        self.assertEqual(e["attn_bwd_masked"]["by_head_dim"]["128"],
                         [[512.5, round(150 / peak, 4)], [2048.5, round(220 / peak, 4)]])
        self.assertEqual(e["attn_fwd_masked"]["by_head_dim"]["128"][1], [2048.5, round(350 / peak, 4)])
        self.assertEqual(e["gemm"]["points"], [[4096.0, round(700 / peak, 4)]])
        self.assertEqual(e["gemm"]["source"], src)
        for s in (t["source"], src):
            self.assertIn("Test GPU", s)
            self.assertIn("989.4", s)
        p = json.loads(plat_out.read_text())
        self.assertEqual(p["name"], "dgx-h100")
        self.assertIn("kernel_table.py", p["comment"][-1])
        # dgx-h100's published backward tables are at head dims 64 and 128: 128 is replaced by the
        # measurement, 64 kept with its source beside.
        bwd = p["efficiency"]["attn_bwd"]
        self.assertEqual(sorted(bwd["by_head_dim"]), ["128", "64"])
        self.assertEqual(bwd["by_head_dim"]["128"], e["attn_bwd"]["by_head_dim"]["128"])
        shipped = json.loads((ROOT / "configs/platforms/dgx-h100.json").read_text())["efficiency"]["attn_bwd"]
        self.assertEqual(bwd["by_head_dim"]["64"], shipped["by_head_dim"]["64"])
        self.assertIn("Test GPU", bwd["source"])
        self.assertIn(shipped["source"], bwd["source"])
        # dgx-h100's forward tables are at head dims 64 and 128 too (since issue 40): 128 replaced, 64 kept
        fwd_p = p["efficiency"]["attn_fwd"]
        self.assertEqual(fwd_p["by_head_dim"]["128"], e["attn_fwd"]["by_head_dim"]["128"])
        self.assertEqual(sorted(fwd_p["by_head_dim"]), ["128", "64"])
        self.assertIn("Test GPU", fwd_p["source"])
        self.assertEqual(p["efficiency"]["gemm"], e["gemm"])  # the measured GEMM with its source
        for cls, table in p["efficiency"].items():  # what the sim loader requires: every table sourced
            self.assertIsInstance(table, dict, cls)
            self.assertTrue(table["source"], cls)
            for pts in (table["by_head_dim"].values() if "by_head_dim" in table else [table["points"]]):
                sizes = [s for s, _ in pts]
                self.assertEqual(sizes, sorted(set(sizes)), cls)
                self.assertTrue(all(0 < v <= 1 for _, v in pts), cls)

    def test_refuses_what_it_cannot_source(self):
        plat = ROOT / "configs/platforms/dgx-h100.json"
        r = run_script("kernel_table.py", self.bench(results=[{"seq": 1024, "causal": False, "fwd_tflops": 1200.0,
                                                               "bwd_tflops": 200.0}]), "--platform", plat)
        self.assertEqual(r.returncode, 2)
        self.assertIn("attn_fwd at seq 1024", r.stderr)
        self.assertIn("not in (0, 1]", r.stderr)
        r = run_script("kernel_table.py", self.bench(results=[{"seq": 1024, "causal": True, "fwd_tflops": 100.0,
                                                               "bwd_tflops": 80.0}]), "--platform", plat)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--causal both", r.stderr)
        r = run_script("kernel_table.py", self.bench(check_passed=False), "--platform", plat)
        self.assertEqual(r.returncode, 2)
        self.assertIn("kernel check failed", r.stderr)
        r = run_script("kernel_table.py", self.bench(dtype="fp8"), "--platform", plat)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no peak_tflops for fp8", r.stderr)
        r = run_script("kernel_table.py", self.bench(head_dim=None), "--platform", plat)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no head_dim", r.stderr)


if __name__ == "__main__":
    unittest.main()
