#!/usr/bin/env python3
"""The sampled workloads' derived figures against the published ones kept beside them
(ctest: python_tools): configs/workloads/pile-pretrain.json derives each component's share of
documents and mean tokens from the Pile's Table 1 (weight %, mean document KiB)."""
import json
import unittest
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parent.parent.parent / "configs" / "workloads"


class PilePretrain(unittest.TestCase):
    def setUp(self):
        self.w = json.loads((WORKLOADS / "pile-pretrain.json").read_text())
        self.comps = self.w["distribution"]["components"]

    def test_table_as_published(self):
        # Table 1 of arXiv:2101.00027: 22 components, weights summing to 100 %.
        self.assertIn("arXiv:2101.00027", self.w["distribution"]["source"])
        self.assertEqual(len(self.comps), 22)
        self.assertAlmostEqual(sum(c["weight_pct"] for c in self.comps), 100.0, places=6)
        first = self.comps[0]
        self.assertEqual((first["name"], first["weight_pct"], first["mean_doc_kib"]), ("Pile-CC", 18.11, 4.33))

    def test_derived_figures(self):
        # share of documents = weight / mean size, normalised (4 decimals); mean tokens = KiB * 1024 / 4.
        total = sum(c["weight_pct"] / c["mean_doc_kib"] for c in self.comps)
        for c in self.comps:
            self.assertAlmostEqual(c["share"], 100 * c["weight_pct"] / c["mean_doc_kib"] / total, places=3, msg=c["name"])
            self.assertAlmostEqual(c["mean_tokens"], c["mean_doc_kib"] * 256, places=0, msg=c["name"])
        self.assertAlmostEqual(sum(c["share"] for c in self.comps), 100.0, places=2)
        # The mixture mean lands on the table's total mean document size (5.91 KiB) at 4 B/token.
        mean = sum(c["share"] * c["mean_tokens"] for c in self.comps) / sum(c["share"] for c in self.comps)
        self.assertLess(abs(mean - 5.91 * 256), 0.01 * 5.91 * 256)


if __name__ == "__main__":
    unittest.main()
