# --ring-pass q-a2a (Meta's pass-Q, arXiv:2411.01783): query blocks circulate alone and each rank
# returns the partials it computed to their owners in one exchange (an all-to-all over a full
# ring; point-to-point to the K owners ahead when a window or documents truncate it). Verified
# against single at 1e-5 on the forward tensors (prefill and --cached, P = 2, 4, 8, the ring
# family and usp's single ring level); bytes and tier bytes = the model (check_report.py model,
# which also computes the untruncated formula itself); refused on a double ring.
set(_a2a --pass prefill --ring-pass q-a2a)
cpbench_verify_test(p2_pass_q_a2a_window 2 --min-verified 3 --model tiny --seq 100 --heads 4 --kv-heads 2 --window 30 ${_a2a} --strategies ring,ring-zigzag,ring-striped)
# A window and documents truncate the ring at P = 4 and 6 (K < R - 1): the partials return point
# to point to the K owners ahead instead of the all-to-all.
cpbench_verify_test(p4_pass_q_a2a_window_truncated 4 --min-verified 4 --model tiny --seq 128 --window 20 ${_a2a} --strategies ring,ring-zigzag,ring-striped,usp[u1xr4])
cpbench_verify_test(p6_pass_q_a2a_docs_b2 6 --min-verified 3 --model tiny --seq 144 --heads 6 --kv-heads 3 --docs 20,40,84 --batch 2 ${_a2a} --strategies ring,ring-zigzag,ring-striped)
cpbench_verify_test(p4_pass_q_a2a_cached_usp 4 --min-verified 6 --model tiny --seq 136 --cached 56 --heads 8 --kv-heads 4 ${_a2a} --strategies ring,ring-zigzag,ring-striped,usp --mesh all)
cpbench_verify_test(p8_pass_q_a2a_cached 8 --min-verified 3 --model tiny --seq 160 --cached 64 --heads 8 --kv-heads 2 --batch 2 ${_a2a} --strategies ring,ring-zigzag,usp[u2xr4])
cpbench_report_test(model_p4_pass_q_a2a 4 "--model;tiny;--seq;128;--batch;2;--heads;8;--kv-heads;4;--ranks-per-node;2;${_a2a};--strategies;single,ring,ring-zigzag,ring-striped,usp;--mesh;all;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 7")
cpbench_report_test(model_p4_pass_q_a2a_window 4 "--model;tiny;--seq;128;--window;20;--ranks-per-node;2;${_a2a};--strategies;single,ring,ring-zigzag,ring-striped;${_fast}"
  "${_py} ${_chk} model REPORT --min-ok 4")
cpbench_fail_test(pass_q_a2a_double_ring 4 "double-ring: --ring-pass q-a2a returns the partials in one exchange over a single ring; it is not defined on a double ring \\(inner ring w=2\\)" run --model tiny --seq 64 ${_a2a} --strategies double-ring --inner-ring 2)
cpbench_fail_test(pass_q_a2a_train 2 "--ring-pass q-a2a circulates query blocks in the forward only: it needs --pass prefill \\(got pass=train\\)" run --model tiny --seq 64 --ring-pass q-a2a --strategies ring)
