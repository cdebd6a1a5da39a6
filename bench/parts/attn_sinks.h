// Attention sinks (GPT-OSS; --sinks): a learned logit per query head in the softmax's
// denominator, a key with no value. The part every attention level calls at the one place where
// its query rows' (o, lse) are final, after whatever merged their partials (the ring's hops,
// pass-Q's returns, a double ring's rounds, decode's merge over the cache's shards), so that each
// row counts its sink exactly once:
//   forward   lse' = log(e^lse + e^sink[h]),  o' = o e^(lse - lse')      (Backend::attn_sink_fwd)
//   backward  dsink[h] -= sum over the rows of e^(sink[h] - lse') rowsum(dout o') (attn_sink_bwd)
// The attention backward then runs unchanged on o' and lse' (the sink's column of dP is 0), so
// no kernel, merge or byte of any strategy changes: the sinks add no communication (their
// gradient joins the weight gradients' synchronisation, modelled in results[].step) and their
// element-wise work is not counted as FLOPs (DESIGN "FLOPs, MFU and HFU").
//
// The block holds the logits of every head, [H] float32 replicated on every rank, and a float32
// gradient [H] per rank (each rank adds its rows' share; the shares sum to the gradient); a level
// takes the views of the query heads it attends.
#pragma once
#include "kernels/backend.h"

namespace cpbench {

class SinkHeads {
 public:
  SinkHeads() = default;  // no sinks: forward and backward do nothing
  // Heads [h0, h0 + hq) of the block's logits and gradient ([H] float32 each).
  SinkHeads(const Tensor& logits, const Tensor& grad, int h0, int hq);
  bool on() const { return !logits_.empty(); }
  // The heads [h0, h0 + hq) of these (a Ulysses level's share of the block's heads); off stays off.
  SinkHeads narrow(int h0, int hq) const;
  // After the last merge of the rows in `a` (a.hq == the heads held here): o and lse in place.
  void forward(Backend& be, const AttnShape& a, Tensor& o, Tensor& lse) const;
  // With the final o', lse' and dout of the same rows: the gradient accumulates.
  void backward(Backend& be, const AttnShape& a, const Tensor& o, const Tensor& dout, const Tensor& lse) const;

 private:
  Tensor logits_, grad_;  // [hq] views
};

}  // namespace cpbench
