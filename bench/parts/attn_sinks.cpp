#include "bench/parts/attn_sinks.h"

#include <stdexcept>
#include <string>

namespace cpbench {

SinkHeads::SinkHeads(const Tensor& logits, const Tensor& grad, int h0, int hq) {
  // Checked before the views are made: a view past the end would be a logic error too late.
  if (h0 < 0 || hq < 1 || h0 + hq > logits.numel() || logits.numel() != grad.numel())
    throw std::logic_error("sinks: heads [" + std::to_string(h0) + ", " + std::to_string(h0 + hq) +
                           ") outside the block's " + std::to_string(logits.numel()));
  logits_ = logits.view(h0, {hq});
  grad_ = grad.view(h0, {hq});
}

SinkHeads SinkHeads::narrow(int h0, int hq) const {
  if (!on()) return {};
  return SinkHeads(logits_, grad_, h0, hq);
}

void SinkHeads::forward(Backend& be, const AttnShape& a, Tensor& o, Tensor& lse) const {
  if (on()) be.attn_sink_fwd(a, logits_, o, lse);
}

void SinkHeads::backward(Backend& be, const AttnShape& a, const Tensor& o, const Tensor& dout,
                         const Tensor& lse) const {
  if (!on()) return;
  Tensor grad = grad_;  // a view of the same memory
  be.attn_sink_bwd(a, logits_, o, dout, lse, grad);
}

}  // namespace cpbench
