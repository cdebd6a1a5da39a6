# Per-sub-layer meshes (--mlp-tp N, bench/parts/sublayer_mesh.h): the MLP sub-layer tensor-parallel
# over N contiguous ranks, whatever the attention's mesh; N = P under --pass decode is Helix
# (arXiv:2507.07120: the attention's partials to their heads' owners in one all-to-all, w_o and the
# MLP row-parallel over all P). Verified against single at 1e-5 (the whole block; train, prefill
# with a cache, decode; P = 4 and 8; --min-verified counts every strategy run), bytes and tier
# bytes = the model (check_report.py model computes the MLP's and Helix's terms itself), a float64
# recomputation of a Helix dump, and every bad input: exit 2 on every rank naming flag and values.
set(_full --model tiny --block full)
# Train: the MLP on 2 or on all ranks beside every kind of attention mesh (usp t4 and megatron-sp
# already have t = N: they run unchanged, labelled without +mlp).
cpbench_verify_test(p4_mlp_tp2_train 4 --min-verified 7 ${_full} --seq 128 --heads 8 --kv-heads 4 --mlp-tp 2
  --strategies ring-zigzag,double-ring,usp[u2xr2],usp[t4xu1xr1],megatron-sp,allgather-kv,ulysses)
cpbench_verify_test(p8_mlp_tp8_train_b2 8 --min-verified 5 ${_full} --seq 160 --heads 8 --kv-heads 2 --batch 2 --mlp-tp 8
  --strategies ring,usp[t2xu2xr2],usp[t2xu1xr4],ulysses,allgather-kv)
# Prefill against a cache, the MLP on 4 of 8 ranks (two MLP groups) and on 1 (unsharded beside t = 2).
cpbench_verify_test(p8_mlp_tp4_prefill_cached 8 --min-verified 3 ${_full} --pass prefill --seq 160 --cached 64 --heads 8 --kv-heads 4
  --mlp-tp 4 --strategies ring,usp[t2xu1xr4],ulysses)
cpbench_verify_test(p4_mlp_tp1_beside_tp2 4 --min-verified 2 ${_full} --seq 128 --heads 8 --kv-heads 4 --mlp-tp 1
  --strategies usp[t2xu2xr1],usp[t2xu1xr2])
# Helix decode: every single-ring usp mesh (t x U x R with t < P), the ring family and ulysses;
# GQA, a window, B = 2 at P = 8.
cpbench_verify_test(p4_helix_decode 4 --min-verified 9 ${_full} --pass decode --cached 96 --decode-steps 5 --heads 8 --kv-heads 2
  --mlp-tp 4 --strategies ring,ring-zigzag,double-ring,ulysses,usp --mesh all)
cpbench_verify_test(p8_helix_decode_window_b2 8 --min-verified 5 ${_full} --pass decode --cached 128 --decode-steps 7 --batch 2
  --heads 8 --kv-heads 4 --window 40 --mlp-tp 8 --strategies ring,ulysses,usp[u2xr4],usp[t2xu1xr4],usp[t4xu1xr2])
# Decode with the MLP on 2 of 8 ranks (not Helix: the attention merges as before).
cpbench_verify_test(p8_mlp_tp2_decode 8 --min-verified 3 ${_full} --pass decode --cached 128 --decode-steps 3 --heads 8 --kv-heads 4
  --mlp-tp 2 --strategies ring,usp[u2xr4],usp[t4xu1xr2])
# Bytes and tier bytes = the model, two nodes of 4 (the MLP's level spans them at N = 8).
cpbench_report_test(model_p8_mlp_tp 8 "${_full};--seq;160;--heads;8;--kv-heads;4;--ranks-per-node;4;--mlp-tp;4;--strategies;single,ring,usp[t2xu1xr4],megatron-sp,allgather-kv;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 5")
cpbench_report_test(model_p8_helix_decode 8 "${_full};--pass;decode;--cached;128;--decode-steps;3;--heads;8;--kv-heads;4;--ranks-per-node;4;--mlp-tp;8;--strategies;single,ring,ulysses,usp[u2xr4],usp[t2xu1xr4],megatron-sp;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 6")
# Helix's output heads and lse against check_dump.py's float64 recomputation of decode.
add_test(NAME dump_p4_float64_helix
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_helix && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --block full --pass decode --cached 64 --decode-steps 3 --heads 8 --kv-heads 2 --mlp-tp 4 --strategies ring,usp --ulysses 2 --dump ${CPBENCH_TEST_OUT}/dump_helix && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_helix && test -f ${CPBENCH_TEST_OUT}/dump_helix/usp_u2xr2__mlp4/o.npy")
set_tests_properties(dump_p4_float64_helix PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# Bad input: exit 2 on every rank, naming the flag and the values.
cpbench_fail_test(mlp_tp_attn_block 2 "--mlp-tp 2 shards the MLP sub-layer: it needs --block full \\(got block=attn\\)" run --model tiny --seq 64 --mlp-tp 2)
cpbench_fail_test(mlp_tp_not_dividing_p 4 "--mlp-tp 3 does not divide the world size P=4" run ${_full} --seq 64 --mlp-tp 3)
cpbench_fail_test(mlp_tp_not_dividing_ffn 4 "--mlp-tp 4 does not divide ffn_dim=90" run ${_full} --seq 64 --ffn-dim 90 --mlp-tp 4)
cpbench_fail_test(mlp_tp_decode_dim 4 "--mlp-tp 4 does not divide dim=66 \\(--pass decode all-reduces" run ${_full} --pass decode --cached 64 --dim 66 --head-dim 16 --ffn-dim 96 --mlp-tp 4)
cpbench_fail_test(helix_heads 4 "ring: Helix decode \\(--mlp-tp 4 = P\\) gives each rank heads/P of w_o's rows: P=4 does not divide heads=6" run ${_full} --pass decode --cached 64 --heads 6 --kv-heads 2 --mlp-tp 4 --strategies ring)
cpbench_fail_test(helix_usp_double_ring 4 "usp: Helix decode \\(--mlp-tp 4 = P\\) returns the partials in one all-to-all over a single merge level; it is not defined on a double ring level \\(inner ring w=2\\)" run ${_full} --pass decode --cached 64 --heads 8 --mlp-tp 4 --strategies usp --ulysses 1 --usp-ring double --inner-ring 2)
