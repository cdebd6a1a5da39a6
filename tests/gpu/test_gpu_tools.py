"""The GPU tooling that must work without a GPU (ctest gpu_tools): scripts/gpu_check.sh up to
"no device", scripts/compare_dumps.py, scripts/ptxas_table.py, scripts/sdpa_bench.py's "cannot run
here" exit, scripts/carry_size.sh."""
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = os.path.join(ROOT, "scripts")


def run(cmd, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=240, **kw)


class GpuCheckNoDevice(unittest.TestCase):
    """CUDA_VISIBLE_DEVICES=-1 hides every GPU, so this runs the same on any machine."""

    def test_reports_no_device_and_exits_0(self):
        with tempfile.TemporaryDirectory() as tmp:
            out, work = os.path.join(tmp, "out"), os.path.join(tmp, "work")
            r = run(["bash", os.path.join(SCRIPTS, "gpu_check.sh")],
                    env={"OUT": out, "GPU_CHECK_WORK": work, "CUDA_VISIBLE_DEVICES": "-1"})
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("no device", r.stdout)
            files = sorted(os.listdir(out))
            self.assertLessEqual(len(files), 8, files)
            self.assertEqual(files, ["gpu_check.json", "gpu_check_logs.tar.gz"])
            with open(os.path.join(out, "gpu_check.json")) as f:
                s = json.load(f)
            self.assertEqual(s["state"], "no_device")
            self.assertEqual(s["failed_steps"], 0)
            self.assertTrue(s["facts"]["device"].startswith("none: CUDA_VISIBLE_DEVICES='-1'"), s["facts"]["device"])
            for key in ("os", "kernel", "glibc", "nvcc", "host_cxx", "nvidia_smi", "torch", "compute_sanitizer"):
                self.assertIn(key, s["facts"])
            steps = {st["name"]: st for st in s["steps"]}
            self.assertEqual(steps["facts"]["status"], "ok")
            for name in ("nvcc_build", "kernel_check", "memcheck", "racecheck", "synccheck", "kernel_bench", "kernel_table",
                         "torch_sdpa", "large_n", "cmake_build", "layer_check", "nccl_ops", "nccl_1rank",
                         "verify_2ranks", "verify_4ranks"):
                self.assertEqual(steps[name]["status"], "skipped", name)
                self.assertEqual(steps[name]["detail"], "no device", name)
            with tarfile.open(os.path.join(out, "gpu_check_logs.tar.gz")) as t:
                self.assertIn("logs", t.getnames())


    def test_deadline_skips_what_does_not_fit(self):
        # GPU_CHECK_ASSUME_DEVICE=1 walks the GPU steps' flow; a 25 s deadline fits none of them.
        with tempfile.TemporaryDirectory() as tmp:
            out, work = os.path.join(tmp, "out"), os.path.join(tmp, "work")
            r = run(["bash", os.path.join(SCRIPTS, "gpu_check.sh")],
                    env={"OUT": out, "GPU_CHECK_WORK": work, "GPU_CHECK_ASSUME_DEVICE": "1",
                         "GPU_CHECK_DEADLINE_S": "25"})
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(os.path.join(out, "gpu_check.json")) as f:
                s = json.load(f)
            self.assertEqual(s["state"], "done")
            self.assertEqual(s["deadline_s"], 25)
            steps = {st["name"]: st for st in s["steps"]}
            self.assertEqual(steps["nvcc_build"]["status"], "skipped")
            self.assertIn("does not fit", steps["nvcc_build"]["detail"])
            self.assertIn("does not fit", steps["torch_sdpa"]["detail"])
            self.assertEqual({st["status"] for name, st in steps.items() if name != "facts"}, {"skipped"})


    def test_failed_step_detail_holds_the_reason(self):
        # A step that fails (torch_sdpa, through a fake python3 first on PATH) must carry the real
        # reason in its JSON detail: the error line and the tail of its output, not "exit 3: ".
        with tempfile.TemporaryDirectory() as tmp:
            out, work, fake = os.path.join(tmp, "out"), os.path.join(tmp, "work"), os.path.join(tmp, "bin")
            os.makedirs(fake)
            with open(os.path.join(fake, "python3"), "w") as f:
                f.write("#!/bin/sh\necho starting\necho 'error: the real reason, on line 2' >&2\n"
                        "for i in 1 2 3 4 5 6 7 8 9; do echo \"progress $i\"; done\necho 'last words'\nexit 3\n")
            os.chmod(os.path.join(fake, "python3"), 0o755)
            r = run(["bash", os.path.join(SCRIPTS, "gpu_check.sh")],
                    env={"OUT": out, "GPU_CHECK_WORK": work, "GPU_CHECK_ASSUME_DEVICE": "1",
                         "GPU_CHECK_DEADLINE_S": "100", "GPU_CHECK_SKIP": "nvcc_build,cmake_build",
                         "PATH": fake + os.pathsep + os.environ["PATH"]})
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # a step failed
            with open(os.path.join(out, "gpu_check.json")) as f:
                s = json.load(f)
            st = {x["name"]: x for x in s["steps"]}["torch_sdpa"]
            self.assertEqual(st["status"], "FAIL")
            d = st["detail"]
            self.assertTrue(d.startswith("exit 3: error: the real reason, on line 2 | ... | "), d)
            self.assertTrue(d.endswith("progress 8 | progress 9 | last words"), d)
            self.assertNotIn("starting", d)  # only the error line and the last 6 lines
            self.assertLessEqual(len(d), 810)


class CompareDumps(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(3)
        self.tensors = {"o": rng.standard_normal((2, 8, 4)).astype(np.float32),
                        "lse": rng.standard_normal((2, 8)).astype(np.float32)}
        self.tensors["lse"][0, :3] = -np.inf  # rows that see no key
        self.meta = {"B": 1, "N": 8, "H": 2, "G": 1, "d": 4, "D": 8, "causal": True, "rope": True,
                     "seed": 1, "eps": 1e-5, "dtype": "fp32"}
        self.ref = self.write("ref", self.tensors, self.meta)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, tensors, meta):
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d)
        for k, v in tensors.items():
            np.save(os.path.join(d, k + ".npy"), v)
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f)
        return d

    def compare(self, cand, bound):
        return run([sys.executable, os.path.join(SCRIPTS, "compare_dumps.py"), self.ref, cand, "--bound", str(bound)])

    def test_within_bound_passes_and_over_bound_fails(self):
        noisy = {k: v + np.where(np.isfinite(v), 1e-3 * v, 0).astype(np.float32) for k, v in self.tensors.items()}
        cand = self.write("cand", noisy, dict(self.meta, dtype="bf16"))
        r = self.compare(cand, 2e-2)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("passed", r.stdout)
        r = self.compare(cand, 1e-5)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("> bound", r.stdout)

    def test_moved_minus_inf_fails(self):
        t = {k: v.copy() for k, v in self.tensors.items()}
        t["lse"][0, 0] = 0.5  # the reference has -inf here
        r = self.compare(self.write("cand", t, self.meta), 1.0)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("non-finite positions differ", r.stdout)

    def test_missing_tensor_and_shape_mismatch_fail(self):
        r = self.compare(self.write("c1", {"o": self.tensors["o"]}, self.meta), 1.0)
        self.assertEqual(r.returncode, 1)
        self.assertIn("lse: missing", r.stdout)
        t = dict(self.tensors, o=self.tensors["o"][:1])
        r = self.compare(self.write("c2", t, self.meta), 1.0)
        self.assertEqual(r.returncode, 1)
        self.assertIn("shape", r.stdout)

    def test_meta_disagreement_fails(self):
        r = self.compare(self.write("cand", self.tensors, dict(self.meta, N=16)), 1.0)
        self.assertEqual(r.returncode, 1)
        self.assertIn("meta.json: N", r.stdout)


class PtxasTable(unittest.TestCase):
    LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z10add_kernelPfPKfS1_l' for 'sm_90'
ptxas info    : Function properties for _Z10add_kernelPfPKfS1_l
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 20 registers, used 0 barriers, 392 bytes cmem[0]
ptxas info    : Compiling entry function '_Z8big_kernv' for 'sm_90'
ptxas info    : Function properties for _Z8big_kernv
    24 bytes stack frame, 20 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 128 bytes smem, 392 bytes cmem[0]
"""

    def test_rows(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write(self.LOG)
        try:
            r = run([sys.executable, os.path.join(SCRIPTS, "ptxas_table.py"), f.name])
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| sm_90 | 20 | 0 | 0 | 0 | 0 |", r.stdout)
        self.assertIn("| sm_90 | 255 | 20 | 16 | 24 | 128 |", r.stdout)
        self.assertIn("add_kernel", r.stdout)

    SASS = """
\tcode for sm_90
\t\tFunction : _Z8big_kernv
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0010*/                   LDSM.16.MT88.4 R8, [R2+0x800] ;
        /*0020*/                   HMMA.16816.F32.BF16 R12, R4, R8, R12 ;
        /*0030*/                   HMMA.16816.F32.BF16 R16, R4, R10, R16 ;
        /*0040*/                   HMMA.16816.F32.BF16 R20, R4, R12, R20 ;
        /*0050*/                   REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R4 ;
        /*0060*/                   REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R4 ;
\t\t..........
"""

    def test_sass_counts(self):
        """--sass: LDSM, HMMA, HMMA per LDSM and atomics (vector ones counted apart) per kernel, from
        cuobjdump -sass (a stand-in that prints the text above)."""
        with tempfile.TemporaryDirectory() as tmp:
            log, obj, fake = (os.path.join(tmp, n) for n in ("k.log", "k.o", "cuobjdump"))
            with open(log, "w") as f:
                f.write(self.LOG)
            open(obj, "w").close()
            with open(os.path.join(tmp, "sass.txt"), "w") as f:
                f.write(self.SASS)
            with open(fake, "w") as f:
                f.write(f"#!/bin/sh\ncat {os.path.join(tmp, 'sass.txt')}\n")
            os.chmod(fake, 0o755)
            r = run([sys.executable, os.path.join(SCRIPTS, "ptxas_table.py"), log, "--sass", obj],
                    env={"CUOBJDUMP": fake})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("| sm_90 | 255 | 20 | 16 | 24 | 128 | 2 | 3 | 1.50 | 2 (v1) |", r.stdout)
            self.assertIn("| sm_90 | 20 | 0 | 0 | 0 | 0 | n/a | n/a | n/a | n/a |", r.stdout)  # not in the SASS
            r = run([sys.executable, os.path.join(SCRIPTS, "ptxas_table.py"), log, "--sass", obj],
                    env={"CUOBJDUMP": os.path.join(tmp, "missing")})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("no SASS counts", r.stderr)
            self.assertIn("| sm_90 | 255 | 20 | 16 | 24 | 128 | n/a | n/a | n/a | n/a |", r.stdout)

    def test_no_kernel_is_an_error(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
            f.write("nothing here\n")
        try:
            r = run([sys.executable, os.path.join(SCRIPTS, "ptxas_table.py"), f.name])
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 1)


class SdpaBench(unittest.TestCase):
    def test_cannot_run_here_exits_2(self):
        probe = run([sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"])
        if probe.returncode == 0:
            self.skipTest("torch sees a CUDA device here")
        r = run([sys.executable, os.path.join(SCRIPTS, "sdpa_bench.py"), "--seqs", "128"],
                env={"CUDA_VISIBLE_DEVICES": "-1"})
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, "no usable torch|no CUDA device")

    def test_bad_shape_is_a_usage_error(self):
        r = run([sys.executable, os.path.join(SCRIPTS, "sdpa_bench.py"), "--heads", "6", "--kv-heads", "4"])
        self.assertEqual(r.returncode, 2)  # argparse's error exit
        self.assertIn("kv-heads | heads", r.stderr)


class CarrySize(unittest.TestCase):
    def test_limit(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("CPBENCH_TEST_TMP")) as tmp:
            with open(os.path.join(tmp, "blob"), "wb") as f:
                f.write(b"\0" * (3 << 20))
            script = os.path.join(SCRIPTS, "carry_size.sh")
            r = run(["bash", script, "--limit-mib", "64", tmp])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("total", r.stdout)
            r = run(["bash", script, "--limit-mib", "1", tmp])  # 3 MiB carried alone exceed 1 MiB
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("over the limit", r.stderr)
            r = run(["bash", script, os.path.join(tmp, "absent")])
            self.assertEqual(r.returncode, 2)

    def test_fetched_debs_fit(self):
        if not os.path.isdir(os.path.join(ROOT, "third_party_debs")):
            self.skipTest("third_party_debs not fetched here (scripts/fetch_openmpi_debs.sh)")
        r = run(["bash", os.path.join(SCRIPTS, "carry_size.sh"), "third_party_debs"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
