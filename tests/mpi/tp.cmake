# The tp level of the mesh (usp --tp t, megatron-sp = the mesh {tp = P}): DESIGN "Tensor
# parallelism inside the CP mesh". Every tp mesh against single at 1e-5 (fp32), --block attn and
# full; bytes and tier bytes equal the model; bad input is refused on every rank with exit 2.
set(_tp_shape --seq 64 --heads 8 --kv-heads 4 --head-dim 8 --dim 64 --ffn-dim 96)
# P = 4, --mesh all: t x U x R over t in {1, 2, 4} (t2xu2xr1, t2xu1xr2, t4xu1xr1 and the t = 1
# meshes), causal; the full block with B = 2 (the TP gathers' reordering).
cpbench_verify_test(tp_p4_mesh_attn 4 --min-verified 6 ${_tp_shape} --strategies usp --mesh all)
cpbench_verify_test(tp_p4_mesh_full_b2 4 --min-verified 6 ${_tp_shape} --block full --batch 2 --strategies usp --mesh all)
# P = 8: t2xu2xr2, attention and the full block; a double ring under tp (t2xu1xr4w2).
# --tp beside strategies without a tp level (they run as without it), and meshes named directly
# (usp's tp mesh and a double ring's window) beside them: 5 verified.
cpbench_verify_test(tp_p4_level_flag_and_named 4 --min-verified 5 ${_tp_shape} --block full --strategies usp,megatron-sp,ring-zigzag,usp[t2xu1xr2],double-ring[w2] --tp 2)
# The same sweep's report: valid (config.strategies holds the named entries), bytes = model.
cpbench_report_test(tp_p4_level_flag_and_named 4 "${_tp_shape};--block;full;--strategies;usp,megatron-sp,ring-zigzag,usp[t2xu1xr2],double-ring[w2];--tp;2;--ranks-per-node;2;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 5")
cpbench_verify_test(tp_p8_t2u2r2_attn 8 --min-verified 1 ${_tp_shape} --strategies usp --tp 2 --ulysses 2 --ring 2)
cpbench_verify_test(tp_p8_t2u2r2_full 8 --min-verified 1 ${_tp_shape} --block full --strategies usp --tp 2 --ulysses 2 --ring 2)
cpbench_verify_test(tp_p8_t2_double_ring 8 --min-verified 1 ${_tp_shape} --block full --strategies usp --tp 2 --ulysses 1 --usp-ring double --inner-ring 2)
# t > G: KV heads replicated over the TP ranks (G = 1: t2, t4; t2xu2 replicates again for
# Ulysses), non-causal, contiguous layout.
cpbench_verify_test(tp_p4_kv_replicated 4 --min-verified 6 --seq 64 --heads 8 --kv-heads 1 --head-dim 8 --dim 64 --ffn-dim 96 --block full --no-causal --strategies usp --mesh all)

# Bytes and tier bytes == the model (check_report.py model), and the tp formulas recomputed
# independently (check_report.py tp: DESIGN's per-level terms and, on 2 simulated nodes of 4, tp
# and Ulysses inside the node, the ring across).
# plan.py ranks the tp meshes by label with their tier cells (check_report.py plan) and names their
# levels; compare_reports.py matches a tp report with itself.
set(_tp_md ${CPBENCH_TEST_OUT}/tp_p8_k4.md)
cpbench_report_test(tp_p8_k4 8 "${_tp_shape};--block;full;--strategies;usp;--mesh;all;--ranks-per-node;4;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 10 && ${_py} ${_chk} tp REPORT --min-ok 6 && ${_py} ${PROJECT_SOURCE_DIR}/scripts/plan.py REPORT > ${_tp_md} && ${_py} ${_chk} plan REPORT ${_tp_md} --min-cross 6 && grep -qF 'usp[t2xu2xr2] = tp 2 x ulysses 2 x ring 2' ${_tp_md} && ${_py} ${PROJECT_SOURCE_DIR}/scripts/compare_reports.py REPORT REPORT --threshold 1000 > ${_tp_md}.cmp && grep -qF '| usp[t4xu1xr2] | 64 |' ${_tp_md}.cmp")
cpbench_report_test(tp_p8_k4_megatron 8 "${_tp_shape};--strategies;megatron-sp;--ranks-per-node;4;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 1 && ${_py} ${_chk} tp REPORT --min-ok 1")

# Bad input: exit 2 on every rank before any work, naming the flag and the value.
cpbench_fail_test(tp_heads 4 "usp: tp=4 does not divide heads=6" run --seq 64 --heads 6 --kv-heads 6 --head-dim 8 --dim 48 --strategies usp --tp 4)
cpbench_fail_test(tp_kv_heads 4 "usp: tp=4 and kv_heads=6: one must divide the other" run --seq 64 --heads 12 --kv-heads 6 --head-dim 8 --dim 96 --strategies usp --tp 4)
# A level flag applies to the strategies whose mesh has that level to choose (issue 39; this
# replaced tp_not_usp, where --strategies usp,ring --tp 2 was refused): refused only when none has.
cpbench_fail_test(tp_unused 4 "--tp 2 sets a tp level, but none of the strategies has one to choose \\(strategies: ring,megatron-sp" run --model tiny --seq 64 --strategies ring,megatron-sp --tp 2)
# Named meshes: a label no declared mesh has, a mesh on a strategy with one mesh, beside --mesh all.
cpbench_fail_test(mesh_named_unknown 4 "usp: no mesh on P=4 ranks is labelled 'usp\\[u3xr2\\]' \\(its meshes: usp\\[u1xr4\\]" run --model tiny --seq 64 --strategies usp[u3xr2])
cpbench_fail_test(mesh_named_single 4 "strategy 'ring\\[w2\\]': ring has one mesh only" run --model tiny --seq 64 --strategies ring[w2])
cpbench_fail_test(mesh_named_mesh_all 4 "--mesh all enumerates every mesh; do not also name one" run --model tiny --seq 64 --strategies usp[u2xr2] --mesh all)
cpbench_fail_test(tp_mesh_all 4 "--mesh all enumerates every t x U x R; do not also give --tp/--ulysses/--ring \\(tp=2" run --model tiny --seq 64 --strategies usp --mesh all --tp 2)
cpbench_fail_test(tp_mesh_product 4 "usp: ulysses=2 x ring=2 = 4 ranks, but P/tp=2 \\(P=4, tp=2\\)" run --model tiny --seq 64 --strategies usp --tp 2 --ulysses 2 --ring 2)
cpbench_fail_test(tp_not_dividing_p 4 "usp: tp=3 does not divide P=4" run --model tiny --seq 64 --strategies usp --tp 3)
cpbench_fail_test(tp_ffn_dim 2 "usp: tp=2 does not divide ffn_dim=97" run --model tiny --seq 64 --block full --ffn-dim 97 --strategies usp --tp 2)
cpbench_fail_test(tp_zero 2 "--tp must be" run --model tiny --seq 64 --strategies usp --tp 0)
