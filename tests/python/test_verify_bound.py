"""scripts/verify_bound.py (verify's bound for the Python dump checks) and its use by
scripts/compare_dumps.py: the hand-computed scales of tests/unit/test_verify_bound.cpp, the
vanishing-gradient cases, and compare_dumps on a window-1 pair of dump directories."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
sys.path.insert(0, SCRIPTS)
from verify_bound import gradient_scales, verify_error  # noqa: E402


def hand_case(causal):
    # q = [1, 2], k = [1, -1], v = [2, 3], do = [1, -1], o = [0.5, 4], lse = [1, 0]; N = 2, d = 1.
    t = {"q": [1, 2], "k": [1, -1], "v": [2, 3], "do": [1, -1], "o": [0.5, 4]}
    t = {n: np.array(x, dtype=np.float32).reshape(1, 2, 1, 1) for n, x in t.items()}
    t["lse"] = np.array([1, 0], dtype=np.float32).reshape(1, 1, 2)
    return t, {"N": 2, "causal": causal}


class Scales(unittest.TestCase):
    def test_hand_computed(self):
        e2, em2 = math.exp(2), math.exp(-2)
        m = gradient_scales(*hand_case(True))
        self.assertAlmostEqual(m["dq"], math.hypot(2.5, 6 * e2 + 7 * em2), places=10)
        self.assertAlmostEqual(m["dk"], math.hypot(2.5 + 12 * e2, 14 * em2), places=10)
        m = gradient_scales(*hand_case(False))  # row 0 also sees key 1: W01 = 3.5 e^-2
        self.assertAlmostEqual(m["dq"], math.hypot(2.5 + 3.5 * em2, 6 * e2 + 7 * em2), places=10)
        self.assertAlmostEqual(m["dk"], math.hypot(2.5 + 12 * e2, 17.5 * em2), places=10)

    def test_row_without_keys_prefill_and_missing_operand(self):
        t, meta = hand_case(True)
        t["lse"][0, 0, 0] = -np.inf
        m = gradient_scales(t, meta)
        self.assertAlmostEqual(m["dq"], 6 * math.exp(2) + 7 * math.exp(-2), places=10)
        self.assertEqual(gradient_scales(t, dict(meta, **{"pass": "prefill"})), {"dq": 0.0, "dk": 0.0})
        del t["do"]
        with self.assertRaisesRegex(KeyError, "needs the reference's do"):
            gradient_scales(t, meta)


class Error(unittest.TestCase):
    def test_rules(self):
        self.assertEqual(verify_error([1, 2], [1, 2]), (0.0, None))
        self.assertAlmostEqual(verify_error([1, 2, 3.0001], [1, 2, 3])[0], 1e-4 / math.sqrt(14), places=9)
        self.assertIn("non-finite positions", verify_error([1, np.nan], [1, 2])[1])
        self.assertIn("non-finite values", verify_error([np.inf, 2], [-np.inf, 2])[1])
        self.assertIn("shape", verify_error([1, 2], [1, 2, 3])[1])
        self.assertEqual(verify_error([1e-30, 0], [0, 0])[0], float("inf"))

    def test_vanishing_reference(self):
        rng = np.random.default_rng(1)
        m, zero = 3.7, np.zeros(4096)
        noise = rng.standard_normal(4096)
        noise *= 1e-7 * m / np.linalg.norm(noise)
        self.assertAlmostEqual(verify_error(noise, zero, m)[0], 1e-7, delta=1e-10)
        self.assertAlmostEqual(verify_error(noise * 1e4, zero, m)[0], 1e-3, delta=1e-6)
        b = rng.standard_normal(4096)  # a normal tensor: m below ||b|| changes nothing
        a = b + 1e-4
        self.assertEqual(verify_error(a, b, 0.5 * np.linalg.norm(b)), verify_error(a, b))


class CompareDumpsWindow1(unittest.TestCase):
    """A window of 1: softmax is 1, dq = dk = 0 exactly in the reference."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(2)
        B, N, H, d = 1, 8, 2, 4
        q, k, v, do = (rng.standard_normal((B, N, H, d)).astype(np.float32) for _ in range(4))
        lse = np.einsum("bnhd,bnhd->bhn", q, k) / np.sqrt(d)
        self.ref = {"q": q, "k": k, "v": v, "o": v.copy(), "do": do, "lse": lse.astype(np.float32),
                    "dq": np.zeros_like(q), "dk": np.zeros_like(k), "dv": do.copy()}
        self.meta = {"B": B, "N": N, "H": H, "G": H, "d": d, "D": H * d, "causal": True, "rope": True,
                     "seed": 1, "eps": 1e-5, "window": 1}
        self.m = gradient_scales(self.ref, self.meta)
        self.ref_dir = self.write("ref", self.ref)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, tensors, meta=None):
        path = os.path.join(self.tmp.name, name)
        os.makedirs(path)
        for n, x in tensors.items():
            np.save(os.path.join(path, n + ".npy"), x)
        with open(os.path.join(path, "meta.json"), "w") as f:
            json.dump(meta or self.meta, f)
        return path

    def compare(self, cand_dir, ref_dir=None):
        return subprocess.run([sys.executable, os.path.join(SCRIPTS, "compare_dumps.py"), ref_dir or self.ref_dir,
                               cand_dir, "--bound", "1e-5"], capture_output=True, text=True)

    def with_noise(self, name, size):
        rng = np.random.default_rng(3)
        cand = dict(self.ref)
        for n in ("dq", "dk"):
            x = rng.standard_normal(self.ref[n].shape)
            cand[n] = (x * size * self.m[n] / np.linalg.norm(x)).astype(np.float32)
        return self.write(name, cand)

    def test_rounding_noise_passes(self):
        r = self.compare(self.with_noise("noise", 1e-7))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_real_error_fails(self):
        r = self.compare(self.with_noise("error", 1e-3))
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("dk: error", r.stdout)
        self.assertIn("dq: error", r.stdout)

    def test_no_operands_plain_relative_l2(self):
        # Without q, k, v, o, do, lse in REF_DIR there is no m: the stricter m = 0 applies.
        grads = {n: self.ref[n] for n in ("dq", "dk")}
        ref_dir = self.write("ref_without_operands", grads)
        r = self.compare(self.write("same", grads), ref_dir)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("no scale m", r.stdout)
        noisy = self.with_noise("noise", 1e-7)
        r = self.compare(noisy, ref_dir)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("reference and scale m are zero", r.stdout)


if __name__ == "__main__":
    unittest.main()
