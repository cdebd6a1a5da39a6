# Run reports: schema, measured bytes == analytic model, memory scaling, balance, trace, plots,
# regression gate. Each test runs cpbench under mpirun, then checks what it wrote.
set(_py ${Python3_EXECUTABLE})
set(_chk ${PROJECT_SOURCE_DIR}/tests/python/check_report.py)
set(_val ${PROJECT_SOURCE_DIR}/scripts/validate_report.py)
set(_run "${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np")
set(_fast --warmup 0 --iters 2 --no-progress)
set(_fast_s "--warmup 0 --iters 2 --no-progress")  # the same, for sh -c strings

# cpbench_report_test(NAME NP "CPBENCH ARGS" "CHECK COMMANDS (REPORT is the report path)")
function(cpbench_report_test name np args checks)
  set(report ${CPBENCH_TEST_OUT}/${name}.json)
  string(REPLACE "REPORT" ${report} checks "${checks}")
  string(REPLACE ";" " " args "${args}")
  add_test(NAME report_${name}
           COMMAND sh -c "rm -f ${report} && ${_run} ${np} ${CPBENCH_BIN} run ${args} --out ${report} && ${_py} ${_val} ${report} && ${checks}")
  set_tests_properties(report_${name} PROPERTIES LABELS "mpi;report" TIMEOUT 600)
endfunction()

# Measured bytes equal the model for every strategy over shapes, meshes and world sizes.
cpbench_report_test(model_p2 2 "--model;tiny;--seq;96,120;--batch;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 14")
# At bf16 (the cpu's 16-bit storage): every byte sent is s = 2 per element but the ring's fp32
# dK,dV accumulators and the float32 partials, as the model says; every mesh of P = 4.
cpbench_report_test(model_p4_bf16 4 "--model;tiny;--seq;96,120;--batch;2;--dtype;bf16;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 32")
# --acc-dtype bf16 (and --partial-dtype bf16): the dK,dV accumulators travel at s_acc = 2 (the
# ring family, the double ring, allgather-kv's reduce-scatter, usp's ring level; every mesh of
# P = 4): measured = the C++ model, and the ring family's = cpmodel's full ring with s_acc = 2.
cpbench_report_test(model_p4_bf16_acc 4 "--model;tiny;--seq;96;--dtype;bf16;--acc-dtype;bf16;--partial-dtype;bf16;--strategies;ring,ring-zigzag,ring-striped,double-ring,allgather-kv,usp,ulysses;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 13")
# --uneven-heads: every rank's Ulysses bytes against cpmodel's split (tests/python/check_report.py
# uneven), the per-rank model, FLOPs by the heads each rank holds; meshes with straddled KV heads and
# a tp level (t3xu2).
cpbench_report_test(uneven_heads_p6 6 "--model;tiny;--seq;144;--heads;9;--kv-heads;3;--strategies;ulysses,usp;--mesh;all;--uneven-heads;${_fast}" "${_py} ${_chk} uneven REPORT --min-ok 5 && ${_py} ${_chk} model REPORT --min-ok 7")
# ... and decode: each rank's partial and its share of the o gather from its own heads.
cpbench_report_test(uneven_heads_decode_p6 6 "--model;tiny;--cached;144;--decode-steps;5;--heads;9;--kv-heads;3;--dim;48;--pass;decode;--strategies;ulysses,usp;--mesh;all;--uneven-heads;${_fast}" "${_py} ${_chk} uneven REPORT --min-ok 5 && ${_py} ${_chk} model REPORT --min-ok 7")
# pass-Q's and decode's partials in bf16: every result's bytes = cpmodel's with s_part = 2 (and the C++ model).
cpbench_report_test(model_p4_bf16_partial_decode 4 "--model;tiny;--cached;64;--decode-steps;3;--heads;8;--kv-heads;2;--dtype;bf16;--partial-dtype;bf16;--pass;decode;--strategies;ring,double-ring,usp,megatron-sp;--usp-ring;double;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(model_p4_bf16_partial_pass_q 4 "--model;tiny;--seq;128;--heads;8;--kv-heads;2;--dtype;bf16;--partial-dtype;bf16;--pass;prefill;--ring-pass;q;--strategies;ring,ring-zigzag,ring-striped,double-ring,usp;--usp-ring;double;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 16")
# --attention mla: bytes and tier bytes of every strategy and mesh = the C++ model and cpmodel's
# (k|v blocks of H*(d + d_v), the all-to-alls' and pass-Q partials' d_v-wide o), FLOPs = the model's.
cpbench_report_test(model_p4_mla 4 "--model;tiny-mla;--seq;128;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 12")
# --comm-dtype fp8 (issue 42): the K,V blocks travel as e4m3 codes and a scale byte per 32 values
# (the ring family, usp u2xr2's ring level with its all-to-alls in bf16, allgather-kv's gathers)
# (bytes = the C++ model and cpmodel's ring_kv_bytes with kv_transit_bytes) in a bf16 run; bf16
# transit of an fp32 run with a window (2 bytes a value, no scales; K_eff hops).
cpbench_report_test(model_p4_comm_fp8 4 "--model;tiny;--seq;128,192;--heads;8;--kv-heads;2;--head-dim;32;--dtype;bf16;--comm-dtype;fp8;--strategies;ring,ring-zigzag,ring-striped,usp,allgather-kv;--ulysses;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
# ... the Q blocks of pass-Q encoded (q and q-a2a; check_report's pass-Q branch recomputes both with
# cpmodel's s_kv of the Q block).
cpbench_report_test(model_p4_comm_fp8_pass_q 4 "--model;tiny;--seq;128;--heads;8;--kv-heads;2;--head-dim;32;--dtype;bf16;--comm-dtype;fp8;--pass;prefill;--ring-pass;q;--strategies;ring,ring-zigzag,usp;--ulysses;2;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 3 && ${_run} 4 ${CPBENCH_BIN} run --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --comm-dtype fp8 --fp8-scaling tensor --pass prefill --ring-pass q-a2a --strategies ring,ring-striped ${_fast_s} --out REPORT.a2a.json && ${_py} ${_val} REPORT.a2a.json && ${_py} ${_chk} model REPORT.a2a.json --min-ok 2")
cpbench_report_test(model_p3_comm_bf16_window 3 "--model;tiny;--seq;150;--window;40;--comm-dtype;bf16;--strategies;ring,ring-zigzag,ring-striped;${_fast}" "${_py} ${_chk} model REPORT --min-ok 3")
cpbench_report_test(model_p8_mla_tp 8 "--model;tiny-mla;--heads;8;--seq;128;--strategies;usp,megatron-sp;--mesh;all;--ranks-per-node;4;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10 && ${_py} ${_chk} tp REPORT --min-ok 6")
# --mla-travel latent: the ring's block is the latent, r_kv + d_rope values per token (cpmodel.mla_latent_row);
# a Ulysses level all-gathers it (cpmodel.ulysses_latent_bytes), usp's ring level circulates its ring index's.
# MLA's decode: its partials d_v wide on every mesh, the cache's latent bytes (r_kv + d_rope per
# token, whole on every head-group member) and the longest cache that fits from them.
cpbench_report_test(model_p4_mla_decode 4 "--model;tiny-mla;--batch;2;--block;full;--mem-limit;64MiB;--pass;decode;--cached;128;--decode-steps;5;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 14")
cpbench_report_test(model_p4_mla_latent 4 "--model;tiny-mla;--seq;128;--mla-travel;latent;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(model_p8_mla_latent_tp 8 "--model;tiny-mla;--heads;8;--seq;128;--mla-travel;latent;--strategies;usp;--mesh;all;--ranks-per-node;4;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10 && ${_py} ${_chk} tp REPORT --min-ok 6")
cpbench_report_test(model_p4_mla_pass_q 4 "--model;tiny-mla;--seq;128;--pass;prefill;--ring-pass;q;--strategies;ring,ring-zigzag,double-ring,usp;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 8")
# The whole block: megatron-sp's MLP doubles its bytes (check_report.py recomputes DESIGN's formula),
# every other strategy's MLP is token-local; B = 2 exercises the reordering gathers.
cpbench_report_test(model_p4_block_full 4 "--block;full;--seq;64,96;--heads;4;--kv-heads;2;--head-dim;16;--dim;64;--ffn-dim;96;--batch;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 16")
# --balance: the layout rebuilt in Python (check_report.py layout): visible pairs per rank, and the
# measured bytes = the model from K_eff found by brute force on that layout; ring-zigzag,
# ring-striped and the strategies without a ring are skipped with their reason (a default
# all-strategy run).
cpbench_report_test(balance_p4_greedy 4 "--model;tiny;--seq;136;--docs;30,50,56;--window;24;--balance;greedy;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4 && ${_py} ${_chk} layout REPORT --min-ok 3")
# The double ring (every w) and usp (every t x U x R, its double ring level with every w | R) under
# --balance: visible pairs by ring index, FLOPs in proportion to them, and each double ring's
# schedule and bytes by brute force on the layout rebuilt in Python (check_report.py hops).
cpbench_report_test(balance_p4_greedy_usp_double 4 "--model;tiny;--seq;136;--heads;8;--kv-heads;4;--docs;30,50,56;--window;24;--balance;greedy;--strategies;single,ring,double-ring,usp;--mesh;all;--usp-ring;double;${_fast}" "${_py} ${_chk} model REPORT --min-ok 15 && ${_py} ${_chk} layout REPORT --min-ok 14 && ${_py} ${_chk} hops REPORT --min-ok 13 --min-cut 0")
# pass-Q under --balance on ring, the double ring and usp's single ring level: the ring level's
# pass-Q bytes from K_eff on the rebuilt layout, FLOPs in proportion to each rank's keys' pairs.
cpbench_report_test(balance_p4_doc_zigzag_pass_q 4 "--model;tiny;--seq;136;--heads;8;--kv-heads;4;--docs;30,50,56;--window;24;--balance;doc-zigzag;--pass;prefill;--ring-pass;q;--strategies;single,ring,double-ring,usp;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10 && ${_py} ${_chk} layout REPORT --min-ok 9")
# --balance dynamic: each rank's measured bytes against the schedule recomputed in Python from the
# tokens each rank holds per group size, the group sizes from the cap, FLOPs = a*tokens + b*pairs;
# at P = 6 the group of 4 leaves ranks 4 and 5 out of that ring.
cpbench_report_test(balance_p4_dynamic 4 "--model;tiny;--seq;136;--heads;8;--kv-heads;4;--batch;2;--docs;30,50,56;--window;24;--balance;dynamic;--cp-cap;16;--strategies;single,ring;${_fast}" "${_py} ${_chk} model REPORT --min-ok 2 && ${_py} ${_chk} dynamic REPORT --min-ok 1")
cpbench_report_test(balance_p6_dynamic_prefill 6 "--model;tiny;--seq;132;--heads;6;--kv-heads;3;--docs;90,13,29;--balance;dynamic;--cp-cap;10;--pass;prefill;--strategies;ring;${_fast}" "${_py} ${_chk} model REPORT --min-ok 1 && ${_py} ${_chk} dynamic REPORT --min-ok 1")
cpbench_report_test(balance_p4_doc_zigzag_outlier 4 "--model;tiny;--seq;160;--docs;outlier;--balance;doc-zigzag;--strategies;single,ring;--pass;prefill;${_fast}" "${_py} ${_chk} layout REPORT --min-ok 1")
# --ring-pass q: the ring family's measured bytes = the pass-Q model (and check_report.py's own
# formula); every other strategy is skipped with its reason; a window truncates the hops.
cpbench_report_test(model_p4_ring_pass_q 4 "--model;tiny;--seq;128;--batch;2;--pass;prefill;--ring-pass;q;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
# usp's ring level under pass-Q, every U x R (t = 1): the all-to-all, then pass-Q over R, recomputed.
cpbench_report_test(model_p4_ring_pass_q_usp 4 "--model;tiny;--seq;128;--batch;2;--heads;8;--kv-heads;2;--pass;prefill;--ring-pass;q;--strategies;single,usp;--ulysses;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 2")
# The double ring under pass-Q, every w: Q on P-1 hops, the partial's extra returns per round.
cpbench_report_test(model_p4_ring_pass_q_double_ring 4 "--model;tiny;--seq;128;--batch;2;--pass;prefill;--ring-pass;q;--strategies;single,double-ring;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
cpbench_report_test(model_p4_ring_pass_q_window 4 "--model;tiny;--seq;128;--window;20;--pass;prefill;--ring-pass;q;--strategies;single,ring,ring-zigzag,ring-striped;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
# --cached: bytes = model (pass-KV moves the whole key block, cache shard included; pass-Q only the
# new queries), both computed again in check_report.py, and the inference block (miss rate,
# kv_cache_bytes, ttft_ms) from the config; the non-ring strategies are skipped with their reason.
cpbench_report_test(model_p4_cached 4 "--model;tiny;--seq;128;--batch;2;--pass;prefill;--cached;64;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
# usp and ulysses under --cached: the all-to-all of the new tokens, then the ring over R of cache
# shards and new tokens (pass-KV), or the new queries (pass-Q), every U x R.
cpbench_report_test(model_p4_cached_usp 4 "--model;tiny;--seq;128;--batch;2;--heads;8;--kv-heads;2;--pass;prefill;--cached;64;--strategies;single,usp,ulysses;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
cpbench_report_test(model_p4_cached_pass_q_usp 4 "--model;tiny;--seq;128;--heads;8;--kv-heads;4;--pass;prefill;--cached;96;--ring-pass;q;--strategies;single,usp;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 3")
cpbench_report_test(model_p4_cached_pass_q 4 "--model;tiny;--seq;128;--pass;prefill;--cached;96;--ring-pass;q;--strategies;single,ring,ring-zigzag,ring-striped;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
# --pass decode: S all-gathers of (o, lse) in float32 per layer, the cache shard's bytes and tpot.
# --block full with --mem-limit: the longest cache that fits (inference.max_cached_tokens), recomputed.
cpbench_report_test(model_p4_decode_fit 4 "--model;tiny;--block;full;--mem-limit;64MiB;--pass;decode;--cached;256;--decode-steps;3;--strategies;single,ring-zigzag,double-ring,usp;--ulysses;2;--ring;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
cpbench_report_test(model_p4_decode 4 "--model;tiny;--batch;2;--pass;decode;--cached;128;--decode-steps;6;--strategies;single,ring,ring-striped,double-ring,megatron-sp;${_fast}" "${_py} ${_chk} model REPORT --min-ok 5")
cpbench_report_test(model_p4_decode_usp 4 "--model;tiny;--batch;2;--heads;8;--kv-heads;2;--pass;decode;--cached;128;--decode-steps;5;--strategies;single,usp,ulysses;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 4")
# usp's double ring level: decode (two merge levels) and cached pass-Q, every mesh.
cpbench_report_test(model_p4_usp_double_decode 4 "--model;tiny;--batch;2;--heads;8;--kv-heads;2;--pass;decode;--cached;128;--decode-steps;3;--strategies;usp;--usp-ring;double;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 8")
cpbench_report_test(model_p4_usp_double_cached_pass_q 4 "--model;tiny;--seq;128;--heads;8;--kv-heads;4;--pass;prefill;--cached;96;--ring-pass;q;--strategies;usp;--usp-ring;double;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 8")
cpbench_report_test(model_p3 3 "--model;tiny;--seq;132;--heads;6;--kv-heads;3;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 6")
cpbench_report_test(model_p4_mesh 4 "--model;tiny;--seq;256;--heads;8;--kv-heads;4;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(model_p4_ring_inner 4 "--model;tiny;--seq;128;--heads;4;--kv-heads;4;--mesh;all;--placement;ring-inner;--no-causal;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(model_p6 6 "--model;tiny;--seq;144;--heads;6;--kv-heads;6;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(model_p8 8 "--model;tiny;--seq;128;--heads;8;--kv-heads;2;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 6")

# Nodes emulated with --ranks-per-node: bytes by tier (intra- / inter-node) equal the model's
# per-tier prediction for every rank and strategy (check_report.py model), both placements.
cpbench_report_test(tiers_p4_k2 4 "--model;tiny;--seq;256;--heads;8;--kv-heads;4;--mesh;all;--ranks-per-node;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 12")
cpbench_report_test(tiers_p6_k2_ring_inner 6 "--model;tiny;--seq;144;--heads;6;--kv-heads;6;--mesh;all;--ranks-per-node;2;--placement;ring-inner;--no-causal;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(tiers_p8_k4 8 "--model;tiny;--seq;128;--heads;8;--kv-heads;2;--mesh;all;--ranks-per-node;4;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(tiers_p8_k4_ring_inner 8 "--model;tiny;--seq;128;--heads;8;--kv-heads;4;--mesh;all;--ranks-per-node;4;--placement;ring-inner;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
cpbench_report_test(tiers_p8_k2_ring_inner_double 8 "--model;tiny;--seq;160;--heads;8;--kv-heads;8;--strategies;usp,double-ring;--usp-ring;double;--mesh;all;--ranks-per-node;2;--placement;ring-inner;${_fast}" "${_py} ${_chk} model REPORT --min-ok 5")

# --docs-resample: a pack per timed iteration from the llama3-sft distribution (seed + i), the
# strategies set up again per pack; every pack's bytes = its own model, packs as the re-implemented
# sampler says, no timed allocation. Bad input: a fixed pack cannot be resampled (exit 2).
cpbench_report_test(docs_resample_p4 4 "--model;tiny;--seq;4096;--docs;llama3-sft;--docs-resample;--strategies;ring,ring-zigzag,ring-striped,ulysses,usp,double-ring;--inner-ring;2;--threads;1;--warmup;0;--iters;3;--no-progress" "${_py} ${_chk} resample REPORT --min-ok 6")
cpbench_fail_test(docs_resample_fixed 2 "docs_resample needs --docs random:MIN:MAX or a distribution workload drawn with --seed \\(llama3-sft, not NAME:SEED\\), got docs='outlier'"
                  run --model tiny --seq 64 --docs outlier --docs-resample --no-progress)
cpbench_fail_test(docs_resample_one_iter 2 "docs_resample draws one pack per timed iteration and needs iters >= 2, got iters=1"
                  run --model tiny --seq 64 --docs random:4:9 --docs-resample --iters 1 --no-progress)

# Ring hop truncation (K_eff): a window W <= N/P makes the contiguous ring a one-hop halo exchange;
# documents cut hops too. Bytes (total and per tier) == the model with K_eff for every strategy.
cpbench_report_test(keff_window_p4 4 "--model;tiny;--seq;256;--heads;8;--kv-heads;4;--window;32;--mesh;all;--ranks-per-node;2;${_fast}" "${_py} ${_chk} model REPORT --min-ok 12")
cpbench_report_test(keff_docs_p6 6 "--model;tiny;--seq;144;--heads;6;--kv-heads;6;--docs;24,24,48,48;--no-causal;--mesh;all;${_fast}" "${_py} ${_chk} model REPORT --min-ok 10")
# The double ring's truncation (both levels): bytes == the model with the truncated schedule, per
# rank and tier, and rank 0's sends on ring_inner / ring_outer equal the schedule rebuilt by
# check_report.py from the mask, with at least --min-cut results below the full ring's sends and
# bytes. Documents of N/P on the zigzag layout (rank r sees only r xor 1), a causal window on
# usp's contiguous layout (only r-1), non-causal documents.
set(_dr_run "--strategies;double-ring,usp;--usp-ring;double;--mesh;all")
cpbench_report_test(keff_double_docs_p8 8 "--model;tiny;--seq;160;--heads;8;--kv-heads;4;--docs;equal:8;${_dr_run};--ranks-per-node;2;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 14 && ${_py} ${_chk} hops REPORT --min-ok 14 --min-cut 9")
cpbench_report_test(keff_double_window_p8 8 "--model;tiny;--seq;256;--heads;8;--kv-heads;4;--window;32;--usp-layout;contiguous;${_dr_run};--ranks-per-node;4;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 14 && ${_py} ${_chk} hops REPORT --min-ok 14 --min-cut 7")
# ... the double ring's K,V blocks encoded (--comm-dtype fp8, block scales): P = 4, every w and usp
# mesh, the full ring rebuilt by cpmodel (model), then a window's truncated schedule (hops), bf16.
cpbench_report_test(keff_double_comm_fp8_p4 4 "--model;tiny;--seq;128;--heads;8;--kv-heads;2;--head-dim;32;--dtype;bf16;--comm-dtype;fp8;${_dr_run};${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 13 && ${_run} 4 ${CPBENCH_BIN} run --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --dtype bf16 --comm-dtype fp8 --window 24 --usp-layout contiguous --strategies double-ring,usp --usp-ring double --mesh all ${_fast_s} --out REPORT.window.json && ${_py} ${_val} REPORT.window.json && ${_py} ${_chk} model REPORT.window.json --min-ok 13 && ${_py} ${_chk} hops REPORT.window.json --min-ok 13 --min-cut 2")
cpbench_report_test(keff_double_docs_p6 6 "--model;tiny;--seq;144;--heads;6;--kv-heads;6;--docs;24,24,48,48;--no-causal;${_dr_run};--placement;ring-inner;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 13 && ${_py} ${_chk} hops REPORT --min-ok 13 --min-cut 3")

# Memory: sequence-sharded activations scale as 1/P; megatron-sp shards its weights.
set(_mem "--model tiny --seq 4096 --heads 4 --kv-heads 4 --strategies ulysses,ring,ring-zigzag,megatron-sp --warmup 0 --iters 1 --no-progress")
add_test(NAME report_memory_scaling
         COMMAND sh -c "${_run} 1 ${CPBENCH_BIN} run ${_mem} --out ${CPBENCH_TEST_OUT}/mem_p1.json && ${_run} 4 ${CPBENCH_BIN} run ${_mem} --out ${CPBENCH_TEST_OUT}/mem_p4.json && ${_py} ${_chk} memory ${CPBENCH_TEST_OUT}/mem_p1.json ${CPBENCH_TEST_OUT}/mem_p4.json ulysses ring ring-zigzag && ${_py} ${_chk} weights ${CPBENCH_TEST_OUT}/mem_p1.json ${CPBENCH_TEST_OUT}/mem_p4.json megatron-sp")
set_tests_properties(report_memory_scaling PROPERTIES LABELS "mpi;report" TIMEOUT 600)

# Balance: causal contiguous ring is imbalanced, zigzag and striped are not. Gated on the
# deterministic flops_imbalance (exact pair counts; ring at P=2, N=4096: 1.470); the time-based
# imbalance is printed beside it but not gated (it depends on the machine's load).
cpbench_report_test(balance_causal 2 "--model;tiny;--seq;4096;--heads;8;--kv-heads;8;--threads;1;--strategies;ring,ring-zigzag,ring-striped;--warmup;0;--iters;2;--no-progress"
  "${_py} ${_chk} balance REPORT --above ring=1.4 --below ring-zigzag=1.02 ring-striped=1.02")

# Trace, plots and the regression gate on a real report.
add_test(NAME report_trace_plots_gate
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/plots && ${_run} 2 ${CPBENCH_BIN} run --model tiny --seq 256,512 ${_fast_s} --out ${CPBENCH_TEST_OUT}/tpg.json --trace ${CPBENCH_TEST_OUT}/tpg_trace.json && ${_py} ${_val} ${CPBENCH_TEST_OUT}/tpg.json && ${_py} ${_chk} trace ${CPBENCH_TEST_OUT}/tpg_trace.json --ranks 2 && ${_py} ${PROJECT_SOURCE_DIR}/scripts/plot_report.py ${CPBENCH_TEST_OUT}/tpg.json -o ${CPBENCH_TEST_OUT}/plots && test -s ${CPBENCH_TEST_OUT}/plots/step_time.png && ${_py} ${PROJECT_SOURCE_DIR}/scripts/compare_reports.py ${CPBENCH_TEST_OUT}/tpg.json ${CPBENCH_TEST_OUT}/tpg.json")
set_tests_properties(report_trace_plots_gate PROPERTIES LABELS "mpi;report" TIMEOUT 600)

# A sweep stopped by SIGTERM exits non-zero and keeps the jobs finished before it (the report is
# rewritten after every job). The sweep is long (24 jobs) so that the signal lands mid-sweep.
add_test(NAME report_sigterm_keeps_results
         COMMAND ${_py} ${PROJECT_SOURCE_DIR}/tests/python/check_interrupt.py ${CPBENCH_TEST_OUT}/sigterm.json --
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2 ${CPBENCH_BIN} run --model tiny
                 --seq 1024,2048,4096 --iters 5 --no-progress)
set_tests_properties(report_sigterm_keeps_results PROPERTIES LABELS "mpi;report" TIMEOUT 600)

# Faults (docs/RELIABILITY.md): a rank killed mid-sweep ends the job within 30 s; a rank stopped
# mid-sweep is named by the others' watchdog after --timeout; both keep the finished jobs.
set(_faults ${PROJECT_SOURCE_DIR}/tests/python/check_faults.py)
set(_fault_run ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2 ${CPBENCH_BIN} run --model tiny
    --seq 2048,4096 --strategies ring,ring-zigzag,ring-striped --iters 20 --no-progress)
add_test(NAME fault_rank_killed COMMAND ${_py} ${_faults} kill ${CPBENCH_TEST_OUT}/fault_kill.json -- ${_fault_run})
# --timeout 20: one job (20 iterations of seq 2048 or 4096 at P = 2) must finish within it when
# the watchdog runs; at 5 s a machine loaded by parallel tests (ctest -j) fired it on a slow
# job before the fault was injected.
add_test(NAME fault_rank_stopped COMMAND ${_py} ${_faults} stop ${CPBENCH_TEST_OUT}/fault_stop.json --timeout 20 --
         ${_fault_run} --timeout 20)
set_tests_properties(fault_rank_killed fault_rank_stopped PROPERTIES LABELS "mpi;faults" TIMEOUT 300)

# The console table: a job that sends nothing (single) shows "–" for overlap and hta, not 100%;
# every other job shows the report's ratio and hta_ratio, rounded to whole percent. At P = 1 the
# collectives run in groups of one (time, no bytes): both figures must say "nothing to hide" (the
# HTA one used to read 0 there while the ratio read 1).
set(_con ${CPBENCH_TEST_OUT}/console_p2)
set(_con1 ${CPBENCH_TEST_OUT}/console_p1)
add_test(NAME report_console_overlap
         COMMAND sh -c "rm -f ${_con}.json ${_con}.txt ${_con1}.json ${_con1}.txt && ${_run} 2 ${CPBENCH_BIN} run --model tiny --seq 128 --strategies single,ring,ulysses ${_fast_s} --out ${_con}.json > ${_con}.txt 2>&1; rc=$?; cat ${_con}.txt; test $rc -eq 0 && ${_py} ${_chk} console ${_con}.json ${_con}.txt --min-dash 1 --min-pct 2 && grep -q '^overlap: 1 - exposed/standalone' ${_con}.txt && grep -q '^hta: ' ${_con}.txt && ${_run} 1 ${CPBENCH_BIN} run --model tiny --seq 128 --strategies megatron-sp,ulysses,allgather-kv,ring ${_fast_s} --out ${_con1}.json > ${_con1}.txt 2>&1 && ${_py} ${_chk} console ${_con1}.json ${_con1}.txt --min-dash 4 --min-pct 0")
set_tests_properties(report_console_overlap PROPERTIES LABELS "mpi;report" TIMEOUT 300)

# Report integrity (docs/REPORT.md "integrity"), in the report and on the console ('ok!', each flag
# listed under the table). With a peak of 1e-9 TFLOP/s every result's rate exceeds the peak it is
# divided by: each is flagged tflops_over_peak, and nothing else (every strategy's counted FLOPs
# equal the layer's model; single's P times it). megatron-sp and usp[t4xu1xr1] at P = 4 with
# G = 2 KV heads run each KV head's projection on 2 ranks: those repeated GEMMs count as hardware
# FLOPs only, so the model FLOPs still sum to the layer's and nothing is flagged (before, they
# counted as model FLOPs and both were flagged flops_mismatch, +25%).
set(_integ ${CPBENCH_TEST_OUT}/integrity)
add_test(NAME report_integrity_flagged
         COMMAND sh -c "rm -f ${_integ}_*.json ${_integ}_*.txt && ${_run} 2 ${CPBENCH_BIN} run --model tiny --seq 64 --strategies single,ring-zigzag,ulysses --peak-tflops 1e-9 ${_fast_s} --out ${_integ}_peak.json > ${_integ}_peak.txt 2>&1; rc=$?; cat ${_integ}_peak.txt; test $rc -eq 0 && ${_py} ${_val} ${_integ}_peak.json && ${_py} ${_chk} integrity ${_integ}_peak.json ${_integ}_peak.txt --kinds tflops_over_peak --min-ok 3 && ${_run} 4 ${CPBENCH_BIN} run --model tiny --seq 64 --strategies megatron-sp,usp[t4xu1xr1] ${_fast_s} --out ${_integ}_kv.json > ${_integ}_kv.txt 2>&1; rc=$?; cat ${_integ}_kv.txt; test $rc -eq 0 && ${_py} ${_val} ${_integ}_kv.json && ${_py} ${_chk} integrity ${_integ}_kv.json ${_integ}_kv.txt --kinds '' --min-ok 2")
set_tests_properties(report_integrity_flagged PROPERTIES LABELS "mpi;report" TIMEOUT 120)

# `cpbench list` states each strategy's tier behaviour in a line.
add_test(NAME list_tiers
         COMMAND ${CPBENCH_EXPECT_PASS} "tiers: inner rings inside a node; each rank sends only its R/w-1 outer blocks" --
                 ${CPBENCH_BIN} list)
set_tests_properties(list_tiers PROPERTIES LABELS "report")

# --mem-limit: a job that needs more than the cap fails with the bytes needed and the limit in its
# reason, on every rank's behalf, and the sweep goes on (the small sequence runs, the large one
# fails); run exits 1 and the report is complete and valid.
add_test(NAME report_mem_limit_fails_job_sweep_goes_on
         COMMAND sh -c "rm -f ${CPBENCH_TEST_OUT}/memlim.json; ${_run} 2 ${CPBENCH_BIN} run --model tiny --seq 256,8192 --strategies ring --mem-limit 2MiB ${_fast_s} --out ${CPBENCH_TEST_OUT}/memlim.json; rc=$?; test $rc -eq 1 && ${_py} ${_val} ${CPBENCH_TEST_OUT}/memlim.json && ${_py} -c \"import json,sys; r=json.load(open('${CPBENCH_TEST_OUT}/memlim.json')); s=[(x['seq'],x['status'],x.get('reason','')) for x in r['results']]; print(s); ok=r['complete'] and r['config']['mem_limit_bytes']==2097152 and s[0][1]=='ok' and s[1][1]=='failed' and 'mem-limit exceeded' in s[1][2] and 'limit 2097152' in s[1][2] and 'rank 0' in s[1][2] and 'rank 1' in s[1][2]; sys.exit(0 if ok else 1)\"")
set_tests_properties(report_mem_limit_fails_job_sweep_goes_on PROPERTIES LABELS "mpi;report" TIMEOUT 300)

# plan.py on a real report of two emulated nodes: its tier columns are the report's own
# comm.*.tiers (the double ring's outer level and Ulysses' all-to-all both cross nodes; the
# planner used to recompute tiers from the groups and show 0 bytes to other nodes for both).
set(_plan_md ${CPBENCH_TEST_OUT}/plan_tiers_p4.md)
cpbench_report_test(plan_tiers_p4 4 "--model;tiny;--seq;64;--strategies;double-ring,ulysses;--ranks-per-node;2;--warmup;0;--iters;3;--no-progress"
  "${_py} ${PROJECT_SOURCE_DIR}/scripts/plan.py REPORT > ${_plan_md} && ${_py} ${_chk} plan REPORT ${_plan_md} --min-cross 2 && grep -q 'Best per N (4 GPUs)' ${_plan_md}")

# --recompute (DESIGN "Recompute"): the repeated forward's bytes (comm.recompute) equal the
# model and, apart from it, the forward's own calls on rank 0 (selective: less the tp level's and
# the MLP's, here on its own mesh, --mlp-tp 2); every strategy and mesh, a window; its FLOPs are
# not model FLOPs (no flops_mismatch). Then full, B = 2.
set(_rec_full ${CPBENCH_TEST_OUT}/recompute_full_p4.json)
cpbench_report_test(recompute_p4 4 "--model;tiny;--seq;64;--block;full;--recompute;selective;--mesh;all;--mlp-tp;2;--window;24;--warmup;0;--iters;1;--no-progress"
  "${_py} ${_chk} model REPORT --min-ok 16 && ${_py} ${PROJECT_SOURCE_DIR}/scripts/plan.py REPORT | grep -q '^| strategy | none | selective (run) | full |$' && rm -f ${_rec_full} && ${_run} 4 ${CPBENCH_BIN} run --model tiny --seq 64 --block full --recompute full --batch 2 --mesh all ${_fast_s} --out ${_rec_full} && ${_py} ${_val} ${_rec_full} && ${_py} ${_chk} model ${_rec_full} --min-ok 16")

# The whole-model memory estimate (memory.model_estimate): under --block full its parameters are
# DESIGN's block (rebuilt from the config) x layers + the split embedding and head, activations by
# --recompute, total = the sum, megatron-sp's 1/P; null under --block attn. Every --shard choice
# (optimizer by default, params with recompute full, none and grads on a third and fourth run):
# the states 2/2/12 B per held or sharded parameter, and results[].step's gradient sync bytes,
# counted again in Python from the shape and the mesh.
set(_est ${CPBENCH_TEST_OUT}/estimate_p2)
set(_est_run "${_run} 2 ${CPBENCH_BIN} run --model tiny --seq 64 --strategies single,ring,ulysses,megatron-sp ${_fast_s}")
add_test(NAME report_model_estimate_p2
         COMMAND sh -c "rm -f ${_est}_none.json ${_est}_full.json ${_est}_attn.json ${_est}_shard_none.json ${_est}_grads.json && ${_est_run} --block full --out ${_est}_none.json && ${_est_run} --block full --recompute full --layers 3 --batch 2 --shard params --out ${_est}_full.json && ${_est_run} --block full --shard none --recompute selective --out ${_est}_shard_none.json && ${_est_run} --block full --shard grads --out ${_est}_grads.json && ${_est_run} --out ${_est}_attn.json && ${_py} ${_val} ${_est}_none.json && ${_py} ${_val} ${_est}_full.json && ${_py} ${_val} ${_est}_shard_none.json && ${_py} ${_val} ${_est}_grads.json && ${_py} ${_val} ${_est}_attn.json && ${_py} ${_chk} estimate ${_est}_none.json ${_est}_full.json ${_est}_shard_none.json ${_est}_grads.json --attn ${_est}_attn.json --min-ok 4 --shards none,optimizer,grads,params")
set_tests_properties(report_model_estimate_p2 PROPERTIES LABELS "mpi;report" TIMEOUT 300)
# ... under --attention mla: every rank holds MLA's down-projections and norms whole (the "norms"
# group), its heads' up-projections and w_o (megatron-sp, usp --tp: H/t of them).
set(_est_mla ${CPBENCH_TEST_OUT}/estimate_mla_p4)
set(_est_mla_run "${_run} 4 ${CPBENCH_BIN} run --model tiny-mla --seq 64 --strategies single,ring,usp,megatron-sp --mesh all ${_fast_s}")
add_test(NAME report_model_estimate_mla_p4
         COMMAND sh -c "rm -f ${_est_mla}_full.json ${_est_mla}_attn.json && ${_est_mla_run} --block full --shard params --recompute full --layers 3 --out ${_est_mla}_full.json && ${_est_mla_run} --out ${_est_mla}_attn.json && ${_py} ${_val} ${_est_mla}_full.json && ${_py} ${_chk} estimate ${_est_mla}_full.json --attn ${_est_mla}_attn.json --min-ok 8 --shards params")
set_tests_properties(report_model_estimate_mla_p4 PROPERTIES LABELS "mpi;report" TIMEOUT 300)
