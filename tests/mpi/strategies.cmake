# The verify matrix: the strategy-set cases of `cpbench verify` against single (fp32, rel L2 <=
# 1e-5), one row each, "NAME P MIN ARGS...", which becomes cpbench_verify_test(NAME P
# --min-verified MIN ARGS...) (tests/mpi/CMakeLists.txt): ctest's verify_NAME runs `cpbench
# verify --no-progress --min-verified MIN ARGS...` on P ranks, which must pass with at least MIN
# strategies (meshes) verified. Adding a feature x strategy x P case is adding one row. A row is
# split into words as a shell would (separate_arguments UNIX_COMMAND), so the option groups the
# rows share are strings here, not CMake lists: a list's ";" would cut the row in two.
set(_all "usp,megatron-sp,allgather-kv,ulysses,ring-zigzag")
set(_dr "--strategies double-ring,usp --usp-ring double --mesh all")
set(_passq "--pass prefill --ring-pass q --strategies ring,ring-zigzag,ring-striped")
set(_cached "--pass prefill --strategies ring,ring-zigzag,ring-striped")
set(_usp_double "--strategies usp --usp-ring double --heads 8 --kv-heads 2")
set(_decode "--pass decode --strategies ring,ring-zigzag,ring-striped,double-ring,megatron-sp")
set(_decode_usp "--pass decode --strategies usp,ulysses --mesh all")
set(_block "--block full --seq 64 --heads 4 --kv-heads 2 --head-dim 16 --dim 64 --ffn-dim 96")
set(_vanish "--seq 64 --head-dim 16 --iters 1 --warmup 0")  # also in the dump tests below
set(_vanish_min 8)

# _verify_cross(OUT AXIS VALUES... ROWS ROW...): appends to the list OUT, for each value in turn,
# every ROW with <AXIS> replaced by the value: a family that is a full cross product (features x
# causal and not, say) is written once.
function(_verify_cross out axis)
  cmake_parse_arguments(PARSE_ARGV 2 _x "" "" "VALUES;ROWS")
  set(rows ${${out}})
  foreach(value IN LISTS _x_VALUES)
    foreach(row IN LISTS _x_ROWS)
      string(REPLACE "<${axis}>" "${value}" row "${row}")
      list(APPEND rows "${row}")
    endforeach()
  endforeach()
  set(${out} ${rows} PARENT_SCOPE)
endfunction()

#         NAME                                    P MIN ARGS
set(_verify_matrix
  # Strategy-set verification: megatron-sp, usp on every mesh, allgather-kv, both placements,
  # causal and not, MHA and GQA (including kv_heads < P, where usp runs with U <= kv_heads).
  "p4_mesh_causal_gqa                      4  7 --model tiny --seq 136 --heads 8 --kv-heads 4 --strategies ${_all} --mesh all"
  "p4_mesh_causal_gqa_ringinner            4  3 --model tiny --seq 136 --heads 8 --kv-heads 4 --strategies usp --mesh all --placement ring-inner"
  "p4_mesh_noncausal_mha_ringinner         4  7 --model tiny --seq 104 --heads 4 --kv-heads 4 --no-causal --strategies ${_all} --mesh all --placement ring-inner"
  "p4_mesh_noncausal_contiguous            4  3 --model tiny --seq 100 --heads 4 --kv-heads 4 --no-causal --strategies usp --mesh all --usp-layout contiguous"
  "p4_kv2_lt_p                             4  4 --model tiny --seq 136 --heads 8 --kv-heads 2 --strategies usp,allgather-kv --mesh all"
  "p4_usp_2x2_b2                           4  1 --model tiny --seq 72 --heads 4 --kv-heads 2 --batch 2 --strategies usp --ulysses 2 --ring 2"
  "p6_mesh_causal_mha                      6  8 --model tiny --seq 144 --heads 6 --kv-heads 6 --strategies ${_all} --mesh all"
  "p6_mesh_noncausal_ringinner             6  4 --model tiny --seq 132 --heads 6 --kv-heads 6 --no-causal --strategies usp --mesh all --placement ring-inner"
  "p6_kv2_lt_p                             6  3 --model tiny --seq 144 --heads 6 --kv-heads 2 --strategies usp --mesh all"
  "p8_mesh_causal_gqa                      8  8 --model tiny --seq 160 --heads 16 --kv-heads 8 --strategies ${_all} --mesh all"
  "p8_kv4_lt_p                             8  4 --model tiny --seq 160 --heads 8 --kv-heads 4 --strategies usp --mesh all"
  # KV replication (kv_heads < Ulysses degree, kv_heads dividing it): ulysses, megatron-sp and every
  # usp mesh, including u4 and u8 with kv_heads=2 (copies per head 2 and 4), causal and not, B=2.
  "p4_kv_replicated                        4  5 --model tiny --seq 136 --heads 8 --kv-heads 2 --strategies ulysses,megatron-sp,usp --mesh all"
  "p4_kv_replicated_noncausal_b2           4  5 --model tiny --seq 72 --heads 4 --kv-heads 1 --batch 2 --no-causal --strategies ulysses,megatron-sp,usp --mesh all --placement ring-inner"
  "p8_kv_replicated                        8  6 --model tiny --seq 160 --heads 8 --kv-heads 2 --strategies ulysses,megatron-sp,usp --mesh all"
  "p8_mesh_noncausal_ringinner             8  4 --model tiny --seq 160 --heads 8 --kv-heads 8 --no-causal --strategies usp --mesh all --placement ring-inner"
  # Double ring (LoongTrain): every inner ring size w dividing P (w = 1 and w = P are single rings
  # over the outer or the inner level), causal and not, GQA, B=2, both placements.
  "p4_double_ring_mesh                     4  3 --model tiny --seq 136 --heads 8 --kv-heads 2 --strategies double-ring --mesh all"
  "p6_double_ring_noncausal_b2             6  4 --model tiny --seq 72 --heads 6 --kv-heads 3 --batch 2 --no-causal --strategies double-ring --mesh all --placement ring-inner"
  "p8_double_ring_mesh                     8  5 --model tiny --seq 160 --heads 8 --kv-heads 4 --strategies double-ring,ring-zigzag --mesh all"
  # Masks (issue 11): sliding window, packed documents (lists, equal:K, random:MIN:MAX) and both,
  # causal and not, at P = 2, 3, 4, 6, 8, shapes that do not divide into tiles; every strategy
  # against single (which applies the same mask), --min-verified pins how many must pass.
  "p2_window                               2  8 --model tiny --seq 100 --heads 4 --kv-heads 2 --window 30"
  "p3_docs_noncausal                       3  8 --model tiny --seq 150 --heads 6 --kv-heads 3 --docs 40,50,60 --no-causal"
  "p4_window_docs_b2                       4  8 --model tiny --seq 136 --heads 8 --kv-heads 4 --window 20 --docs random:10:60 --batch 2"
  "p6_window_noncausal_mesh                6  8 --model tiny --seq 144 --heads 6 --kv-heads 6 --window 25 --no-causal --strategies ${_all} --mesh all"
  "p8_docs_window_ringinner                8 14 --model tiny --seq 160 --heads 8 --kv-heads 8 --docs equal:5 --window 24 --strategies ${_all},ring,ring-striped,double-ring --mesh all --placement ring-inner"
  # The double ring's hop truncation under masks (double-ring and usp --usp-ring double, every
  # inner ring w and usp mesh): window, documents and both, causal and not, P = 4, 6, 8, against
  # single at 1e-5; the contiguous usp layout under a causal window and documents of N/P on the
  # zigzag layout are where the schedule drops most hops.
  "p4_double_ring_window                   4  9 --model tiny --seq 136 --heads 8 --kv-heads 4 --window 20 ${_dr}"
  "p4_double_ring_docs_window_noncausal_b2 4  9 --model tiny --seq 72 --heads 8 --kv-heads 4 --batch 2 --docs random:10:40 --window 15 --no-causal ${_dr}"
  "p6_double_ring_docs_noncausal           6 13 --model tiny --seq 144 --heads 6 --kv-heads 6 --docs 30,42,72 --no-causal ${_dr} --placement ring-inner"
  "p6_double_ring_window_contiguous        6 13 --model tiny --seq 132 --heads 6 --kv-heads 6 --window 22 --usp-layout contiguous ${_dr}"
  "p8_double_ring_docs_window              8 14 --model tiny --seq 160 --heads 8 --kv-heads 4 --docs equal:4 --window 24 ${_dr}"
  "p8_double_ring_docs_pairs               8 14 --model tiny --seq 160 --heads 8 --kv-heads 4 --docs equal:8 ${_dr} --placement ring-inner"
  # --ring-pass q (pass-Q: query blocks circulate, their partials return to the owner): the ring
  # family against single at 1e-5 (verify also runs the backward from pass-Q's o and lse), causal,
  # P = 2 with a window, P = 4 with documents and B = 2.
  "p2_ring_pass_q_window                   2  3 --model tiny --seq 100 --heads 4 --kv-heads 2 --window 30 ${_passq}"
  "p4_ring_pass_q_docs_b2                  4  3 --model tiny --seq 136 --heads 8 --kv-heads 4 --docs 30,50,56 --batch 2 ${_passq}"
  # --cached C (persistent-KV prefill): the new tokens' queries attend a seeded KV cache sharded
  # C/P per rank plus, causally, each other; the ring family against single (which holds the whole
  # cache) at 1e-5 on the forward tensors, pass-KV and pass-Q, causal and windowed, P = 2, 4, 6, 8.
  "p2_cached_window                        2  3 --model tiny --seq 104 --cached 40 --window 30 ${_cached}"
  "p2_cached_pass_q                        2  3 --model tiny --seq 104 --cached 40 --ring-pass q ${_cached}"
  "p4_cached_b2                            4  3 --model tiny --seq 136 --cached 56 --batch 2 --heads 8 --kv-heads 4 ${_cached}"
  "p4_cached_pass_q_window                 4  3 --model tiny --seq 136 --cached 56 --window 20 --ring-pass q ${_cached}"
  "p6_cached_pass_q_window                 6  3 --model tiny --seq 168 --cached 72 --heads 6 --kv-heads 3 --window 16 --ring-pass q ${_cached}"
  "p8_cached                               8  3 --model tiny --seq 160 --cached 64 --heads 8 --kv-heads 2 ${_cached}"
  # usp's ring level under --ring-pass q (prefill), every t x U x R.
  "p4_pass_q_usp_window                    4  6 --model tiny --seq 128 --batch 2 --heads 8 --kv-heads 2 --window 30 --pass prefill --ring-pass q --strategies usp --mesh all"
  "p8_pass_q_usp                           8 10 --model tiny --seq 256 --heads 8 --kv-heads 4 --pass prefill --ring-pass q --strategies usp --mesh all"
  # usp and ulysses under --cached: a cache shard per ring index for the heads Ulysses gives a rank.
  "p4_cached_usp_window                    4  4 --model tiny --seq 256 --cached 96 --batch 2 --heads 8 --kv-heads 2 --window 60 --pass prefill --strategies usp,ulysses --mesh all"
  "p6_cached_usp_pass_q                    6  3 --model tiny --seq 264 --cached 96 --heads 6 --kv-heads 3 --pass prefill --ring-pass q --strategies usp --mesh all"
  "p8_cached_usp                           8  5 --model tiny --seq 256 --cached 128 --heads 8 --kv-heads 4 --pass prefill --strategies usp,ulysses --mesh all"
  # The double ring under --ring-pass q: Q blocks on the K,V path, partials on the dK,dV path; every w.
  "p4_pass_q_double_ring_window            4  3 --model tiny --seq 128 --batch 2 --window 30 --pass prefill --ring-pass q --strategies double-ring --mesh all"
  "p8_pass_q_double_ring_cached            8  4 --model tiny --seq 224 --cached 96 --heads 8 --kv-heads 2 --pass prefill --ring-pass q --strategies double-ring --mesh all"
  # P = 2 and 6 for the double ring and usp: cached pass-Q (window) and decode.
  "p6_cached_pass_q_double_ring_usp_window 6  6 --model tiny --seq 264 --cached 120 --heads 6 --kv-heads 3 --window 40 --pass prefill --ring-pass q --strategies double-ring,usp --mesh all"
  "p2_cached_pass_q_double_ring_usp        2  4 --model tiny --seq 104 --cached 40 --pass prefill --ring-pass q --strategies double-ring,usp --mesh all"
  "p2_decode_double_ring_usp               2  5 --model tiny --pass decode --cached 40 --decode-steps 3 --strategies double-ring,usp,ulysses --mesh all"
  # usp's double ring level (--usp-ring double) under --cached (both passes) and decode (the merge
  # over the inner ring, then across the inner rings), every t x U x R and inner ring w | R.
  "p4_cached_usp_double_window             4  8 --model tiny --seq 256 --cached 96 --window 60 --pass prefill --mesh all ${_usp_double}"
  "p4_cached_pass_q_usp_double             4  8 --model tiny --seq 256 --cached 128 --batch 2 --pass prefill --ring-pass q --mesh all ${_usp_double}"
  "p4_decode_usp_double_full               4  8 --model tiny --cached 96 --decode-steps 5 --block full --pass decode --mesh all ${_usp_double}"
  "p8_decode_usp_double_window             8  1 --model tiny --cached 128 --decode-steps 9 --window 40 --pass decode --ulysses 2 --ring 4 --inner-ring 2 ${_usp_double}"
  # The double ring under --cached (pass-KV: a block is a rank's cache shard and new tokens), every w.
  "p4_cached_double_ring_window            4  3 --model tiny --seq 136 --cached 56 --window 20 --batch 2 --pass prefill --strategies double-ring --mesh all"
  "p8_cached_double_ring                   8  4 --model tiny --seq 224 --cached 96 --heads 8 --kv-heads 2 --pass prefill --strategies double-ring --mesh all"
  # The ring family under --cached at P = 8: pass-Q with a window.
  "p8_cached_pass_q_window                 8  3 --model tiny --seq 160 --cached 64 --heads 8 --kv-heads 2 --window 12 --ring-pass q ${_cached}"
  # --pass decode --cached C: S steps of one token per sequence against the cache sharded C/P per
  # rank, partials merged by one all-gather; compared with single on the same cache and tokens.
  "p2_decode_window                        2  4 --model tiny --cached 96 --decode-steps 5 --window 40 ${_decode}"
  "p4_decode_b2_full                       4  4 --model tiny --cached 112 --decode-steps 7 --batch 2 --heads 8 --kv-heads 4 --block full ${_decode}"
  "p6_decode                               6  4 --model tiny --cached 144 --decode-steps 9 --heads 6 --kv-heads 3 --dim 96 ${_decode}"
  "p8_decode_window                        8  4 --model tiny --cached 160 --decode-steps 11 --heads 8 --kv-heads 2 --window 24 ${_decode}"
  # usp's decode: the cache's tokens over the ring level, the heads over Ulysses (KV heads
  # replicated when U > G), every U x R; ulysses is the mesh U = P (the heads alone).
  "p4_decode_usp_b2                        4  4 --model tiny --cached 96 --decode-steps 5 --batch 2 --heads 8 --kv-heads 2 --block full ${_decode_usp}"
  "p6_decode_usp_window                    6  6 --model tiny --cached 120 --decode-steps 7 --heads 6 --kv-heads 3 --dim 96 --window 30 ${_decode_usp}"
  "p8_decode_usp                           8  4 --model tiny --cached 128 --decode-steps 9 --heads 8 --kv-heads 4 ${_decode_usp}"
  # The whole block (--block full: attention then the SwiGLU MLP): every strategy against single,
  # every gradient including the MLP weights, at P = 2 and 4 (B = 2 at P = 4: megatron-sp's
  # reordering gathers).
  "p2_block_full                           2  8 ${_block}"
  "p4_block_full_b2                        4  8 ${_block} --batch 2"
  # --recompute (DESIGN "Recompute"): the backward repeats the core's forward (selective) or the
  # block's (full); verify poisons what the repeat must rewrite, so a backward reading anything
  # else fails. Every strategy and mesh, with a window and documents, in bf16, and MLA's latent.
  "p4_recompute_selective_window_docs      4 15 --model tiny --seq 64 --block full --recompute selective --mesh all --window 24 --docs 40,24"
  "p4_recompute_full_bf16                  4 15 --model tiny --seq 64 --block full --recompute full --dtype bf16 --mesh all"
  "p4_recompute_selective_mla_latent       4 13 --model tiny-mla --seq 64 --block full --attention mla --mla-travel latent --recompute selective --mesh all"
)
# Vanishing gradients (issue 24): with a window of 1 or one-token documents every query sees
# only itself, so dq = dk = 0 exactly and both sides return fp32 rounding noise; the bound
# ||a-b|| <= 1e-5 * max(||b||, m) (bench/verify_bound.h) measures it against the scale m of the
# gradient's terms. Every strategy (default set), P = 2 (H = G = 2) and P = 4 (H = 4, G = 2, so
# ulysses and megatron-sp run too), each causal and not; --min-verified pins all 8.
_verify_cross(_verify_matrix c VALUES causal no-causal ROWS
  "p2_window1_<c>  2 ${_vanish_min} ${_vanish} --heads 2 --kv-heads 2 --window 1 --<c>"
  "p2_docs1_<c>    2 ${_vanish_min} ${_vanish} --heads 2 --kv-heads 2 --docs equal:64 --<c>"
  "p4_docs1_<c>    4 ${_vanish_min} ${_vanish} --heads 4 --kv-heads 2 --docs equal:64 --<c>")
list(APPEND _verify_matrix
  # --balance doc-zigzag|greedy (tokens placed by the balanced layout, balance.h) on ring, the double
  # ring (every w) and usp (every t x U x R; its single ring level, or --usp-ring double with every
  # w | R) against single at 1e-5: both schemes at P = 2, 3, 4, 6, 8, over documents with and
  # without a window, causal and not. --min-verified is every mesh the run enumerates.
  "p2_balance_doc_zigzag_window            2  6 --model tiny --seq 100 --heads 4 --kv-heads 2 --docs 30,70 --window 16 --balance doc-zigzag --strategies ring,double-ring,usp --mesh all"
  "p2_balance_greedy_docs_usp_double       2  6 --model tiny --seq 100 --heads 4 --kv-heads 2 --docs 30,70 --balance greedy --strategies double-ring,usp --usp-ring double --mesh all"
  "p3_balance_greedy_docs                  3  6 --model tiny --seq 96 --heads 6 --kv-heads 3 --docs 50,7,39 --balance greedy --strategies ring,double-ring,usp --mesh all"
  "p3_balance_doc_zigzag_window_usp_double 3  6 --model tiny --seq 96 --heads 6 --kv-heads 3 --docs 50,7,39 --window 12 --balance doc-zigzag --strategies double-ring,usp --usp-ring double --mesh all"
  "p4_balance_greedy_docs_window_b2        4 14 --model tiny --seq 136 --heads 8 --kv-heads 4 --batch 2 --docs 30,50,56 --window 20 --balance greedy --strategies ring,double-ring,usp --usp-ring double --mesh all"
  "p4_balance_doc_zigzag_docs              4 10 --model tiny --seq 136 --heads 8 --kv-heads 4 --docs 30,50,56 --balance doc-zigzag --strategies ring,double-ring,usp --mesh all"
  "p6_balance_doc_zigzag_noncausal         6 11 --model tiny --seq 132 --heads 6 --kv-heads 3 --docs 90,13,29 --no-causal --balance doc-zigzag --strategies ring,double-ring,usp --mesh all"
  "p6_balance_greedy_window_usp_double     6 15 --model tiny --seq 132 --heads 6 --kv-heads 3 --docs 90,13,29 --window 14 --balance greedy --strategies double-ring,usp --usp-ring double --mesh all"
  "p8_balance_greedy_outlier               8 15 --model tiny --seq 160 --heads 8 --kv-heads 4 --docs outlier --balance greedy --strategies ring,double-ring,usp --mesh all"
  "p8_balance_doc_zigzag_window_usp_double 8 24 --model tiny --seq 160 --heads 8 --kv-heads 4 --docs outlier --window 12 --balance doc-zigzag --strategies double-ring,usp --usp-ring double --mesh all"
  # pass-Q (prefill) under --balance: the Q blocks travel on the balanced layout, every mesh.
  "p4_balance_greedy_pass_q_usp_double     4 14 --model tiny --seq 136 --heads 8 --kv-heads 4 --docs 30,50,56 --window 24 --balance greedy --pass prefill --ring-pass q --strategies ring,double-ring,usp --usp-ring double --mesh all"
  # --balance dynamic (ring only): a CP group of c ranks per document by --cp-cap, one ring per group
  # size, ranks holding different token counts; the caps give a mix of c = 1 (local), 2, 4 and c = P
  # (P = 3, 6: not a power of two). --min-verified: every tensor of ring and single.
  "p2_balance_dynamic_docs_window          2  1 --model tiny --seq 100 --heads 4 --kv-heads 2 --docs 30,70 --window 16 --balance dynamic --cp-cap 40 --strategies ring"
  "p3_balance_dynamic_docs                 3  1 --model tiny --seq 96 --heads 6 --kv-heads 3 --docs 50,7,39 --balance dynamic --cp-cap 20 --strategies ring"
  "p4_balance_dynamic_docs_window_b2       4  1 --model tiny --seq 136 --heads 8 --kv-heads 4 --batch 2 --docs 30,50,56 --window 20 --balance dynamic --cp-cap 16 --strategies ring"
  "p4_balance_dynamic_default_cap_prefill  4  1 --model tiny --seq 136 --heads 8 --kv-heads 4 --docs 30,50,56 --balance dynamic --pass prefill --strategies ring"
  "p6_balance_dynamic_noncausal            6  1 --model tiny --seq 132 --heads 6 --kv-heads 3 --docs 90,13,29 --no-causal --balance dynamic --cp-cap 10 --strategies ring"
  "p8_balance_dynamic_outlier_window       8  1 --model tiny --seq 160 --heads 8 --kv-heads 4 --docs outlier --window 12 --balance dynamic --cp-cap 8 --strategies ring"
)
list(APPEND _verify_matrix
  # --sinks (attention sinks, bench/parts/attn_sinks.h): each query row's sink counted once, after
  # whatever merged its partials, on every strategy and mesh against single at 1e-5 (dsinks among
  # the gradients): P = 2, 3, 4, 6, 8; causal, window, documents; train, prefill (pass-Q, q-a2a,
  # cached, a double ring's rounds), decode (the ring's merge, usp's double ring level),
  # --balance dynamic's groups; bf16 with the whole block at 2e-2. The dump test below checks them
  # against float64.
  "p2_sinks_window                         2  8 --model tiny --seq 100 --heads 4 --kv-heads 2 --window 30 --sinks"
  "p3_sinks_docs_noncausal                 3  8 --model tiny --seq 150 --heads 6 --kv-heads 3 --docs 40,50,60 --no-causal --sinks"
  "p4_sinks_window_docs_mesh_b2            4 15 --model tiny --seq 136 --heads 8 --kv-heads 2 --window 20 --docs random:10:60 --batch 2 --strategies ${_all},ring,ring-striped,double-ring --mesh all --sinks"
  "p6_sinks_docs_mesh_usp_double           6 19 --model tiny --seq 144 --heads 6 --kv-heads 3 --docs 30,42,72 --strategies ${_all},double-ring --mesh all --usp-ring double --sinks"
  "p8_sinks_window_docs_mesh_ringinner     8 19 --model tiny --seq 160 --heads 8 --kv-heads 4 --window 24 --docs equal:5 --strategies ${_all},ring,double-ring --mesh all --placement ring-inner --sinks"
  "p4_sinks_pass_q_a2a_docs                4  3 --model tiny --seq 136 --heads 8 --kv-heads 4 --docs 30,50,56 --pass prefill --ring-pass q-a2a --strategies ring,ring-zigzag,ring-striped --sinks"
  "p4_sinks_cached_pass_q_usp_double_b2    4 13 --model tiny --seq 256 --cached 128 --batch 2 --pass prefill --ring-pass q --mesh all --strategies usp,double-ring --usp-ring double --heads 8 --kv-heads 2 --sinks"
  "p4_sinks_balance_greedy_pass_q          4 14 --model tiny --seq 136 --heads 8 --kv-heads 4 --docs 30,50,56 --window 24 --balance greedy --pass prefill --ring-pass q --strategies ring,double-ring,usp --usp-ring double --mesh all --sinks"
  "p8_sinks_decode_window_mesh             8 19 --model tiny --cached 160 --decode-steps 11 --heads 8 --kv-heads 2 --window 24 --pass decode --strategies ring,ring-zigzag,ring-striped,double-ring,megatron-sp,usp,ulysses --mesh all --sinks"
  "p4_sinks_balance_dynamic_b2             4  1 --model tiny --seq 136 --heads 8 --kv-heads 4 --batch 2 --docs 30,50,56 --window 20 --balance dynamic --cp-cap 16 --strategies ring --sinks"
  "p4_sinks_bf16_block_full_mesh           4 11 --model tiny --seq 96 --heads 8 --kv-heads 2 --dtype bf16 --strategies ${_all},ring --mesh all --block full --sinks"
  # --partial-dtype / --acc-dtype bf16 (issue 42): the K,V ring's running output rounded at every
  # merge, its dK,dV accumulators at every hop; the ring family and usp's single ring level against
  # single at bf16's 2e-2, P = 4 and 8, with a window and documents at P = 8.
  "p4_bf16_partial_acc_mesh                4 10 --model tiny --seq 128 --heads 8 --kv-heads 2 --dtype bf16 --partial-dtype bf16 --acc-dtype bf16 --strategies ring,ring-zigzag,ring-striped,usp,ulysses --mesh all"
  "p8_bf16_acc_window_docs                 8  3 --model tiny --seq 160 --heads 8 --kv-heads 4 --dtype bf16 --acc-dtype bf16 --window 40 --docs 60,100 --strategies ring,ring-zigzag,usp --ulysses 2"
  # pass-Q's and decode's partials in bf16 (--partial-dtype bf16): o rounded at every merge and
  # travelling at s_part = 2 (pass-Q's q and q-a2a on the single ring, the double ring and usp's
  # ring levels; decode's all-gathers on every mesh, the double ring level, Helix's all-to-all).
  "p4_bf16_partial_pass_q_mesh             4 16 --model tiny --seq 128 --heads 8 --kv-heads 2 --dtype bf16 --partial-dtype bf16 --pass prefill --ring-pass q --strategies ring,ring-zigzag,ring-striped,double-ring,usp --usp-ring double --mesh all"
  "p8_bf16_partial_decode_mesh             8 19 --model tiny --cached 160 --decode-steps 5 --heads 8 --kv-heads 2 --dtype bf16 --partial-dtype bf16 --pass decode --strategies ring,ring-zigzag,ring-striped,double-ring,megatron-sp,usp,ulysses --usp-ring double --mesh all"
  "p4_bf16_partial_decode_helix_sinks      4  2 --model tiny --block full --cached 64 --decode-steps 3 --heads 8 --kv-heads 2 --dtype bf16 --partial-dtype bf16 --pass decode --mlp-tp 4 --strategies ring,usp --ulysses 2 --sinks"
  "p3_bf16_partial_q_a2a_cached_window     3  3 --model tiny --seq 150 --cached 60 --heads 6 --kv-heads 3 --dtype bf16 --partial-dtype bf16 --pass prefill --ring-pass q-a2a --window 40 --strategies ring,ring-zigzag,ring-striped"
  "p8_bf16_acc_double_ring_allgather_kv    8 25 --model tiny --seq 256 --heads 8 --kv-heads 2 --dtype bf16 --acc-dtype bf16 --strategies double-ring,allgather-kv,usp --usp-ring double --mesh all"
  # --uneven-heads (issue 43): Ulysses members take floor(u*H/U).. query heads and the KV heads those
  # use (a straddled KV head held by two members), against single at 1e-5: P = 2, 3, 4, 6, 8; MQA,
  # GQA with straddles (H 6 / G 3 over 4, H 9 / G 3 over 2), a tp level under it (t3xu2: 3 heads over
  # 2), causal, window + documents and non-causal, B = 2, prefill (--cached with pass-Q on the double
  # ring) with sinks, bf16 with the whole block, decode (the merged o gathered in uneven shares; the
  # cache's straddled KV heads exported once) with a window and sinks.
  "p2_uneven_heads_docs                    2  3 --model tiny --seq 100 --heads 3 --kv-heads 1 --docs 30,70 --strategies ulysses,usp --mesh all --uneven-heads"
  "p2_uneven_heads_bf16_block_full         2  2 --model tiny --seq 64 --heads 3 --kv-heads 1 --head-dim 16 --dim 48 --ffn-dim 64 --dtype bf16 --block full --strategies ulysses,usp --ulysses 2 --uneven-heads"
  "p3_uneven_heads_mqa_window_docs         3  3 --model tiny --seq 150 --heads 5 --kv-heads 1 --window 30 --docs 40,50,60 --strategies ulysses,usp --mesh all --uneven-heads"
  "p4_uneven_heads_cached_pass_q_sinks     4  6 --model tiny --seq 256 --cached 128 --pass prefill --ring-pass q --heads 6 --kv-heads 3 --strategies usp --usp-ring double --mesh all --sinks --uneven-heads"
  "p6_uneven_heads_tp_noncausal            6  7 --model tiny --seq 144 --heads 9 --kv-heads 3 --no-causal --strategies ulysses,usp --mesh all --uneven-heads"
  "p8_uneven_heads_b2                      8  5 --model tiny --seq 160 --heads 6 --kv-heads 2 --batch 2 --strategies usp --mesh all --uneven-heads"
  "p6_uneven_heads_decode_window_sinks     6  7 --model tiny --cached 144 --decode-steps 7 --heads 9 --kv-heads 3 --dim 48 --window 40 --pass decode --strategies usp,ulysses --mesh all --sinks --uneven-heads"
  # --attention mla (expanded travel): every strategy and mesh (tp levels included), with a query rank
  # (tiny-mla: d 12 = 8 + 4 rope, d_v 8) and without (deepseek-v2-lite at D 64: r_kv 512, d 192,
  # d_v 128); masks, B = 2, bf16/fp16 with bf16 partials and accumulators, the block, pass-Q and
  # q-a2a, balance greedy and dynamic, sinks, uneven heads.
  "p2_mla_docs_mesh                        2 11 --model tiny-mla --seq 64 --docs 20,44 --mesh all"
  "p2_mla_uneven_heads                     2  3 --model tiny-mla --heads 3 --seq 64 --strategies ulysses,usp --mesh all --uneven-heads"
  "p3_mla_no_q_rank_window                 3 11 --model deepseek-v2-lite --dim 64 --heads 3 --seq 96 --window 30 --mesh all"
  "p3_mla_fp16_block_full                  3 11 --model tiny-mla --heads 6 --seq 96 --block full --docs 30,66 --dtype fp16 --acc-dtype bf16 --partial-dtype bf16 --mesh all"
  "p4_mla_bf16_pass_q_mesh                 4  9 --model tiny-mla --seq 128 --dtype bf16 --pass prefill --ring-pass q --strategies ring,ring-zigzag,ring-striped,double-ring,usp --mesh all"
  "p4_mla_q_a2a_window_sinks               4  6 --model tiny-mla --seq 128 --window 40 --pass prefill --ring-pass q-a2a --strategies ring,ring-zigzag,ring-striped,usp --mesh all --sinks"
  "p4_mla_balance_dynamic                  4  1 --model tiny-mla --seq 128 --docs 20,50,30,28 --balance dynamic --strategies ring"
  "p6_mla_noncausal_b2                     6 19 --model tiny-mla --heads 6 --seq 144 --no-causal --batch 2 --mesh all"
  "p8_mla_balance_greedy                   8 15 --model tiny-mla --heads 8 --seq 160 --docs 40,70,50 --balance greedy --strategies ring,double-ring,usp --mesh all"
  # --mla-travel latent on every strategy that runs it (the ring family: the latent circulates, each
  # receiver up-projects; ulysses and usp: the latent all-gathered, each member up-projecting its
  # heads, and circulated by usp's ring level; dk, dv and k, v are not formed on the tokens' owners,
  # the up-projections' gradients, y and dx check the path): documents, a window without a query
  # rank, fp16 with bf16 accumulators, the block, sinks and usp's double ring, prefill, non-causal
  # B = 2, greedy balance, usp's tp levels in bf16.
  "p2_mla_latent_docs                      2  8 --model tiny-mla --seq 64 --docs 20,44 --mla-travel latent --mesh all"
  "p3_mla_latent_no_q_rank_window          3  8 --model deepseek-v2-lite --dim 64 --heads 3 --seq 96 --window 30 --mla-travel latent --mesh all"
  "p4_mla_latent_fp16_block_full_sinks     4 13 --model tiny-mla --seq 128 --block full --dtype fp16 --acc-dtype bf16 --sinks --mla-travel latent --usp-ring double --mesh all"
  "p4_mla_latent_prefill_window            4 10 --model tiny-mla --seq 128 --pass prefill --window 40 --mla-travel latent --mesh all"
  "p6_mla_latent_noncausal_b2              6 12 --model tiny-mla --heads 6 --seq 144 --no-causal --batch 2 --mla-travel latent --mesh all"
  "p8_mla_latent_balance_greedy            8  9 --model tiny-mla --heads 8 --seq 160 --docs 40,70,50 --balance greedy --mla-travel latent --strategies ring,double-ring,usp --mesh all"
  "p8_mla_latent_tp_bf16                   8 10 --model tiny-mla --heads 8 --seq 128 --dtype bf16 --mla-travel latent --strategies usp --mesh all"
  # MLA's decode: the absorbed form over a cache of latents [c_kv | k_R] (values read inside the
  # key rows), the output up-projected before the merge: every decode strategy and mesh with B = 2,
  # a window and sinks; bf16 with bf16 partials and usp's double ring level; Helix (--mlp-tp P)
  # under the whole block; uneven heads; deepseek-v2-lite's real widths (latent 576, d 192, d_v 128).
  "p4_mla_decode_mesh_window_sinks         4 14 --model tiny-mla --pass decode --cached 128 --decode-steps 5 --batch 2 --window 40 --sinks --mesh all"
  "p6_mla_decode_bf16_double               6 17 --model tiny-mla --heads 6 --pass decode --cached 144 --decode-steps 7 --dtype bf16 --partial-dtype bf16 --strategies ring,double-ring,usp --usp-ring double --mesh all"
  "p4_mla_decode_helix_full                4  2 --model tiny-mla --block full --pass decode --cached 64 --decode-steps 3 --mlp-tp 4 --strategies ring,usp --ulysses 2"
  "p2_mla_decode_uneven_heads              2  3 --model tiny-mla --heads 3 --pass decode --cached 64 --decode-steps 3 --strategies ulysses,usp --mesh all --uneven-heads"
  "p3_mla_decode_lite                      3  8 --model deepseek-v2-lite --dim 64 --heads 3 --pass decode --cached 96 --decode-steps 4 --mesh all"
  # --dtype fp8 (issue 42; forward only): q, k, v cast to e4m3 where they are formed, P in e4m3,
  # against single at 2^-4: prefill on every strategy and mesh with a window and documents (block
  # scales), decode with B = 2, sinks and bf16 partials (tensor scales), cached q-a2a pass-Q.
  "p4_fp8_prefill_mesh_window_docs         4 15 --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --dtype fp8 --pass prefill --window 40 --docs 50,78 --strategies ${_all},ring,ring-striped,double-ring --mesh all"
  "p4_fp8_tensor_decode_mesh_sinks         4 14 --model tiny --cached 128 --decode-steps 5 --heads 8 --kv-heads 2 --head-dim 32 --batch 2 --dtype fp8 --fp8-scaling tensor --partial-dtype bf16 --pass decode --sinks --strategies ring,ring-zigzag,ring-striped,double-ring,megatron-sp,usp,ulysses --mesh all"
  "p3_fp8_tensor_q_a2a_cached              3  3 --model tiny --seq 150 --cached 60 --heads 6 --kv-heads 3 --head-dim 32 --dtype fp8 --fp8-scaling tensor --pass prefill --ring-pass q-a2a --partial-dtype bf16 --strategies ring,ring-zigzag,ring-striped"
  # --comm-dtype (issue 42): the K,V ring blocks travel encoded (the owner computes on its own block
  # as formed, the others on the decoded one): fp8 with block and tensor scales and bf16 transit of
  # an fp32 run, train (both passes move them) and cached prefill, with GQA, B = 2, a window, documents,
  # balance and --acc-dtype bf16; against single at the format's bound (fp8 2^-4, bf16 2e-2).
  "p4_comm_fp8_train_docs_balance          4  1 --model tiny --seq 128 --batch 2 --heads 8 --kv-heads 2 --head-dim 32 --dtype bf16 --comm-dtype fp8 --acc-dtype bf16 --docs 50,78 --balance greedy --strategies ring"
  "p4_comm_fp8_tensor_train_window         4  4 --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --comm-dtype fp8 --fp8-scaling tensor --window 40 --strategies ring,ring-zigzag,ring-striped,allgather-kv"
  "p3_comm_bf16_cached_prefill             3  3 --model tiny --seq 150 --cached 60 --comm-dtype bf16 --pass prefill --strategies ring,ring-zigzag,ring-striped"
  "p4_comm_fp8_usp_mesh_window             4  6 --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --dtype bf16 --comm-dtype fp8 --window 40 --strategies usp --mesh all"
  "p4_comm_bf16_usp_cached_prefill         4  1 --model tiny --seq 128 --cached 64 --comm-dtype bf16 --pass prefill --strategies usp --ulysses 2"
  # ... and the Q blocks of pass-Q (--ring-pass q, q-a2a): encoded by their owner, decoded by every
  # rank they visit; the ring family and usp's single ring level, a window, cached q-a2a in bf16.
  "p4_comm_fp8_pass_q                      4  6 --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --dtype bf16 --comm-dtype fp8 --pass prefill --ring-pass q --window 40 --strategies ring,ring-zigzag,ring-striped,usp --mesh all"
  "p3_comm_bf16_pass_q_a2a_cached          3  3 --model tiny --seq 150 --cached 60 --comm-dtype bf16 --pass prefill --ring-pass q-a2a --strategies ring,ring-zigzag,ring-striped"
  # ... and the double ring's K,V blocks (double-ring, usp --usp-ring double; DoubleRingCore's
  # buffers encoded, its steps decode): every w and mesh, train with a window, cached prefill in bf16.
  "p4_comm_fp8_double_ring_window          4 13 --model tiny --seq 128 --heads 8 --kv-heads 2 --head-dim 32 --dtype bf16 --comm-dtype fp8 --window 40 --strategies double-ring,usp --usp-ring double --mesh all"
  "p4_comm_bf16_double_ring_cached         4  3 --model tiny --seq 128 --cached 64 --comm-dtype bf16 --pass prefill --strategies double-ring --mesh all"
)
foreach(_row IN LISTS _verify_matrix)
  separate_arguments(_args UNIX_COMMAND "${_row}")
  list(POP_FRONT _args _name _np _min)
  cpbench_verify_test(${_name} ${_np} --min-verified ${_min} ${_args})
endforeach()

# The masked layer of every strategy against an independent float64 NumPy recomputation that
# rebuilds the mask and the per-document RoPE positions from meta.json.
add_test(NAME dump_p4_float64_masks
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_masks && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --seq 112 --heads 4 --kv-heads 2 --batch 2 --window 20 --docs 30,50,32 --dump ${CPBENCH_TEST_OUT}/dump_masks && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_masks")
set_tests_properties(dump_p4_float64_masks PROPERTIES LABELS "mpi;verify" TIMEOUT 600)

# single's whole block (--block full) against the float64 NumPy recomputation of check_dump.py.
add_test(NAME dump_p4_float64_block_full
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_block && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --block full --seq 64 --heads 4 --kv-heads 2 --head-dim 16 --dim 64 --ffn-dim 96 --batch 2 --strategies megatron-sp,usp,ring-zigzag --dump ${CPBENCH_TEST_OUT}/dump_block && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_block && grep -q '\"block\": \"full\"' ${CPBENCH_TEST_OUT}/dump_block/single/meta.json && test -f ${CPBENCH_TEST_OUT}/dump_block/megatron-sp/dw_down.npy")
set_tests_properties(dump_p4_float64_block_full PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# Dumps under --cached prefill and decode: the new tokens and k_cache, v_cache, every strategy
# against check_dump.py's float64 recomputation (the cache attended, RoPE at C.., decode causal).
add_test(NAME dump_p4_float64_cached_decode
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_cached ${CPBENCH_TEST_OUT}/dump_decode && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --pass prefill --seq 128 --cached 64 --window 40 --batch 2 --strategies ring-zigzag,double-ring,usp --ulysses 2 --dump ${CPBENCH_TEST_OUT}/dump_cached && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_cached && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --block full --pass decode --cached 64 --decode-steps 5 --heads 8 --kv-heads 2 --strategies ring,usp,megatron-sp --ulysses 2 --dump ${CPBENCH_TEST_OUT}/dump_decode && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_decode && test -f ${CPBENCH_TEST_OUT}/dump_decode/usp_u2xr2/k_cache.npy")
set_tests_properties(dump_p4_float64_cached_decode PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# --sinks against check_dump.py's float64 recomputation (the sink in each row's softmax, dsinks from
# it): training with documents and a window on every strategy and mesh, B = 2; decode with Helix
# (--mlp-tp 4: each owner's merged heads) and usp's Ulysses level.
add_test(NAME dump_p4_float64_sinks
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_sinks ${CPBENCH_TEST_OUT}/dump_sinks_decode && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --seq 112 --heads 8 --kv-heads 2 --batch 2 --window 20 --docs 30,50,32 --mesh all --sinks --dump ${CPBENCH_TEST_OUT}/dump_sinks && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_sinks && test -f ${CPBENCH_TEST_OUT}/dump_sinks/usp_u2xr2/dsinks.npy && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --block full --pass decode --cached 64 --decode-steps 3 --heads 8 --kv-heads 2 --mlp-tp 4 --strategies ring,usp --ulysses 2 --sinks --dump ${CPBENCH_TEST_OUT}/dump_sinks_decode && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_sinks_decode")
set_tests_properties(dump_p4_float64_sinks PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# --attention mla against check_dump.py's float64 MLA (latents, norms, up-projections, the shared
# rope key and its gradient summed over the heads): every strategy and mesh with documents, a window,
# sinks and B = 2 (tiny-mla, a query rank), without a query rank (deepseek-v2-lite at D 64), and
# under --mla-travel latent on a ring, a Ulysses level, usp's u2 x r2 and t2 x u2 (no k, v, dk, dv
# dumped: the tokens' owners never form them).
add_test(NAME dump_p4_float64_mla
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_mla ${CPBENCH_TEST_OUT}/dump_mla_lite && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny-mla --seq 64 --batch 2 --window 24 --docs 20,44 --mesh all --sinks --dump ${CPBENCH_TEST_OUT}/dump_mla && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_mla && test -f ${CPBENCH_TEST_OUT}/dump_mla/usp_u2xr2/dw_dq.npy && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model deepseek-v2-lite --dim 64 --heads 4 --seq 64 --strategies ring-zigzag,ulysses,allgather-kv --dump ${CPBENCH_TEST_OUT}/dump_mla_lite && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_mla_lite && test ! -e ${CPBENCH_TEST_OUT}/dump_mla_lite/ulysses/w_dq.npy && rm -rf ${CPBENCH_TEST_OUT}/dump_mla_latent && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny-mla --seq 64 --window 24 --sinks --mla-travel latent --strategies ring-zigzag,ulysses,usp --ulysses 2 --dump ${CPBENCH_TEST_OUT}/dump_mla_latent && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_mla_latent && test ! -e ${CPBENCH_TEST_OUT}/dump_mla_latent/ring-zigzag/dk.npy && test ! -e ${CPBENCH_TEST_OUT}/dump_mla_latent/ring-zigzag/k.npy && test -f ${CPBENCH_TEST_OUT}/dump_mla_latent/usp_u2xr2/dw_uk.npy && rm -rf ${CPBENCH_TEST_OUT}/dump_mla_latent_tp && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny-mla --seq 64 --batch 2 --docs 20,44 --mla-travel latent --strategies usp --tp 2 --ulysses 2 --dump ${CPBENCH_TEST_OUT}/dump_mla_latent_tp && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_mla_latent_tp && test -f ${CPBENCH_TEST_OUT}/dump_mla_latent_tp/usp_t2xu2xr1/dw_uk.npy")
set_tests_properties(dump_p4_float64_mla PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# MLA's decode against check_dump.py's float64 reference, which EXPANDS the dumped latent cache
# (k = [c_kv W_UK | k_R], v = c_kv W_UV per head) where cpbench runs the absorbed form: the ring
# family, usp and megatron-sp under the whole block with a window and sinks (tiny-mla), and
# deepseek-v2-lite's real widths (latent 576, d 192, d_v 128) on a ring and Ulysses.
add_test(NAME dump_p4_float64_mla_decode
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_mla_decode ${CPBENCH_TEST_OUT}/dump_mla_decode_lite && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny-mla --block full --pass decode --cached 64 --decode-steps 4 --batch 2 --window 40 --sinks --strategies ring-zigzag,double-ring,usp,megatron-sp --ulysses 2 --dump ${CPBENCH_TEST_OUT}/dump_mla_decode && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_mla_decode && test -f ${CPBENCH_TEST_OUT}/dump_mla_decode/usp_u2xr2/latent_cache.npy && test ! -e ${CPBENCH_TEST_OUT}/dump_mla_decode/usp_u2xr2/k.npy && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model deepseek-v2-lite --dim 64 --heads 4 --pass decode --cached 64 --decode-steps 3 --strategies ring,ulysses --dump ${CPBENCH_TEST_OUT}/dump_mla_decode_lite && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_mla_decode_lite")
set_tests_properties(dump_p4_float64_mla_decode PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# scripts/numerics.py end to end on a small shape (P = 1, 2, 4; bf16 with float32 and bf16
# accumulators; fp8's forward with block and tensor scales; K,V in transit as fp8): errors against float64 from
# layer_reference.py, and what the rounding points imply (tests/python/check_numerics.py).
add_test(NAME numerics_p4_bf16
         COMMAND sh -c "${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/numerics.py --cpbench ${CPBENCH_BIN} --mpirun ${MPIEXEC_EXECUTABLE} --P 1,2,4 --seq 256 --heads 4 --kv-heads 2 --head-dim 64 --dim 128 --seeds 1 --variants f32,bf16-acc,fp8-block,fp8-tensor,comm-fp8 --out ${CPBENCH_TEST_OUT}/numerics_p4.json --markdown ${CPBENCH_TEST_OUT}/numerics_p4.md && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_numerics.py ${CPBENCH_TEST_OUT}/numerics_p4.json")
set_tests_properties(numerics_p4_bf16 PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
# cpbench verify --numerics (bench/numerics.h): a bf16 run over two seeds (window, documents, sinks;
# every family) reproduced figure by figure in float64 by check_dump.py from its dump, and an fp32
# run; tests/python/check_numerics.py --report says what the rounding points imply; numerics.py renders
# the report (--from-reports) and runs its verify engine (two seeds, one strategy).
add_test(NAME numerics_verify_p4
         COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_numerics && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --seq 128 --dtype bf16 --numerics 2 --window 40 --docs 32,64,32 --sinks --strategies ring,ring-zigzag,double-ring,ulysses,usp,allgather-kv --ulysses 2 --inner-ring 2 --dump ${CPBENCH_TEST_OUT}/dump_numerics --out ${CPBENCH_TEST_OUT}/numerics_verify_bf16.json && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --seq 64 --numerics 1 --strategies ring-zigzag,ulysses,allgather-kv --out ${CPBENCH_TEST_OUT}/numerics_verify_fp32.json && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/validate_report.py ${CPBENCH_TEST_OUT}/numerics_verify_bf16.json ${CPBENCH_TEST_OUT}/numerics_verify_fp32.json && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_numerics.py --report ${CPBENCH_TEST_OUT}/numerics_verify_bf16.json --dump ${CPBENCH_TEST_OUT}/dump_numerics --fp32-report ${CPBENCH_TEST_OUT}/numerics_verify_fp32.json && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/numerics.py --from-reports ${CPBENCH_TEST_OUT}/numerics_verify_bf16.json --spread --markdown ${CPBENCH_TEST_OUT}/numerics_verify.md && grep -q '^| ring-zigzag | f32 | [0-9.]* ([0-9.]*) \\[' ${CPBENCH_TEST_OUT}/numerics_verify.md && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/numerics.py --cpbench ${CPBENCH_BIN} --mpirun ${MPIEXEC_EXECUTABLE} --engine verify --P 2 --seq 64 --heads 4 --kv-heads 2 --head-dim 16 --dim 64 --seeds 1,2 --variants f32 --strategies ring --spread --markdown ${CPBENCH_TEST_OUT}/numerics_engine_verify.md && grep -q '^| ring | f32 | [0-9.]* ([0-9.]*) \\[' ${CPBENCH_TEST_OUT}/numerics_engine_verify.md")
set_tests_properties(numerics_verify_p4 PROPERTIES LABELS "mpi;verify" TIMEOUT 300)
# ... under --pass prefill (verify runs its backward too: the float64 reference then has the
# gradients; it had only o and a lookup failed) with pass-Q's Q blocks in transit as fp8: o, dq,
# dk, dv per result, and the fp8 Q costs o accuracy (ratio to single > 1.5; 2.8 measured).
set(_nq ${CPBENCH_TEST_OUT}/numerics_prefill_pass_q.json)
add_test(NAME numerics_verify_prefill_pass_q_p4
         COMMAND sh -c "rm -f ${_nq} && ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4 ${CPBENCH_BIN} verify --no-progress --model tiny --seq 256 --heads 8 --kv-heads 2 --head-dim 64 --dim 512 --dtype bf16 --pass prefill --ring-pass q --comm-dtype fp8 --numerics 2 --strategies ring-zigzag,usp --ulysses 2 --out ${_nq} && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/validate_report.py ${_nq} && ${Python3_EXECUTABLE} -c \"import json,sys; r=[x for x in json.load(open('${_nq}'))['results'] if x['strategy'] != 'single']; t=[sorted(x['numerics']['tensors']) for x in r]; o=[x['numerics']['tensors']['o']['ratio']['median'] for x in r]; print(t, o); sys.exit(0 if len(r) == 2 and all(n == ['dk', 'dq', 'dv', 'o'] for n in t) and min(o) > 1.5 else 1)\"")
set_tests_properties(numerics_verify_prefill_pass_q_p4 PROPERTIES LABELS "mpi;verify" TIMEOUT 300)
cpbench_fail_test(numerics_run 2 "numerics=2 applies to cpbench verify only" run --model tiny --seq 64 --numerics 2)
cpbench_fail_test(numerics_decode 2 "numerics=2 compares every token's attention with float64: not with pass=decode" verify --model tiny --cached 64 --pass decode --numerics 2)
cpbench_fail_test(numerics_negative 2 "--numerics must be >= 0, got -1" verify --model tiny --seq 64 --numerics -1)
# What travels in bf16 (--partial-dtype, --acc-dtype): a 16-bit run, the passes and schedules that round it.
# --uneven-heads: a tp level still needs divisibility, a Ulysses member at least one head, Helix even shares.
cpbench_fail_test(uneven_heads_megatron_sp 4 "megatron-sp: P=4 does not divide heads=6 \\(its tp level splits w_qkv by heads; --uneven-heads splits a Ulysses level only" run --model tiny --seq 64 --heads 6 --kv-heads 3 --strategies megatron-sp --uneven-heads)
cpbench_fail_test(uneven_heads_too_few 4 "ulysses: ulysses=4 exceeds the 3 query heads \\(--uneven-heads: every Ulysses member takes at least one\\)" run --model tiny --seq 64 --heads 3 --kv-heads 1 --strategies ulysses --uneven-heads)
cpbench_fail_test(uneven_heads_helix 4 "usp: Helix decode \\(--mlp-tp 4 = P\\) splits each member's heads evenly over the merge level; it does not run --uneven-heads" run --model tiny --block full --cached 64 --pass decode --heads 8 --kv-heads 2 --strategies usp --ulysses 2 --mlp-tp 4 --uneven-heads)
cpbench_fail_test(acc_dtype_fp32_run 2 "--acc-dtype bf16 rounds what a 16-bit run keeps in float32: it needs --dtype bf16 or fp16 \\(got dtype=fp32\\)" run --model tiny --seq 64 --acc-dtype bf16)
cpbench_fail_test(acc_dtype_prefill 2 "--acc-dtype bf16 rounds the backward's dK,dV accumulators: it needs --pass train \\(got pass=prefill\\)" run --model tiny --seq 64 --dtype bf16 --pass prefill --acc-dtype bf16)
cpbench_fail_test(partial_dtype_pass_q_odd_d 2 "--partial-dtype bf16 under --ring-pass q sends each bf16 o with its float32 lse in one message: it needs an even head_dim \\(got head_dim=15\\)" run --model tiny --seq 64 --head-dim 15 --dtype bf16 --pass prefill --ring-pass q --partial-dtype bf16)
cpbench_fail_test(partial_dtype_decode_odd_d 2 "--partial-dtype bf16 under --pass decode sends each bf16 o with its float32 lse in one message: it needs an even head_dim \\(got head_dim=15\\)" run --model tiny --cached 64 --head-dim 15 --dtype bf16 --pass decode --partial-dtype bf16)
cpbench_fail_test(acc_dtype_unknown 2 "--acc-dtype must be f32 or bf16, got .fp8." run --model tiny --seq 64 --dtype bf16 --acc-dtype fp8)
cpbench_fail_test(acc_dtype_balance_dynamic 2 "ring: --acc-dtype bf16 rounds the accumulators of a single or double ring; a ring per CP group \\(--balance dynamic\\) keeps them float32" run --model tiny --seq 64 --dtype bf16 --acc-dtype bf16 --docs 20,44 --balance dynamic --strategies ring)
# --attention mla: what is not built (a KV cache; latent travel beyond the single rings) and what does
# not apply (GQA's head options, a GQA preset, --mla-travel without MLA, latent travel with pass-Q,
# the DeepSeek presets' MoE FFNs).
cpbench_fail_test(mla_kv_heads 2 "--attention mla: its key heads and head dims are the preset's .*do not give --kv-heads or --head-dim \\(got kv_heads=2, head_dim=0\\)" run --model tiny-mla --seq 64 --kv-heads 2)
cpbench_fail_test(mla_gqa_preset 2 "--attention mla takes its ranks and head dims from an MLA model preset .*model 'tiny' has none" run --model tiny --seq 64 --attention mla)
cpbench_fail_test(mla_preset_as_gqa 2 "model 'deepseek-v3' is an MLA model: --attention gqa has no heads to take from it" run --model deepseek-v3 --seq 64 --attention gqa)
cpbench_fail_test(mla_travel_without_mla 2 "--mla-travel expanded chooses what MLA's levels move: it needs --attention mla \\(got attention=gqa\\)" run --model tiny --seq 64 --mla-travel expanded)
cpbench_fail_test(mla_moe_block_full 2 "model 'deepseek-v3': its feed-forward layers are mixtures of experts, which --block full does not model" run --model deepseek-v3 --seq 64 --block full)
cpbench_fail_test(mla_latent_allgather_kv 2 "allgather-kv: --mla-travel latent is built for ulysses, ring, ring-zigzag, ring-striped, usp, double-ring only" run --model tiny-mla --seq 64 --mla-travel latent --strategies allgather-kv)
cpbench_fail_test(mla_latent_uneven_heads 2 "usp: --mla-travel latent splits the heads evenly over the Ulysses level; it does not run --uneven-heads" run --model tiny-mla --heads 3 --seq 64 --mla-travel latent --strategies usp --ulysses 2 --uneven-heads)
cpbench_fail_test(mla_latent_pass_q 2 "ring: --mla-travel latent circulates the K,V latent: --ring-pass q moves queries instead" run --model tiny-mla --seq 64 --mla-travel latent --strategies ring --pass prefill --ring-pass q)
cpbench_fail_test(mla_cached_prefill 2 "--attention mla with --cached prefill is not built \\(MLA's cache holds latents: --pass decode reads them; got pass=prefill, cached=32\\)" run --model tiny-mla --seq 64 --pass prefill --cached 32)
cpbench_fail_test(mla_travel_decode 2 "--mla-travel latent chooses what a training or prefill level moves; --pass decode moves no keys" run --model tiny-mla --pass decode --cached 64 --mla-travel latent)
# --dtype fp8: the forward only, on the cpu backend, not with MLA, block scales need head_dim % 32 == 0.
cpbench_fail_test(fp8_train 2 "--dtype fp8 defines attention's forward only \\(FlashAttention-3's fp8 kernels\\): it needs --pass prefill or decode \\(got pass=train\\)" run --model tiny --seq 64 --head-dim 32 --dtype fp8)
cpbench_fail_test(fp8_mla 2 "--dtype fp8 with --attention mla is not built" run --model tiny-mla --seq 64 --dtype fp8 --pass prefill)
cpbench_fail_test(fp8_block_head_dim 2 "--fp8-scaling block scales each 32 elements of a head's row: it needs head_dim a multiple of 32 \\(got head_dim=16\\); use --fp8-scaling tensor" run --model tiny --seq 64 --dtype fp8 --pass prefill)
cpbench_fail_test(fp8_scaling_unused 2 "--fp8-scaling tensor chooses fp8's scales: it needs --dtype fp8 or --comm-dtype fp8 \\(got dtype=bf16, comm_dtype=run\\)" run --model tiny --seq 64 --dtype bf16 --fp8-scaling tensor)
cpbench_fail_test(fp8_scaling_unknown 2 "--fp8-scaling must be block or tensor, got \"row\"" run --model tiny --seq 64 --dtype fp8 --pass prefill --fp8-scaling row)
# --comm-dtype: a single K,V ring of the ring family, K,V travel, not the run's own dtype, fp8 off cuda.
cpbench_fail_test(comm_dtype_double_ring_pass_q 4 "double-ring: --comm-dtype encodes a double ring's K,V blocks; its pass-Q loop moves Q blocks in the run dtype \\(not built yet: use a single ring, or --ring-pass kv\\)" run --model tiny --seq 64 --head-dim 32 --comm-dtype fp8 --pass prefill --ring-pass q --strategies double-ring)
cpbench_fail_test(comm_dtype_megatron_sp 4 "megatron-sp: --comm-dtype fp8 is built for ring, ring-zigzag, ring-striped, double-ring, usp and allgather-kv only \\(a K,V ring or gather\\)" run --model tiny --seq 64 --head-dim 32 --comm-dtype fp8 --strategies megatron-sp)
cpbench_fail_test(comm_dtype_ulysses 4 "ulysses: --comm-dtype fp8 is built for ring, ring-zigzag, ring-striped, double-ring, usp and allgather-kv only" run --model tiny --seq 64 --head-dim 32 --comm-dtype fp8 --strategies ulysses)
cpbench_fail_test(comm_dtype_balance_dynamic 2 "ring: --comm-dtype encodes the blocks of a single or double ring; a ring per CP group \\(--balance dynamic\\) moves them in the run dtype" run --model tiny --seq 64 --comm-dtype bf16 --docs 20,44 --balance dynamic --strategies ring)
cpbench_fail_test(comm_dtype_decode 2 "--comm-dtype fp8 chooses what a ring block .K,V, or Q under pass-Q. travels as; --pass decode moves no keys" run --model tiny --head-dim 32 --cached 64 --pass decode --comm-dtype fp8)
cpbench_fail_test(comm_dtype_own 2 "--comm-dtype bf16 is the bf16 run's own: K,V travel as bf16 already" run --model tiny --seq 64 --dtype bf16 --comm-dtype bf16)
cpbench_fail_test(comm_dtype_mla 2 "--comm-dtype fp8 with --attention mla is not built" run --model tiny-mla --seq 64 --comm-dtype fp8)
cpbench_fail_test(comm_dtype_block_head_dim 2 "--comm-dtype fp8 with --fp8-scaling block scales each 32 values of a head's row: it needs head_dim a multiple of 32 \\(got head_dim=16\\)" run --model tiny --seq 64 --comm-dtype fp8)
# Bad block options: refused on every rank before any work, naming the flag and the value.
cpbench_fail_test(block_full_without_ffn_dim 2 "block=full needs the MLP width: --ffn-dim F" run --model tiny --dim 80 --seq 64 --block full)
cpbench_fail_test(ffn_dim_zero 2 "--ffn-dim must be positive, got 0" run --model tiny --seq 64 --ffn-dim 0)
cpbench_fail_test(ring_pass_q_train 2 "--ring-pass q circulates query blocks in the forward only: it needs --pass prefill \\(got pass=train\\)" run --model tiny --seq 64 --ring-pass q)
cpbench_fail_test(ring_pass_q_ulysses 2 "ulysses: --ring-pass q is built for the ring family only" run --model tiny --seq 64 --pass prefill --ring-pass q --strategies ring,ulysses)
cpbench_fail_test(ring_pass_unknown 2 "--ring-pass must be kv, q or q-a2a, got \"x\"" run --model tiny --seq 64 --pass prefill --ring-pass x)
cpbench_fail_test(cached_train 2 "--cached 32 is an inference cache: it needs --pass prefill or decode \\(got pass=train\\)" run --model tiny --seq 64 --cached 32)
cpbench_fail_test(cached_whole_seq 2 "--cached 64 must be less than seq=64 \\(prefill needs at least one new token\\)" run --model tiny --seq 64 --pass prefill --cached 64)
cpbench_fail_test(cached_allgather_kv 2 "allgather-kv: --cached 32 is built for the ring family only" run --model tiny --seq 64 --pass prefill --cached 32 --strategies ring,allgather-kv)
cpbench_fail_test(cached_megatron_sp 2 "megatron-sp: --cached 32 is built for the ring family only" run --model tiny --seq 64 --pass prefill --cached 32 --strategies megatron-sp)
cpbench_fail_test(cached_docs 2 "--cached 32 is built for one sequence whose prefix is cached: not with --docs or --balance \\(docs='32,32' balance=none\\)" run --model tiny --seq 64 --pass prefill --cached 32 --docs 32,32)
cpbench_fail_test(cached_shard 4 "ring: cached=30 is not divisible by P=4: each rank holds an equal cache shard" run --model tiny --seq 64 --pass prefill --cached 30 --strategies ring)
cpbench_fail_test(cached_zigzag_new_tokens 4 "ring-zigzag: seq=12 is not divisible by 2\\*P=8: the layout holds the seq - cached = 12 new tokens \\(--cached 64 of seq=76\\)" run --model tiny --seq 76 --pass prefill --cached 64 --strategies ring-zigzag)
cpbench_fail_test(decode_no_cache 2 "--pass decode reads a KV cache: it needs --cached C > 0 \\(got cached=0\\)" run --model tiny --pass decode)
cpbench_fail_test(decode_seq 2 "--pass decode: seq is the cached length, so --seq must equal --cached 64 \\(got seq=128: omit --seq\\)" run --model tiny --seq 128 --pass decode --cached 64)
cpbench_fail_test(decode_steps_train 2 "--decode-steps 4 applies to --pass decode only \\(got pass=prefill\\)" run --model tiny --seq 64 --pass prefill --decode-steps 4)
cpbench_fail_test(decode_allgather_kv 2 "allgather-kv: --pass decode is built for the ring family, usp, ulysses and megatron-sp only" run --model tiny --pass decode --cached 64 --strategies ring,allgather-kv)
cpbench_fail_test(decode_usp_tp_heads 4 "usp: tp=4 does not divide heads=6 \\(w_qkv is split by heads\\)" run --model tiny --block full --pass decode --cached 64 --heads 6 --kv-heads 3 --strategies usp --tp 4)
cpbench_fail_test(decode_usp_tp_ffn 4 "usp: tp=4 does not divide ffn_dim=90" run --model tiny --block full --ffn-dim 90 --pass decode --cached 64 --strategies usp --tp 4)
cpbench_fail_test(decode_megatron_sp_dim 4 "megatron-sp: P=4 does not divide dim=66 \\(--pass decode all-reduces each sub-layer's output as D/P columns per rank\\)" run --model tiny --dim 66 --pass decode --cached 64 --strategies megatron-sp)
cpbench_fail_test(decode_usp_ring_shard 4 "usp: cached=30 is not divisible by ring=4: each ring position holds an equal cache shard" run --model tiny --pass decode --cached 30 --strategies usp --ulysses 1 --ring 4)
cpbench_fail_test(decode_shard 4 "ring: cached=30 is not divisible by P=4: each rank holds an equal cache shard \\(--pass decode\\)" run --model tiny --pass decode --cached 30 --strategies ring)
cpbench_fail_test(block_unknown 2 "--block must be attn or full, got \"mlp\"" run --model tiny --seq 64 --block mlp)
cpbench_fail_test(megatron_ffn_dim 2 "megatron-sp: P=2 does not divide ffn_dim=97" run --model tiny --seq 64 --block full --ffn-dim 97 --strategies megatron-sp)

# Bad meshes and shapes: a clear message on every rank, non-zero exit, no hang.
cpbench_fail_test(usp_mesh_product 4 "usp: ulysses=3 x ring=2 = 6 ranks, but P=4" run --model tiny --seq 64 --strategies usp --ulysses 3 --ring 2)
cpbench_fail_test(usp_mesh_product_default 4 "usp: ulysses=3 x ring=2 = 6 ranks, but P=4" run --model tiny --seq 64 --ulysses 3 --ring 2)
cpbench_fail_test(usp_ulysses_kv 4 "usp: ulysses=4 and kv_heads=6: one must divide the other.*; use ulysses<=2" verify --model tiny --seq 64 --heads 12 --kv-heads 6 --strategies usp --ulysses 4)
# The hint names the largest degree the kv-head rule accepts: 4 (replicating 2 kv heads), not 2.
cpbench_fail_test(usp_ulysses_hint_replicated_kv 8 "usp: ulysses=8 does not divide heads=4; use ulysses<=4" run --model tiny --seq 64 --heads 4 --kv-heads 2 --strategies usp --ulysses 8)
cpbench_fail_test(usp_ulysses_heads 6 "usp: ulysses=3 does not divide heads=4" verify --model tiny --seq 96 --strategies usp --ulysses 3 --ring 2)
cpbench_fail_test(megatron_kv 4 "megatron-sp: P=4 and kv_heads=6: one must divide the other.*; use usp with ulysses<=2" run --model tiny --seq 64 --heads 12 --kv-heads 6 --strategies megatron-sp)
cpbench_fail_test(ulysses_heads 4 "ulysses: P=4 does not divide heads=6" run --model tiny --seq 64 --heads 6 --kv-heads 2 --strategies ulysses)
cpbench_fail_test(zigzag_seq 4 "ring-zigzag: seq=100 is not divisible by 2.P=8" run --model tiny --seq 100 --strategies ring-zigzag)
cpbench_fail_test(double_ring_seq 4 "double-ring: seq=100 is not divisible by 2.P=8" run --model tiny --seq 100 --strategies double-ring)
cpbench_fail_test(allgather_seq 3 "allgather-kv: seq=100 is not divisible by 2.P=6" run --model tiny --seq 100 --strategies allgather-kv)
cpbench_fail_test(mesh_all_with_ulysses 2 "--mesh all enumerates every t x U x R; do not also give --tp/--ulysses/--ring" run --model tiny --mesh all --ulysses 2)

# The ring core's steps with a truncated ring (hops = 0 .. R-1) against a local reference:
# outputs, the dK,dV accumulators' return to their owner, and bytes == RingCore's model.
if(CPBENCH_MPI)
  add_executable(test_ring_steps_mpi ${CMAKE_CURRENT_SOURCE_DIR}/test_ring_steps_mpi.cpp)
  target_link_libraries(test_ring_steps_mpi PRIVATE cpbench_lib cpbench_warnings)
  foreach(np 1 2 3 4 6)
    add_test(NAME ring_steps_np${np}
             COMMAND ${CPBENCH_EXPECT_PASS} "ring steps: [0-9]+ passed, 0 failed" --
                     ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --allow-run-as-root
                     ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_ring_steps_mpi> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(ring_steps_np${np} PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS ${np})
  endforeach()
endif()

# Vanishing gradients (the matrix's window-1 and one-token-document rows): the P = 4 window-1
# cases also check every dump against the float64 NumPy recomputation under the same rule
# (scripts/verify_bound.py).
set(_vanish_sh "--min-verified ${_vanish_min} ${_vanish}")  # for the sh -c command lines
list(JOIN CPBENCH_MPIRUN " " _mpirun_sh)
foreach(_c causal no-causal)
  add_test(NAME verify_p4_window1_${_c}
           COMMAND sh -c "rm -rf ${CPBENCH_TEST_OUT}/dump_window1_${_c} && ${_mpirun_sh} 4 ${CPBENCH_BIN} verify --no-progress ${_vanish_sh} --heads 4 --kv-heads 2 --window 1 --${_c} --dump ${CPBENCH_TEST_OUT}/dump_window1_${_c} && ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py ${CPBENCH_TEST_OUT}/dump_window1_${_c}")
  set_tests_properties(verify_p4_window1_${_c} PROPERTIES LABELS "mpi;verify" TIMEOUT 600)
endforeach()
# A vanishing gradient with a real error still fails: CPBENCH_TEST_PERTURB (test only) adds 1e-4
# to every element of each strategy's dk (about 2,500 times the rounding noise, error ~1.2e-4 of
# m). verify must exit 1 with a FAIL row on dk for all 8 strategies, and check_dump must fail
# the same 8 dumps on dk (8 + 8 lines).
add_test(NAME fail_verify_perturbed_vanishing_dk
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail_cmd.sh "^([^ ]+ +64 +FAIL +[^ ]+ +1[.]0e-05 +dk|[^ ]+: dk error=[^ ]+ > 1e-05)$" 16 --
                 sh -c "D=${CPBENCH_TEST_OUT}/dump_perturbed_dk; rm -rf $D; ${_mpirun_sh} 2 ${CPBENCH_BIN} verify --no-progress ${_vanish_sh} --heads 2 --kv-heads 2 --window 1 --dump $D; rc=$?; [ $rc -eq 1 ] || { echo \"verify exited $rc, expected 1\"; exit 0; }; ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_dump.py $D; [ $? -eq 1 ] || { echo 'check_dump did not fail'; exit 0; }; exit 1")
set_tests_properties(fail_verify_perturbed_vanishing_dk PROPERTIES LABELS "mpi;verify" TIMEOUT 180
                     ENVIRONMENT "CPBENCH_TEST_PERTURB=dk:1e-4")
# A malformed CPBENCH_TEST_PERTURB is bad input: exit 2 on every rank before any work, no report.
cpbench_fail_test(test_perturb_malformed 2 "CPBENCH_TEST_PERTURB='dz:1' .test only.: 'dz' is not a dumped tensor" verify --seq 64 --heads 2 --kv-heads 2 --head-dim 16)
set_tests_properties(fail_test_perturb_malformed PROPERTIES ENVIRONMENT "CPBENCH_TEST_PERTURB=dz:1")
# --balance: bad input.
cpbench_fail_test(balance_unknown 2 "--balance must be none, doc-zigzag, greedy or dynamic, got \"lpt\"" run --model tiny --seq 64 --balance lpt)
cpbench_fail_test(balance_ring_zigzag 2 "ring-zigzag: --balance greedy replaces its layout: the same layout as ring under --balance greedy" run --model tiny --seq 64 --balance greedy --strategies ring,ring-zigzag)
cpbench_fail_test(balance_usp_layout 2 "usp: --usp-layout zigzag and --balance greedy both choose the token layout; drop one" run --model tiny --seq 64 --balance greedy --strategies usp --usp-layout zigzag)
cpbench_fail_test(balance_double_ring_seq 4 "double-ring: seq=66 is not divisible by P=4 \\(--balance doc-zigzag: every rank holds seq/P tokens\\)" run --model tiny --seq 66 --balance doc-zigzag --strategies double-ring)
# --balance dynamic: bad input.
cpbench_fail_test(balance_dynamic_usp 2 "usp: --balance dynamic is built for ring only" run --model tiny --seq 64 --balance dynamic --strategies usp)
cpbench_fail_test(balance_dynamic_pass_q 2 "ring: --balance dynamic circulates K,V inside each document's group. --ring-pass q" run --model tiny --seq 64 --docs 32,32 --balance dynamic --pass prefill --ring-pass q --strategies ring)
cpbench_fail_test(cp_cap_zero 2 "--cp-cap must be in 1 .. seq=64 \\(tokens per rank\\), got 0" run --model tiny --seq 64 --balance dynamic --cp-cap 0)
cpbench_fail_test(cp_cap_above_seq 2 "--cp-cap must be in 1 .. seq=64 \\(tokens per rank\\), got 65" run --model tiny --seq 64 --balance dynamic --cp-cap 65)
cpbench_fail_test(cp_cap_without_dynamic 2 "--cp-cap 16 sizes the CP groups of --balance dynamic only \\(got balance=greedy\\)" run --model tiny --seq 64 --balance greedy --cp-cap 16)
cpbench_fail_test(balance_ulysses 2 "ulysses: --balance doc-zigzag is built for ring, double-ring and usp only" run --model tiny --seq 64 --balance doc-zigzag --strategies ulysses)
