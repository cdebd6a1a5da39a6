#include "bench/parts/double_ring_core.h"

#include <stdexcept>
#include <string>

namespace cpbench {

namespace {
// One tag per message stream (inner and outer are different communicators; distinct tags keep
// traces readable).
constexpr int kTagInnerKV = 111, kTagOuterKV = 112, kTagInnerAcc = 113, kTagOuterAcc = 114;
constexpr int kTagInnerQ = 115, kTagOuterQ = 116, kTagInnerPart = 117, kTagOuterPart = 118;
}  // namespace

void DoubleRingCore::setup(Backend& be, Communicator& inner, Communicator& outer, const RingCoreShape& s,
                           BlockPositions block_pos, BlockPositions key_pos, const LatentBlock& latent) {
  be_ = &be;
  inner_ = &inner;
  outer_ = &outer;
  s_ = s;
  const int w = inner.size(), W = outer.size();
  steps_.setup_steps(be, outer.rank() * w + inner.rank(), w * W, s, std::move(block_pos), std::move(key_pos), latent);
  // Allocated even for a ring of one (P = 1), so the loops have no special case. A K,V block is
  // a ring position's keys (under --cached its cache shard too), or under latent travel their latent.
  // (--comm-dtype: encoded by their owner, steps_.fwd_block/bwd_block decode a received one)
  const int64_t kv = s.travel_elems();
  for (Tensor& t : round_) t = steps_.alloc_kv_travel();
  for (Tensor& t : hop_) t = steps_.alloc_kv_travel();
  for (Tensor& t : acc_) t = be.alloc({kv}, s.acc_dtype, MemKind::comm);
  acc_out_ = be.alloc({kv}, s.acc_dtype, MemKind::comm);
  if (ring_travel(s.travel).queries_travel) {
    const int64_t qn = s.q_elems(), part = steps_.partial_elems();
    for (Tensor& t : qround_) t = be.alloc({qn}, s.dtype, MemKind::comm);
    for (Tensor& t : qhop_) t = be.alloc({qn}, s.dtype, MemKind::comm);
    for (Tensor& t : part_) t = be.alloc({part}, steps_.partial_dtype(), MemKind::comm);
    part_out_ = be.alloc({part}, steps_.partial_dtype(), MemKind::comm);
  }
}

void DoubleRingCore::forward_pass_q(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                                    const DoubleRingHops& hops) {
  check_hops(hops);
  if (qround_[0].empty()) throw std::logic_error("double ring core: forward_pass_q needs setup() with travel q");
  Communicator& in = *inner_;
  Communicator& out = *outer_;
  const int w = in.size(), W = out.size(), T = hops.rounds;
  const int me_in = in.rank(), me_out = out.rank();
  const int inext = (me_in + 1) % w, iprev = (me_in + w - 1) % w;
  const int onext = (me_out + 1) % W, oprev = (me_out + W - 1) % W;
  const int64_t qn = s_.q_elems();
  be_->copy_2d(qround_[0], qn, q, qn, 1, qn);  // q is the caller's and const: its copy travels
  RingCore::Hop part_inner, part_outer;  // partial hops in flight
  const Tensor* result = nullptr;        // after the loop: this rank's own Q block, every contribution
  int step = 0;                          // steps so far: alternates the scratch partials
  for (int t = 0; t <= T; ++t) {
    Tensor& start = qround_[t % 2];
    RingCore::Hop outer_hop;  // the round's starting Q block to the next window, during the round
    if (t < T) outer_hop = steps_.post_hop(out, start, onext, qround_[(t + 1) % 2], oprev, kTagOuterQ);
    const Tensor* cur = &start;
    const int J = hops.inner[size_t(t)];
    for (int j = 0; j <= J; ++j) {
      RingCore::Hop inner_hop;
      if (j < J) inner_hop = steps_.post_hop(in, *cur, inext, qhop_[j % 2], iprev, kTagInnerQ);
      Tensor& scratch = part_[step++ % 2];  // its inner send was waited for at the previous step
      steps_.q_block(*cur, owner(t, j), k, v, scratch);
      if (j == 0 && t > 0) {  // the block's partial over the previous windows
        steps_.wait_hop(out, part_outer);
        steps_.merge_partial(scratch, part_out_);
      }
      if (j > 0) {  // and over the ranks before this one in the window
        in.wait(part_inner.recv);
        steps_.merge_partial(scratch, part_[2]);
        in.wait(part_inner.send);
      }
      // On with the Q block (j < J), or after the round's last step back J places to the rank
      // that started the round with it.
      if (J > 0) {
        const int to = j < J ? inext : (me_in - J + w) % w, from = j < J ? iprev : (me_in + J) % w;
        part_inner = steps_.post_hop(in, scratch, to, part_[2], from, kTagInnerPart);
      }
      if (j < J) {
        steps_.wait_hop(in, inner_hop);
        cur = &qhop_[j % 2];
      }
    }
    const Tensor* round_part = &part_[(step - 1) % 2];
    if (J > 0) {
      steps_.wait_hop(in, part_inner);
      round_part = &part_[2];
    }
    if (T > 0) {
      const int to = t < T ? onext : (me_out - T + W) % W, from = t < T ? oprev : (me_out + T) % W;
      part_outer = steps_.post_hop(out, *round_part, to, part_out_, from, kTagOuterPart);
    } else {
      result = round_part;
    }
    if (t < T) steps_.wait_hop(out, outer_hop);
  }
  if (T > 0) {
    steps_.wait_hop(out, part_outer);
    result = &part_out_;
  }
  steps_.pass_q_end(*result, o);
}


void DoubleRingCore::teardown() { *this = DoubleRingCore(); }

int DoubleRingCore::owner(int t, int j) const {
  const int w = inner_->size(), W = outer_->size();
  const int o = (outer_->rank() - t % W + W) % W, i = (inner_->rank() - j % w + w) % w;
  return o * w + i;
}

void DoubleRingCore::check_hops(const DoubleRingHops& h) const {
  const int w = inner_->size(), W = outer_->size();
  if (!h.fits(w, W))
    throw std::logic_error("double ring core: hops (rounds=" + std::to_string(h.rounds) + ", " +
                           std::to_string(h.inner.size()) + " inner counts) do not fit w=" + std::to_string(w) +
                           " x W=" + std::to_string(W));
}

void DoubleRingCore::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& o,
                             const DoubleRingHops& hops) {
  check_hops(hops);
  Communicator& in = *inner_;
  Communicator& out = *outer_;
  const int w = in.size(), W = out.size(), T = hops.rounds;
  const int inext = (in.rank() + 1) % w, iprev = (in.rank() + w - 1) % w;
  const int onext = (out.rank() + 1) % W, oprev = (out.rank() + W - 1) % W;
  steps_.fwd_begin();
  steps_.pack_block(k, v, round_[0]);
  for (int t = 0; t <= T; ++t) {
    Tensor& start = round_[t % 2];
    RingCore::Hop outer_hop;  // the round's starting block to the next window, during the round
    if (t < T) outer_hop = steps_.post_hop(out, start, onext, round_[(t + 1) % 2], oprev, kTagOuterKV);
    const Tensor* cur = &start;
    const int J = hops.inner[size_t(t)];
    for (int j = 0; j <= J; ++j) {
      RingCore::Hop inner_hop;
      if (j < J) inner_hop = steps_.post_hop(in, *cur, inext, hop_[j % 2], iprev, kTagInnerKV);
      steps_.fwd_block(q, *cur, owner(t, j), o);
      if (j < J) {
        steps_.wait_hop(in, inner_hop);
        cur = &hop_[j % 2];
      }
    }
    if (t < T) steps_.wait_hop(out, outer_hop);
  }
  steps_.fwd_end(o);
}

void DoubleRingCore::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                              const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, const DoubleRingHops& hops) {
  check_hops(hops);
  if (s_.keys() != s_.n) throw std::logic_error("double ring core: backward needs as many keys as queries per rank (no cache)");
  Communicator& in = *inner_;
  Communicator& out = *outer_;
  const int w = in.size(), W = out.size(), T = hops.rounds;
  steps_.bwd_begin(o, dout, dq);
  const int me_in = in.rank(), me_out = out.rank();
  const int inext = (me_in + 1) % w, iprev = (me_in + w - 1) % w;
  const int onext = (me_out + 1) % W, oprev = (me_out + W - 1) % W;
  steps_.pack_block(k, v, round_[0]);
  RingCore::Hop acc_inner, acc_outer;  // accumulator hops in flight
  const Tensor* result = nullptr;      // after the loop: this rank's own block, all contributions
  int step = 0;                        // steps so far: alternates the scratch accumulators
  for (int t = 0; t <= T; ++t) {
    Tensor& start = round_[t % 2];
    RingCore::Hop outer_hop;
    if (t < T) outer_hop = steps_.post_hop(out, start, onext, round_[(t + 1) % 2], oprev, kTagOuterKV);
    const Tensor* cur = &start;
    const int J = hops.inner[size_t(t)];
    for (int j = 0; j <= J; ++j) {
      RingCore::Hop inner_hop;
      if (j < J) inner_hop = steps_.post_hop(in, *cur, inext, hop_[j % 2], iprev, kTagInnerKV);
      Tensor& scratch = acc_[step++ % 2];  // its inner send was waited for at the previous step
      Tensor sum = steps_.acc_sum(scratch);  // (--acc-dtype bf16: float32, rounded once below)
      steps_.bwd_block(q, *cur, owner(t, j), dout, dq, sum);
      if (j == 0 && t > 0) {  // the block's sum over the previous windows
        steps_.wait_hop(out, acc_outer);
        steps_.add_arrived(sum, acc_out_);
      }
      if (j > 0) {  // and over the ranks before this one in the window
        in.wait(acc_inner.recv);
        steps_.add_arrived(sum, acc_[2]);
        in.wait(acc_inner.send);
      }
      steps_.store_acc(scratch, sum);
      // On with the block (j < J), or after the round's last step back J places to the rank
      // that started the round with it (J = w-1: the next rank, a full circle).
      if (J > 0) {
        const int to = j < J ? inext : (me_in - J + w) % w, from = j < J ? iprev : (me_in + J) % w;
        acc_inner = steps_.post_hop(in, scratch, to, acc_[2], from, kTagInnerAcc);
      }
      if (j < J) {
        steps_.wait_hop(in, inner_hop);
        cur = &hop_[j % 2];
      }
    }
    // The sum for the block this rank started the round with: back from the inner circle (or
    // the one scratch when the round ran no inner hop); on to the next window, where that block
    // starts the next round (after the last round: T windows back, to its owner).
    const Tensor* round_sum = &acc_[(step - 1) % 2];
    if (J > 0) {
      steps_.wait_hop(in, acc_inner);
      round_sum = &acc_[2];
    }
    if (T > 0) {
      const int to = t < T ? onext : (me_out - T + W) % W, from = t < T ? oprev : (me_out + T) % W;
      acc_outer = steps_.post_hop(out, *round_sum, to, acc_out_, from, kTagOuterAcc);
    } else {
      result = round_sum;
    }
    if (t < T) steps_.wait_hop(out, outer_hop);
  }
  if (T > 0) {
    steps_.wait_hop(out, acc_outer);
    result = &acc_out_;
  }
  steps_.acc_to_grads(*result, dk, dv);
}

int64_t DoubleRingCore::activation_bytes(const RingCoreShape& s, int w, int W) {
  // RingCore's buffers (with R > 1: 2 k|v, 3 accumulators; not a single ring's travel buffers)
  // + 2 more k|v and the outer accumulator; for R = 1 the 4 + 4 comm buffers are still
  // allocated. pass-Q: the Q blocks and partials on the same paths (4 Q blocks, 4 partials).
  const int R = w * W;
  const int64_t kv = s.travel_elems(), es = int64_t(dtype_size(s.dtype));  // a block: the keys (or their latent)
  RingCoreShape steps = s;
  steps.travel = RingTravel::kv;
  int64_t bytes = RingCore::activation_bytes(steps, R);
  const int64_t ea = int64_t(dtype_size(s.acc_dtype));  // the accumulators' (--acc-dtype)
  const int64_t block = steps.kv_block_bytes();  // a K,V block as it travels (--comm-dtype: encoded)
  bytes += R > 1 ? 2 * block + kv * ea : 4 * block + 4 * kv * ea;
  if (ring_travel(s.travel).queries_travel) {
    const int64_t qn = s.q_elems(), part = s.o_elems() * int64_t(dtype_size(s.partial_dtype)) + s.B * s.hq * s.n * 4;
    bytes += 4 * qn * es + 4 * part;  // 4 Q blocks, 4 partials (o in s_part, lse float32)
  }
  return bytes;
}

CommPrediction DoubleRingCore::predicted_bytes(int64_t tokens, int64_t kv_row, int w, int W, int64_t elem,
                                               int64_t acc, const DoubleRingHops& hops, KvTransit transit,
                                               Fp8Scaling scaling) {
  if (!hops.fits(w, W))
    throw std::logic_error("double ring: predicted_bytes with hops that do not fit w=" + std::to_string(w) +
                           " x W=" + std::to_string(W));
  CommPrediction p;
  const int64_t block = tokens * kv_row;
  const int T = hops.rounds, S = hops.inner_total();
  // Round t passes the K,V block J(t) hops round the inner ring; between rounds the round's
  // starting block goes one hop round the outer ring (T times). Backward adds the dK,dV
  // accumulators: in a round with J(t) > 0, J(t) inner hops with the block and one send J(t)
  // places back to the round's starter; with T > 0, T outer hops and one send T windows back to
  // the owner. K,V hops go to the next rank of their ring.
  // (--comm-dtype: a block's hop is its encoded bytes; the accumulators stay s_acc)
  const int64_t sent = kv_transit_bytes(block, elem, transit, scaling);
  const int64_t inner_kv = sent * S, outer_kv = sent * T;
  p.add("ring_inner", Phase::fwd, 1, inner_kv).add("ring_outer", Phase::fwd, 1, outer_kv);
  p.add("ring_inner", Phase::bwd, 1, inner_kv + acc * block * S);
  for (int J : hops.inner)
    if (J > 0) p.add("ring_inner", Phase::bwd, -J, acc * block);
  p.add("ring_outer", Phase::bwd, 1, outer_kv + acc * block * T);
  if (T > 0) p.add("ring_outer", Phase::bwd, -T, acc * block);
  return p;
}

CommPrediction DoubleRingCore::predicted_bytes_pass_q(int64_t tokens_q, int64_t hq, int64_t ho, int64_t heads, int w, int W,
                                                      int64_t elem, int64_t acc, const DoubleRingHops& hops) {
  if (!hops.fits(w, W))
    throw std::logic_error("double ring: predicted_bytes_pass_q with hops that do not fit w=" + std::to_string(w) +
                           " x W=" + std::to_string(W));
  CommPrediction p;
  const int64_t qb = elem * tokens_q * hq, pb = RingCore::partial_bytes(tokens_q, ho, heads, acc);
  const int T = hops.rounds, S = hops.inner_total();
  p.add("ring_inner", Phase::fwd, 1, (qb + pb) * S);
  for (int J : hops.inner)
    if (J > 0) p.add("ring_inner", Phase::fwd, -J, pb);
  p.add("ring_outer", Phase::fwd, 1, (qb + pb) * T);
  if (T > 0) p.add("ring_outer", Phase::fwd, -T, pb);
  return p;
}

int DoubleRingHops::inner_total() const {
  int n = 0;
  for (int j : inner) n += j;
  return n;
}

bool DoubleRingHops::fits(int w, int W) const {
  bool ok = rounds >= 0 && rounds <= W - 1 && inner.size() == size_t(rounds) + 1;
  for (int j : inner) ok = ok && j >= 0 && j <= w - 1;
  return ok;
}

DoubleRingHops DoubleRingHops::from_needs(int w, int W, const std::function<bool(int me, int held)>& needs) {
  // needed[t][j]: some rank (o, i) needs the block it holds at round t, inner step j.
  std::vector<std::vector<bool>> needed(size_t(W), std::vector<bool>(size_t(w), false));
  for (int t = 0; t < W; ++t)
    for (int j = 0; j < w; ++j)
      for (int o = 0; o < W && !needed[size_t(t)][size_t(j)]; ++o)
        for (int i = 0; i < w; ++i)
          if (needs(o * w + i, ((o - t + W) % W) * w + (i - j + w) % w)) {
            needed[size_t(t)][size_t(j)] = true;
            break;
          }
  DoubleRingHops h;
  for (int t = 0; t < W; ++t)
    for (int j = 0; j < w; ++j)
      if (needed[size_t(t)][size_t(j)]) h.rounds = t;
  for (int t = 0; t <= h.rounds; ++t) {
    int J = 0;
    for (int j = 0; j < w; ++j)
      if (needed[size_t(t)][size_t(j)]) J = j;
    h.inner.push_back(J);
  }
  return h;
}

DoubleRingHops DoubleRingHops::full(int w, int W) {
  DoubleRingHops h;
  h.rounds = W - 1;
  h.inner.assign(size_t(W), w - 1);
  return h;
}

DoubleRingHops DoubleRingCore::effective_hops(int w, int W, const BlockPositions& block_pos, const LayerShape& s) {
  return effective_hops(w, W, block_pos, block_pos, s);
}

DoubleRingHops DoubleRingCore::effective_hops(int w, int W, const BlockPositions& q_pos, const BlockPositions& k_pos,
                                              const LayerShape& s, bool queries_travel) {
  const AttnMask mask = s.mask.attn();
  const int R = w * W;
  std::vector<Positions> pos, keys;
  for (int rho = 0; rho < R; ++rho) pos.push_back(q_pos(rho)), keys.push_back(k_pos(rho));
  // pass-KV: `me`'s queries meet the keys of the block it holds; pass-Q: the visiting queries
  // of `held` meet `me`'s own keys.
  return DoubleRingHops::from_needs(w, W, [&](int me, int held) {
    return queries_travel ? any_visible_pair(pos[size_t(held)], keys[size_t(me)], mask)
                          : any_visible_pair(pos[size_t(me)], keys[size_t(held)], mask);
  });
}

}  // namespace cpbench
