#!/usr/bin/env python3
"""scripts/cpmodel.py, the Python model every checker imports, pinned against numbers worked out by
hand from docs/DESIGN.md's formulas (each expected value is written with its arithmetic), one
test per part (ctest: python_tools)."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))
import cpmodel as m  # noqa: E402


class Shared(unittest.TestCase):
    def test_elem_bytes_and_sublayers(self):
        # fp8: e4m3 values held (and sent) in bf16 tensors
        self.assertEqual([m.elem_bytes(x) for x in ("fp32", "bf16", "fp16", "fp8")], [4, 2, 2, 2])
        with self.assertRaises(KeyError):
            m.elem_bytes("fp4")
        self.assertEqual((m.sublayers("attn"), m.sublayers("full")), (1, 2))

    def test_exact_divisions(self):
        self.assertEqual(m.div(12, 4), 3)
        with self.assertRaisesRegex(ValueError, "not exact"):
            m.div(7, 2)
        self.assertEqual(m.tokens_per_rank(2, 96, 4), 48)
        with self.assertRaises(ValueError):
            m.tokens_per_rank(1, 10, 4)

    def test_for_pass_and_replication(self):
        self.assertEqual(m.for_pass((5, 7), "train"), (5, 7))
        self.assertEqual(m.for_pass((5, 7), "prefill"), (5, 0))
        self.assertEqual(m.for_pass((5, 7), "decode"), (5, 0))
        self.assertEqual((m.replicated_kv_heads(8, 4), m.replicated_kv_heads(8, 16)), (8, 16))
        self.assertEqual(m.levels_total({"a": (1, 2), "b": (10, 20)}), (11, 22))

    def test_spread_tiers(self):
        # 300 B spread over the 3 other members of a group of 4, 1 of them on this node
        self.assertEqual(m.spread_tiers(300, 4, 1), (100, 200))
        with self.assertRaises(ValueError):
            m.spread_tiers(301, 4, 1)


class TpAndUlysses(unittest.TestCase):
    def test_tp_level_one_sublayer(self):
        # s*T*D*(t-1) = 4*48*64*3 = 36864 per collective; fwd 2x, bwd 3x
        self.assertEqual(m.tp_collective_bytes(48, 64, 4, 4), 36864)
        self.assertEqual(m.tp_level_bytes(48, 64, 4, 4), (73728, 110592))
        self.assertEqual(m.tp_level_bytes(48, 64, 1, 4), (0, 0))

    def test_megatron_sp(self):
        # DESIGN: fwd = sub*2*s*(B*N/P)*D*(P-1), bwd = sub*3*...: B 2, N 96, D 64, P 4, fp32, full
        total = lambda *a, **k: m.levels_total(m.megatron_sp_bytes(*a, **k))
        self.assertEqual(total(2, 96, 64, 4, 4, "full"), (2 * 2 * 4 * 48 * 64 * 3, 2 * 3 * 4 * 48 * 64 * 3))
        self.assertEqual(total(2, 96, 64, 4, 4, "full"), (147456, 221184))
        self.assertEqual(total(2, 96, 64, 4, 2, "attn"), (36864, 55296))
        # --mlp-tp 2 beside its tp = 4: the MLP's 2 and 3 x s*T*D*(2-1) on its own level.
        self.assertEqual(m.megatron_sp_bytes(2, 96, 64, 4, 4, "full", {"mlp_tp": 2}),
                         {"tp": (73728, 110592), "mlp_tp": (2 * 4 * 48 * 64 * 1, 3 * 4 * 48 * 64 * 1)})
        self.assertEqual(m.megatron_sp_bytes(2, 96, 64, 4, 4, "attn", {"mlp_tp": 2}), {"tp": (73728, 110592)})

    def test_mlp_on_its_own_mesh(self):
        # The ring family's MLP over 4 ranks (t = 1): 2 and 3 x s*T*D*3 on "mlp_tp"; none without.
        self.assertEqual(m.mlp_bytes(16, 64, {"mlp_tp": 4}, 1, 2, "full"), {"mlp_tp": (2 * 2 * 16 * 64 * 3, 3 * 2 * 16 * 64 * 3)})
        self.assertEqual(m.mlp_bytes(16, 64, {}, 1, 2, "full"), {"tp": (0, 0)})
        self.assertEqual(m.mlp_bytes(16, 64, {}, 2, 2, "full"), {"tp": (2 * 2 * 16 * 64, 3 * 2 * 16 * 64)})
        self.assertEqual((m.mlp_degree({"mlp_tp": 8}, 2), m.mlp_degree({}, 2)), (8, 2))

    def test_helix_attention(self):
        # P = 8, R = 4 (t = 2), S = 3, B = 2, H = 16, d = 8, D = 64, bf16: each rank owns H/P = 2
        # heads, a chunk (4*2*2*8 + 4*2*2) = 144 B per step to each of 3 others; w_o's all-reduce
        # over 8: 3 * 2 * 2 * (2*64/8) * 7.
        self.assertEqual(m.helix_attention_bytes(3, 2, 16, 8, 64, 8, "ring", 4, 2),
                         {"ring": 3 * 144 * 3, "mlp_tp": 3 * 2 * 2 * 16 * 7})
        self.assertEqual(m.helix_attention_bytes(3, 2, 16, 8, 64, 8, "ring", 1, 2), {"mlp_tp": 3 * 2 * 2 * 16 * 7})

    def test_decode_block_under_helix_and_not(self):
        # The measured P = 8 figures of ctest report_model_p8_helix_decode's shapes (fp32, B = 1,
        # H = 8, d = 16, D = 64, S = 3): ring+mlp8 sends 3*68*7 on "cp" and 2 x 1344 on mlp_tp.
        ring = m.decode_block_bytes(3, 1, 8, 16, 64, [("cp", 8)], 1, 1, {"mlp_tp": 8}, 8, "full", 4)
        self.assertEqual(ring, {"cp": 3 * 68 * 7, "mlp_tp": 2 * 1344})
        self.assertTrue(m.is_helix({"mlp_tp": 8}, 1, 8))
        self.assertFalse(m.is_helix({"mlp_tp": 8}, 8, 8))  # the attention already over all P
        self.assertFalse(m.is_helix({"mlp_tp": 4}, 1, 8))  # the MLP on 4 of 8: decode_bytes
        self.assertEqual(m.decode_block_bytes(3, 1, 8, 16, 64, [("cp", 8)], 1, 1, {"mlp_tp": 4}, 8, "full", 4),
                         m.decode_bytes(3, 1, 8, 16, 64, [("cp", 8)], 1, [("tp", 1), ("mlp_tp", 4)], 4))

    def test_ulysses_a2a(self):
        # s*T*(2hq + 2hk')*(U-1)/U = 2*48*(128 + 64)*3/4 = 13824
        self.assertEqual(m.ulysses_a2a_bytes(48, 64, 32, 4, 2), 13824)
        self.assertEqual(m.ulysses_a2a_bytes(48, 64, 32, 1, 2), 0)
        with self.assertRaises(ValueError):  # 1*1*2*2/3: a shape the constraints refuse
            m.ulysses_a2a_bytes(1, 1, 0, 3, 1)


class MlaValueWidths(unittest.TestCase):
    """MLA's values and outputs are d_v wide (hv, ho, hqv, hkv), its scores d = d_nope + d_rope."""

    def test_each_term(self):
        # ring: k|v rows hk + hv = 12*4 + 8*4 = 80 per token: fwd 2*10*80*3, bwd + 4*10*80*4
        self.assertEqual(m.ring_kv_bytes(10, 48, 3, 2, hv=32), (4800, 4800 + 12800))
        self.assertEqual(m.ring_kv_bytes(10, 48, 3, 2, hv=48), m.ring_kv_bytes(10, 48, 3, 2))
        # Ulysses: q (4*12) + k (4*12) + o (4*8) + v (4*8) per token, 3/4 of it: 2*8*160*3/4
        self.assertEqual(m.ulysses_a2a_bytes(8, 48, 48, 4, 2, hqv=32, hkv=32), 1920)
        # pass-Q's partial: o over ho, lse over the heads
        self.assertEqual(m.pass_q_partial_bytes(10, 48, 4, ho=32), 4 * 10 * 32 + 4 * 10 * 4)
        self.assertEqual(m.allgather_kv_bytes(10, 48, 4, 2, hv=32), (2 * 10 * 80 * 3, 2 * 10 * 80 * 3 + 4 * 10 * 80 * 3))
        # usp t1 x u2 x r2, H = G = 4, d 12, d_v 8: the same terms composed
        lv = m.ulysses_ring_bytes(10, 10, 4, 4, 12, 64, 1, 2, 2, 2, "attn", dv=8)
        self.assertEqual(lv["ulysses"], (m.ulysses_a2a_bytes(10, 48, 48, 2, 2, 32, 32),) * 2)
        self.assertEqual(lv["ring"], m.ring_kv_bytes(10, 48, 1, 2, hv=32))


class SingleRing(unittest.TestCase):
    def test_pass_kv(self):
        # fwd s*T*2hk*K = 2*32*32*3 = 6144; bwd + s_acc*T*2hk*(K+1) = 4*32*32*4 = 16384
        self.assertEqual(m.ring_kv_bytes(32, 16, 3, 2), (6144, 6144 + 16384))
        self.assertEqual(m.ring_kv_bytes(32, 16, 1, 2), (2048, 2048 + 4 * 32 * 32 * 2))  # K_eff 1: a halo
        self.assertEqual(m.ring_kv_bytes(32, 16, 0, 2), (0, 0))

    def test_comm_dtype(self):
        # --comm-dtype: a block of T*2hk = 32*32 = 1024 values per hop; the accumulators unchanged
        acc = 4 * 32 * 32 * 4
        self.assertEqual(m.ring_kv_bytes(32, 16, 3, 4, comm_dtype="bf16"), (6144, 6144 + acc))
        self.assertEqual(m.ring_kv_bytes(32, 16, 3, 2, comm_dtype="fp8"), (3 * 1056, 3 * 1056 + acc))  # + 1024/32
        self.assertEqual(m.ring_kv_bytes(32, 16, 3, 2, comm_dtype="fp8", scaling="tensor"), (3 * 1025, 3 * 1025 + acc))
        self.assertEqual(m.ring_kv_bytes(32, 16, 3, 2, comm_dtype="run"), m.ring_kv_bytes(32, 16, 3, 2))
        self.assertEqual(m.kv_transit_bytes(33, 2, "fp8"), 33 + 2)  # a partial scale block rounds up
        self.assertEqual(m.kv_transit_bytes(0, 2, "fp8", "tensor"), 0)
        # allgather-kv: each of the P-1 gathered chunks encoded (1024 values + 32 scale bytes), the
        # reduce-scatter of float32 dK,dV unchanged (4 * 1024 * 3)
        self.assertEqual(m.allgather_kv_bytes(32, 16, 4, 2, comm_dtype="fp8"), (3 * 1056, 3 * 1056 + 4 * 1024 * 3))
        # usp's single ring level: the ring's blocks encoded, the all-to-alls in the run dtype
        plain = m.ulysses_ring_bytes(32, 32, 8, 2, 16, 64, 1, 2, 2, 2, "attn")
        fp8 = m.ulysses_ring_bytes(32, 32, 8, 2, 16, 64, 1, 2, 2, 2, "attn", comm_dtype="fp8")
        self.assertEqual(fp8["ulysses"], plain["ulysses"])
        self.assertEqual(fp8["ring"], m.ring_kv_bytes(32, 32, 1, 2, comm_dtype="fp8"))
        # a double ring level encodes its K,V blocks: inner and outer hops s_kv each, accumulators unchanged
        # (R = 4, w = 2: 2 inner hops + 1 outer; a block T*2hk' = 32*2*32 = 2048 values -> 2112 B; the
        # accumulators 4 inner sends (J + 1 per round) and 2 outer (T + 1), float32)
        dbl = m.ulysses_ring_bytes(32, 32, 8, 2, 16, 64, 1, 2, 4, 2, "attn", w=2, comm_dtype="fp8")
        self.assertEqual(dbl["ring"], (3 * 2112, 3 * 2112 + 4 * 2048 * 6))
        self.assertEqual(m.double_ring_kv_bytes(32, 16, 1, [1, 1], 2, comm_dtype="fp8"),
                         {"ring_inner": (2 * 1056, 2 * 1056 + 4 * 1024 * 4), "ring_outer": (1056, 1056 + 4 * 1024 * 2)})
        with self.assertRaises(ValueError):  # nor a double ring's pass-Q
            m.ring_level_bytes("q", 4, 2, 32, 16, 32, 64, 4, 2, comm_dtype="fp8")

    def test_pass_q(self):
        # partial 4*Tq*hq + 4*Tq*H = 4*32*64 + 4*32*4 = 8704; Q block 2*32*64 = 4096
        self.assertEqual(m.pass_q_partial_bytes(32, 64, 4), 8704)
        self.assertEqual(m.pass_q_bytes(32, 64, 4, 3, 2), ((4096 + 8704) * 3 + 8704, 0))
        self.assertEqual(m.pass_q_bytes(32, 64, 4, 3, 2), (47104, 0))
        self.assertEqual(m.pass_q_bytes(32, 64, 4, 0, 2), (0, 0))

    def test_pass_q_a2a(self):
        # one partial fewer than q: 4096*3 + 8704*3
        self.assertEqual(m.pass_q_a2a_bytes(32, 64, 4, 3, 2), (38400, 0))
        self.assertEqual(m.pass_q_a2a_bytes(32, 64, 4, 0, 2), (0, 0))

    def test_pass_q_comm_dtype(self):
        # --comm-dtype under pass-Q: the Q block of 32*64 = 2048 values travels encoded (fp8: 2048
        # codes + 64 block scales; bf16 of an fp32 run: 4096 B), the partials unchanged (8704)
        self.assertEqual(m.pass_q_bytes(32, 64, 4, 3, 2, comm_dtype="fp8"), ((2112 + 8704) * 3 + 8704, 0))
        self.assertEqual(m.pass_q_a2a_bytes(32, 64, 4, 3, 4, comm_dtype="bf16"), ((4096 + 8704) * 3, 0))
        self.assertEqual(m.pass_q_bytes(32, 64, 4, 3, 2, comm_dtype="fp8", scaling="tensor"), ((2049 + 8704) * 3 + 8704, 0))
        # through the ring level (single ring), and refused on a double ring
        self.assertEqual(m.ring_level_bytes("q", 4, 0, 32, 16, 32, 64, 4, 2, comm_dtype="fp8"),
                         m.pass_q_bytes(32, 64, 4, 3, 2, comm_dtype="fp8"))
        with self.assertRaises(ValueError):
            m.ring_level_bytes("q", 4, 2, 32, 16, 32, 64, 4, 2, comm_dtype="fp8")


class DoubleRing(unittest.TestCase):
    # R = 4 positions in W = 2 windows of w = 2: block = T*2hk = 32*2*16 = 1024 elements
    def test_full_schedule_sends(self):
        T, J = m.double_ring_full_hops(2, 2)
        self.assertEqual((T, J), (1, [1, 1]))
        self.assertEqual(m.double_ring_sends(T, J), {("fwd", "ring_inner"): (2, 0), ("fwd", "ring_outer"): (1, 0),
                                                     ("bwd", "ring_inner"): (2, 4), ("bwd", "ring_outer"): (1, 2)})

    def test_pass_kv(self):
        got = m.double_ring_kv_bytes(32, 16, 1, [1, 1], 2)
        self.assertEqual(got, {"ring_inner": (2 * 1024 * 2, 4096 + 4 * 1024 * 4),
                               "ring_outer": (2 * 1024 * 1, 2048 + 4 * 1024 * 2)})
        # DESIGN: the full double ring sends the ring's s*T*2hk*(R-1) forward and accumulators
        # R + W times when 1 < w < R
        self.assertEqual(m.levels_total(got), (m.ring_kv_bytes(32, 16, 3, 2)[0], 6144 + 4 * 1024 * (4 + 2)))
        # truncated: one round (T_o = 0) of one inner hop
        self.assertEqual(m.double_ring_kv_bytes(32, 16, 0, [1], 2),
                         {"ring_inner": (2048, 2048 + 4 * 1024 * 2), "ring_outer": (0, 0)})
        # w = 1 (W = R) and w = R (W = 1) are the single ring
        for w in (1, 4):
            full = m.levels_total(m.double_ring_kv_bytes(32, 16, *m.double_ring_full_hops(w, 4 // w), 2))
            self.assertEqual(full, m.ring_kv_bytes(32, 16, 3, 2))

    def test_pass_q(self):
        # Q block 4096, partial 8704: inner 2 Q + 4 partials, outer 1 Q + 2 partials
        got = m.double_ring_pass_q_bytes(32, 64, 4, 1, [1, 1], 2)
        self.assertEqual(got, {"ring_inner": (4096 * 2 + 8704 * 4, 0), "ring_outer": (4096 + 8704 * 2, 0)})
        # DESIGN: Q P-1 hops, partials P + W: 4096*3 + 8704*6
        self.assertEqual(m.levels_total(got), (64512, 0))

    def test_ring_level_dispatch(self):
        self.assertEqual(m.ring_level_bytes("kv", 4, 0, 32, 16, 32, 64, 4, 2), m.ring_kv_bytes(32, 16, 3, 2))
        self.assertEqual(m.ring_level_bytes("q", 4, None, 32, 16, 32, 64, 4, 2), (47104, 0))
        self.assertEqual(m.ring_level_bytes("q-a2a", 4, 0, 32, 16, 32, 64, 4, 2, hops=1), (4096 + 8704, 0))
        self.assertEqual(m.ring_level_bytes("q", 4, 2, 32, 16, 32, 64, 4, 2), (64512, 0))
        self.assertEqual(m.ring_level_bytes("kv", 4, 2, 32, 16, 32, 64, 4, 2), (6144, 30720))
        with self.assertRaises(ValueError):
            m.ring_level_bytes("q-a2a", 4, 2, 32, 16, 32, 64, 4, 2)


class Strategies(unittest.TestCase):
    def test_allgather_kv(self):
        # gather 2*32*32*3 = 6144 each pass; dK,dV reduce-scattered: 4*32*32*3 = 12288
        self.assertEqual(m.allgather_kv_bytes(32, 16, 4, 2), (6144, 6144 + 12288))

    def test_usp_levels(self):
        # usp[t2xu2xr2], H 8, G 2, d 16, D 64, B 1, N 64, P 4 (T = 16), fp32, --block full:
        # hq = 128, hk' = 16*max(2, 4) = 64
        got = m.ulysses_ring_bytes(16, 16, 8, 2, 16, 64, 2, 2, 2, 4, "full")
        self.assertEqual(got, {"tp": (2 * 2 * 4 * 16 * 64, 2 * 3 * 4 * 16 * 64),
                               "ulysses": (4 * 16 * 384 // 2,) * 2,
                               "ring": (4 * 16 * 2 * 64, 4 * 16 * 2 * 64 + 4 * 16 * 2 * 64 * 2)})
        # --cached 32 of N 64: the tp level and the all-to-all move the 8 new tokens per rank, the
        # ring the whole K,V block of 16
        got = m.ulysses_ring_bytes(16, 8, 8, 2, 16, 64, 2, 2, 2, 4, "full")
        self.assertEqual({k: v[0] for k, v in got.items()}, {"tp": 8192, "ulysses": 6144, "ring": 8192})
        # pass-Q over the ring level: the 8 new queries (4*8*128 = 4096) and a partial
        # (4*8*128 + 4*8*8 = 4352) one hop, the partial back
        got = m.ulysses_ring_bytes(16, 8, 8, 2, 16, 64, 1, 2, 2, 4, "attn", travel="q")
        self.assertEqual(got["ring"], (4096 + 4352 + 4352, 0))
        # ulysses (U = P = 4, G = 2 replicated to 4): the all-to-all alone
        got = m.ulysses_ring_bytes(16, 16, 8, 2, 16, 64, 1, 4, 1, 2, "attn")
        self.assertEqual(m.levels_total(got), (2 * 16 * (256 + 128) * 3 // 4,) * 2)

    def test_head_ring_split(self):
        self.assertEqual(m.head_ring_split("single", {}, 8), (1, 1, 1))
        self.assertEqual(m.head_ring_split("megatron-sp", {"tp": 8}, 8), (8, 1, 1))
        self.assertEqual(m.head_ring_split("usp", {"tp": 2, "ulysses": 2, "ring": 2}, 8), (2, 2, 2))
        self.assertEqual(m.head_ring_split("usp", {"tp": None, "ulysses": None}, 4), (1, 1, 4))
        self.assertEqual(m.head_ring_split("ulysses", {"ulysses": 8}, 8), (1, 8, 1))
        self.assertEqual(m.head_ring_split("ring-zigzag", {"ulysses": 1}, 8), (1, 1, 8))


class Decode(unittest.TestCase):
    def test_merge_levels(self):
        self.assertEqual(m.decode_merge_levels("usp", {"inner_ring": 2}, 4), [("ring_inner", 2), ("ring_outer", 2)])
        self.assertEqual(m.decode_merge_levels("usp", {"inner_ring": None}, 4), [("ring", 4)])
        self.assertEqual(m.decode_merge_levels("ring", {}, 4), [("cp", 4)])
        self.assertEqual(m.decode_merge_levels("double-ring", {"inner_ring": 2}, 4), [("cp", 4)])
        self.assertEqual(m.decode_merge_levels("megatron-sp", {}, 1), [])

    def test_ring_family(self):
        # DESIGN: S*(4*B*H*d + 4*B*H)*(P-1) = 6*(4*2*4*16 + 4*2*4)*3 = 6*544*3
        self.assertEqual(m.decode_partial_bytes(2, 4, 16), 544)
        self.assertEqual(m.decode_bytes(6, 2, 4, 16, 64, [("cp", 4)], 1, [("tp", 1)], 4), {"cp": 9792})

    def test_usp_with_tp(self):
        # usp[t2xu2xr2], H 8 (h = H/(tU) = 2), S 3, B 2, d 16, D 64, bf16, --block full: merge
        # 3*(4*2*2*16 + 4*2*2)*1 = 816; o over Ulysses 3*2*2*2*16*1 = 384; per sub-layer tp
        # 3*2*2*(2*64/2)*1 = 768, two sub-layers
        got = m.decode_bytes(3, 2, 8, 16, 64, [("ring", 2)], 2, [("tp", 2)] * 2, 2)
        self.assertEqual(got, {"ring": 816, "ulysses": 384, "tp": 1536})
        # one tp degree per sub-layer (attention t = 2, the MLP 4: Helix): the MLP's all-reduce
        # 3*2*2*(128/4)*3 = 1152 on its own level; the heads still split by the attention's t
        got = m.decode_bytes(3, 2, 8, 16, 64, [("ring", 2)], 2, [("tp", 2), ("mlp_tp", 4)], 2)
        self.assertEqual(got, {"ring": 816, "ulysses": 384, "tp": 768, "mlp_tp": 1152})

    def test_megatron_sp(self):
        # the tp term alone with t = P = 4: 6*2*4*(2*64/4)*3
        self.assertEqual(m.decode_bytes(6, 2, 4, 16, 64, [], 1, [("tp", 4)], 4), {"tp": 4608})
        with self.assertRaises(ValueError):  # t must divide B*D
            m.decode_tp_bytes(1, 1, 10, 4, 2)


class CacheAndMemory(unittest.TestCase):
    def test_kv_cache(self):
        # 2*B*(C/R)*(max(G,tU)/(tU))*d*s: 2*1*(96/3)*(8/2)*8*2
        self.assertEqual(m.kv_cache_bytes(1, 96, 8, 8, 2, 1, 2, 3), 4096)
        # tU = 4 > G = 2: one replicated head; single: the whole cache
        self.assertEqual(m.kv_cache_bytes(2, 128, 2, 16, 4, 2, 2, 2), 2 * 2 * 64 * 1 * 16 * 4)
        self.assertEqual(m.kv_cache_bytes(2, 128, 2, 16, 4), 2 * 2 * 128 * 2 * 16 * 4)

    def test_block_parameters(self):
        # 2D + D*(H + 2G)*d + H*d*D + 3*D*F = 128 + 8192 + 4096 + 18432
        self.assertEqual(m.block_parameters(64, 4, 2, 16, 96, 1), 30848)
        # t = 4 > G = 2: 1 query head, max(2, 4)/4 = 1 KV head, F/4 columns
        self.assertEqual(m.block_parameters(64, 4, 2, 16, 96, 4), 128 + 64 * 3 * 16 + 16 * 64 + 3 * 64 * 24)

    def test_model_estimate(self):
        self.assertEqual(m.model_parameters(3, 30848, 256, 64, 1), 3 * 30848 + 2 * 256 * 64)
        self.assertEqual(m.model_parameters(2, 100, 5, 7, 3), 200 + 24)  # ceil(70 / 3)
        self.assertEqual(m.block_input_bytes(2, 16, 64, 2), 4096)
        self.assertEqual(m.model_activations(4, 10, 100, "full"), 4 * 10 + 100)
        self.assertEqual(m.model_activations(4, 10, 100, "none"), 400)
        self.assertEqual((m.WEIGHT_BYTES_PER_PARAM, m.GRAD_BYTES_PER_PARAM, m.OPTIMIZER_BYTES_PER_PARAM), (2, 2, 12))

    def test_sharded_estimate_llama3_8b(self):
        # llama3-8b, usp t = 2 on 16 ranks: norms 8192, attention 4096 x 24 x 128 + 2048 x 4096,
        # MLP 3 x 4096 x 7168 per block; embedding and head 2 x 128256 x 4096 / 2; replicas 16, 8.
        parts = m.block_parameter_groups(4096, 32, 8, 128, 14336, 2, 2)
        self.assertEqual(parts, (8192, 20971520, 88080384))
        groups = m.weight_groups(32, *parts, 525336576, 16, 2, 2)
        self.assertEqual([g[3] for g in groups], [16, 8, 8, 8])
        # held 4015259648, sharded 501891072, largest unit the embedding 525336576
        self.assertEqual(m.model_state_bytes(groups, "none"), (8030519296, 8030519296, 48183115776))
        self.assertEqual(m.model_state_bytes(groups, "optimizer"), (8030519296, 8030519296, 6022692864))
        self.assertEqual(m.model_state_bytes(groups, "grads"), (8030519296, 2054455296, 6022692864))
        self.assertEqual(m.model_state_bytes(groups, "params"), (2054455296, 2054455296, 6022692864))
        # one reduce-scatter: 32*2*512*15 + 32*2*2621440*7 + 32*2*11010048*7 + 2*65667072*7
        for shard in ("none", "optimizer", "grads"):
            self.assertEqual(m.grad_sync_bytes(groups, shard), (7026737152, 7026737152))
        self.assertEqual(m.grad_sync_bytes(groups, "params"), (7026737152, 14053474304))
        with self.assertRaises(ValueError):
            m.grad_sync_bytes(groups, "zero3")

    def test_sharded_estimate_tiny(self):
        # tiny on a ring of 4 (t = 1): block 128 + 12288 + 18432 = 30848, embedding 32768, 4 replicas
        groups = m.weight_groups(2, *m.block_parameter_groups(64, 4, 2, 16, 96, 1, 1), 32768, 4, 1, 1)
        self.assertEqual(m.model_state_bytes(groups, "none"), (188928, 188928, 1133568))
        self.assertEqual(m.model_state_bytes(groups, "optimizer"), (188928, 188928, 283392))
        self.assertEqual(m.model_state_bytes(groups, "grads"), (188928, 112768, 283392))
        self.assertEqual(m.model_state_bytes(groups, "params"), (112768, 112768, 283392))
        self.assertEqual(m.grad_sync_bytes(groups, "optimizer"), (141696, 141696))
        self.assertEqual(m.shard_of(128, 3), 43)  # padded
        single = m.weight_groups(2, 128, 12288, 18432, 32768, 1, 1, 1)
        self.assertEqual(m.grad_sync_bytes(single, "params"), (0, 0))

    def test_longest_cache(self):
        # weights (2*30848 + 2*256*64)*2 = 188928; room 10^7 - 188928 - 10^6 = 8811072 over
        # 2 layers x 512 B per token = 8604 tokens per rank, 4 ranks
        self.assertEqual(m.longest_cache(10_000_000, 2, 30848, 256, 64, 1_000_000, 512, 4), 4 * 8604)
        self.assertEqual(m.longest_cache(100_000, 2, 30848, 256, 64, 0, 512, 4), 0)


class Flops(unittest.TestCase):
    def test_flops(self):
        self.assertEqual(m.gemm_flops(3, 4, 5), 120)
        self.assertEqual(m.attn_fwd_flops(2, 4, 16, 10), 4 * 16 * 4 * 2 * 10)
        self.assertEqual(m.attn_fwd_flops(2, 4, 16, 10, dv=8), 2 * (16 + 8) * 4 * 2 * 10)  # MLA: PV over d_v
        self.assertEqual((m.full_mask_pairs(4, True), m.full_mask_pairs(4, False)), (10, 16))
        # backward: two GEMMs per forward GEMM; attention 2x (model), 2.5x (hardware)
        self.assertEqual(m.layer_flops(100, 10), (330, 335.0))
        self.assertEqual(m.layer_flops(100, 10, forward_only=True), (110, 110))


if __name__ == "__main__":
    unittest.main()
