// Decode attention ("flash decoding"): one query row per (batch, head) against a long key shard,
// split along the keys so that a handful of rows still fills the GPU. Two kernels (launched from
// attention_decode.cu; also run on the host emulator, tests/unit/test_cuda_emu_decode.cpp):
//
//   split:   grid (hq, splits, B), one block of kDecWarps warps per (b, h, split). Split s owns
//            the key indices [s*chunk, min(nk, (s+1)*chunk)). The block keeps the running max m,
//            sum l and o accumulator (fp32) of the visible keys of its range and writes the
//            split's normalised partial o (o_part [B*hq, splits, dv], fp32; 0 if it sees nothing)
//            and its lse (lse_part [B*hq, splits], base 2; -inf if it sees nothing).
//   combine: one warp per (b, h) row merges the splits with the online-softmax rule,
//            lse = log2 sum_s 2^lse_s, o = sum_s 2^(lse_s - lse) o_s, and stores o in the run
//            dtype (st_any) and lse in natural log, as the other attention kernels do (a row that
//            sees no key: o = 0, lse = -inf).
//
// Two head dims: q and k have d elements (the scores), v and o dv (the values; MLA's absorbed
// decode has d = 576, dv = 512, every GQA model dv = d). A thread holds the same columns of q, k,
// v and the o accumulator, so the layout below is sized by the wider of the two, w = max(d, dv),
// and a thread's columns past d (or dv) are zeros it never loads (or never stores).
//
// Work inside a split block: G = decode_group(w) threads (a power of two, at most a warp) hold
// one key, kDecVec consecutive elements each per pass (one 16-byte load for bf16/fp16, two for
// fp32, when `vec`); a row wider than a warp's kDecWarpSpan = 256 elements takes NC =
// decode_passes(w) passes (a template argument, 1 to 4: w <= 1024), pass r of thread gl holding
// the columns (r G + gl) kDecVec + [0, kDecVec). So a warp works on 32 / G keys at a time and the
// block on kDecWarps * 32 / G. The dot product is summed over the G threads with xor shuffles;
// each key slot keeps its own (m, l, acc) and the slots are merged at the end, first across the
// warp (shuffles), then across the warps (shared memory, one __syncthreads).
//
// Masks come from global positions, as in the other kernels: the query at position qp sees the
// keys at positions [lo, hi] (row_bounds: causal, window, documents). Each segment of kpos is an
// arithmetic sequence (stride >= 1), so its visible keys are one contiguous run of indices,
// computed in closed form: the key loop has no per-key mask test and never reads a masked key.
//
// Softmax works in base 2 on scores pre-multiplied by scale*log2(e) (q is scaled once).
// The grid's x is the query head, so the blocks that run together are the heads of one split,
// and under GQA the hq / hk heads of one kv head read the same K, V chunk at about the same time
// (L2 reuse instead of one block loading a kv head for all its query heads).
#pragma once
#include "kernels/cuda/device_common.cuh"

// Internal linkage (anonymous namespace): see attention_fwd_kernel.cuh.
namespace cpbench::cuda::kern {
namespace {

constexpr int kDecWarps = 4;                  // warps per split block
constexpr int kDecThreads = 32 * kDecWarps;   // 128
constexpr int kDecVec = 8;                    // head-dim elements per thread and pass
constexpr int kDecWarpSpan = 32 * kDecVec;    // 256: the elements a warp holds in one pass
constexpr int kDecMaxPasses = 4;              // a thread holds 8 x passes floats each of q, v, acc
constexpr int kDecMaxD = kDecMaxPasses * kDecWarpSpan;  // 1024: d and dv at the most
constexpr int kDecMinKeys = 256;              // keys per split at least (see decode_plan)
constexpr int kDecMaxSplits = 512;            // splits per row at the most
constexpr int kDecCombineWarps = 8;           // rows per combine block

// Threads per key for rows of w = max(d, dv) elements (1 <= w <= kDecMaxD): the smallest power
// of two G with G * kDecVec >= w, at most a warp (32: w > 256 takes more passes instead).
inline constexpr int decode_group(int w) {
  int g = 1;
  while (g < 32 && g * kDecVec < w) g <<= 1;
  return g;
}
// Passes of a warp over a row of w elements: 1 up to 256, at most kDecMaxPasses.
inline constexpr int decode_passes(int w) { return w <= kDecWarpSpan ? 1 : (w + kDecWarpSpan - 1) / kDecWarpSpan; }

// How a row's nk keys are split (host side, shared by the launcher and the emulator test):
//   want  = ceil(target_blocks / rows), clamped to [1, kDecMaxSplits]: enough blocks over all
//           rows (rows = B * hq) to fill the GPU once (target_blocks = SMs x resident blocks
//           per SM, from the occupancy API; the launcher's choice);
//   limit = max(1, floor(nk / kDecMinKeys)): every split at least kDecMinKeys keys (a row of
//           fewer keys has one split), so each split's fixed costs (loading q, merging its slots, writing
//           d + 1 floats) and the combine's reads (splits x d per row) stay small beside the
//           2 x d elements per key it streams;
//   splits = max(1, min(want, limit)), chunk = ceil(nk / splits), then splits = ceil(nk / chunk)
//           so that no split is empty. The last split may be shorter (chunk need not divide nk).
// splits never exceeds decode_max_splits(rows, target_blocks), whatever nk is: the partials'
// scratch sized for that serves every nk (a run's decode steps differ only in nk).
struct DecodePlan {
  int splits = 1;
  int chunk = 0;
};
inline int decode_max_splits(int64_t rows, int64_t target_blocks) {
  int64_t want = rows > 0 ? (target_blocks + rows - 1) / rows : 1;
  if (want < 1) want = 1;
  if (want > kDecMaxSplits) want = kDecMaxSplits;
  return int(want);
}
inline DecodePlan decode_plan(int64_t nk, int64_t rows, int64_t target_blocks) {
  DecodePlan pl;
  if (nk <= 0) return pl;  // one split with no key: o = 0, lse = -inf
  int64_t splits = decode_max_splits(rows, target_blocks);
  const int64_t limit = nk / kDecMinKeys;
  if (splits > limit) splits = limit;
  if (splits < 1) splits = 1;
  const int64_t chunk = (nk + splits - 1) / splits;
  pl.chunk = int(chunk);
  pl.splits = int((nk + chunk - 1) / chunk);
  return pl;
}

struct DecodeParams {
  const void* q;   // [B, 1, hq, d]   dtype t
  const void* k;   // [B, nk, hk, d]  dtype t
  const void* v;   // [B, nk, hk, v_row] dtype t: the first dv of each row (v_row = d: inside k's rows)
  float* o_part;   // [B*hq, splits, dv]  split out, combine in
  float* lse_part; // [B*hq, splits]      base 2
  void* o;         // [B, 1, hq, dv]  dtype t, combine out
  float* lse;      // [B, hq, 1]      natural log, combine out
  int t;           // DType code (f32 0, bf16 1, f16 2)
  int nk, hq, hk;
  int d, dv;          // head dims: q, k (scores); v, o (values)
  int v_row;          // v's elements per (token, kv head): dv, or d (AttnShape::v_in_k)
  int rep, head0;     // GQA map: query head h uses kv head (h + head0) / rep (AttnShape)
  int splits, chunk;  // decode_plan
  int group;          // decode_group(max(d, dv)); the split kernel's NC is decode_passes of it
  int vec;            // 1: d, dv, v_row % 8 == 0 and q, k, v 16-byte aligned (vector loads)
  int qp;             // the query's position
  MaskArg mask;
  float scale_log2;   // softmax scale * log2(e)
  PosArg kpos;
};

// x[0..n) = elements i..i+n-1 of a dtype-t array, x[n..kDecVec) = 0 (n <= kDecVec). With `vec`
// and n == kDecVec, i a multiple of 8 and the base 16-byte aligned: 16-byte loads.
__device__ __forceinline__ void ld_vec8(float (&x)[kDecVec], const void* p, int t, int64_t i, int n,
                                        bool vec) {
  if (vec && n == kDecVec) {
    if (t == 0) {
      const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
      const float4 a = f[0], b = f[1];
      x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
      x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    } else {
      const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint16_t lo = uint16_t(w[e] & 0xffffu), hi = uint16_t(w[e] >> 16);
        if (t == 1) {  // bf16: the high half of an fp32
          const uint32_t a = uint32_t(lo) << 16, b = uint32_t(hi) << 16;
          memcpy(&x[2 * e], &a, 4);
          memcpy(&x[2 * e + 1], &b, 4);
        } else {
          __half a, b;
          memcpy(static_cast<void*>(&a), &lo, 2);
          memcpy(static_cast<void*>(&b), &hi, 2);
          x[2 * e] = __half2float(a);
          x[2 * e + 1] = __half2float(b);
        }
      }
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < kDecVec; ++e) x[e] = e < n ? ld_any(p, t, i + e) : 0.0f;
}

// Merges softmax state (mo, lo, acco) into (m, l, acc): both may be empty (m = -inf).
template <int NC>
__device__ __forceinline__ void dec_merge(float& m, float& l, float (&acc)[NC][kDecVec], float mo, float lo,
                                          const float (&acco)[NC][kDecVec]) {
  const float mn = fmaxf(m, mo);
  if (mn == -kInf) return;  // both empty
  const float ca = exp2f(m - mn), cb = exp2f(mo - mn);  // an empty side's factor is 0
  l = l * ca + lo * cb;
#pragma unroll
  for (int r = 0; r < NC; ++r)
#pragma unroll
    for (int e = 0; e < kDecVec; ++e) acc[r][e] = acc[r][e] * ca + acco[r][e] * cb;
  m = mn;
}

// Elements of a row of n that a thread holds from column c0 on: 0 to kDecVec.
__device__ __forceinline__ int dec_count(int n, int c0) {
  return n - c0 < 0 ? 0 : (n - c0 < kDecVec ? n - c0 : kDecVec);
}

// NC: passes over a row (decode_passes(max(d, dv))); the launcher picks the build.
template <int NC>
__global__ void __launch_bounds__(kDecThreads) attn_decode_split_kernel(const DecodeParams p) {
  __shared__ float sh_m[kDecWarps], sh_l[kDecWarps];
  __shared__ float sh_acc[kDecWarps][NC * kDecWarpSpan];
  const int h = int(blockIdx.x), split = int(blockIdx.y), b = int(blockIdx.z);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int G = p.group, kpw = 32 / G, kpb = kDecWarps * kpw;  // keys per warp, per block
  const int gl = lane & (G - 1), slot = lane / G;              // element group, key slot
  const int d = p.d, dv = p.dv;
  // Pass r: columns c0[r] + [0, kDecVec), of which nd[r] are q's and k's, nv[r] v's and o's.
  int c0[NC], nd[NC], nv[NC];
#pragma unroll
  for (int r = 0; r < NC; ++r) {
    c0[r] = (r * G + gl) * kDecVec;
    nd[r] = dec_count(d, c0[r]);
    nv[r] = dec_count(dv, c0[r]);
  }
  const bool vec = p.vec != 0;
  const int g = (h + p.head0) / p.rep;
  const int64_t row = int64_t(b) * p.hq + h;

  float qf[NC][kDecVec], acc[NC][kDecVec];
#pragma unroll
  for (int r = 0; r < NC; ++r) {
    ld_vec8(qf[r], p.q, p.t, row * d + c0[r], nd[r], vec);
#pragma unroll
    for (int e = 0; e < kDecVec; ++e) {
      qf[r][e] *= p.scale_log2;
      acc[r][e] = 0.0f;
    }
  }
  float m = -kInf, l = 0.0f;

  int lo, hi;
  row_bounds(p.mask, p.qp, lo, hi);
  const int j0 = split * p.chunk;
  const int j1 = p.nk - j0 < p.chunk ? p.nk : j0 + p.chunk;
  int r0 = 0;
  for (int sg = 0; sg < p.kpos.nseg; ++sg) {
    const int r1 = p.kpos.row_end[sg];
    // This segment's rows in the split, then those whose positions st + (i - r0) sd are in [lo, hi].
    long long a = j0 > r0 ? j0 : r0, e = j1 < r1 ? j1 : r1;
    const long long st = p.kpos.start[sg], sd = p.kpos.stride[sg];
    const long long va = lo > st ? r0 + (lo - st + sd - 1) / sd : r0;  // first visible row
    const long long ve = hi < st ? r0 : r0 + (hi - st) / sd + 1;       // one past the last
    a = a > va ? a : va;
    e = e < ve ? e : ve;
    // Warp-uniform trip count (the shuffles need every lane); a slot past e idles.
    for (int base = int(a) + warp * kpw; base < e; base += kpb) {
      const int j = base + slot;
      const bool active = j < e;
      const int64_t kv = (int64_t(b) * p.nk + j) * p.hk + g;  // the key's row of k and of v
      float s = 0.0f, vf[NC][kDecVec];
      if (active) {
#pragma unroll
        for (int r = 0; r < NC; ++r) {
          float kf[kDecVec];
          ld_vec8(kf, p.k, p.t, kv * d + c0[r], nd[r], vec);
          ld_vec8(vf[r], p.v, p.t, kv * p.v_row + c0[r], nv[r], vec);
#pragma unroll
          for (int x = 0; x < kDecVec; ++x) s += qf[r][x] * kf[x];
        }
      }
      for (int o = 1; o < G; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (active) {
        const float mn = fmaxf(m, s);
        const float corr = exp2f(m - mn);  // 0 while the slot has seen nothing (m = -inf)
        const float pj = exp2f(s - mn);
        l = l * corr + pj;
#pragma unroll
        for (int r = 0; r < NC; ++r)
#pragma unroll
          for (int x = 0; x < kDecVec; ++x) acc[r][x] = acc[r][x] * corr + pj * vf[r][x];
        m = mn;
      }
    }
    r0 = r1;
  }

  // Merge the warp's key slots (lanes gl, gl + G, gl + 2G, ... hold the same elements; G = 32,
  // every row wider than 256, has one slot per warp and nothing to merge).
  for (int o = G; o < 32; o <<= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o), lo2 = __shfl_xor_sync(0xffffffffu, l, o);
    float acco[NC][kDecVec];
#pragma unroll
    for (int r = 0; r < NC; ++r)
#pragma unroll
      for (int x = 0; x < kDecVec; ++x) acco[r][x] = __shfl_xor_sync(0xffffffffu, acc[r][x], o);
    dec_merge(m, l, acc, mo, lo2, acco);
  }
  // Then the warps', through shared memory (slot 0 of each warp holds its state; its lanes' o
  // columns cover [0, dv)).
  if (slot == 0) {
#pragma unroll
    for (int r = 0; r < NC; ++r)
#pragma unroll
      for (int x = 0; x < kDecVec; ++x)  // constant indices: acc stays in registers
        if (x < nv[r]) sh_st(&sh_acc[warp][c0[r] + x], acc[r][x]);
    if (gl == 0) {
      sh_st(&sh_m[warp], m);
      sh_st(&sh_l[warp], l);
    }
  }
  __syncthreads();  // every warp's state is in shared memory before any thread merges them
  float M = -kInf;
  for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, sh_ld(&sh_m[w]));
  float wt[kDecWarps], L = 0.0f;
  for (int w = 0; w < kDecWarps; ++w) {
    wt[w] = M == -kInf ? 0.0f : exp2f(sh_ld(&sh_m[w]) - M);
    L += wt[w] * sh_ld(&sh_l[w]);
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  const int64_t part = row * p.splits + split;
  for (int c = tid; c < dv; c += kDecThreads) {
    float y = 0.0f;
    for (int w = 0; w < kDecWarps; ++w)
      if (wt[w] != 0.0f) y += wt[w] * sh_ld(&sh_acc[w][c]);  // an empty warp's acc is never read
    p.o_part[part * dv + c] = y * inv;
  }
  if (tid == 0) p.lse_part[part] = L > 0.0f ? M + log2f(L) : -kInf;
}

__global__ void attn_decode_combine_kernel(const DecodeParams p, int rows) {
  const int64_t r = int64_t(blockIdx.x) * kDecCombineWarps + (threadIdx.x >> 5);  // b*hq + h
  const int lane = threadIdx.x & 31;
  if (r >= rows) return;  // whole warps
  const float* lp = p.lse_part + r * p.splits;
  float M = -kInf;
  for (int s = lane; s < p.splits; s += 32) M = fmaxf(M, lp[s]);
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  float L = 0.0f;
  if (M != -kInf)
    for (int s = lane; s < p.splits; s += 32) L += exp2f(lp[s] - M);  // 2^-inf = 0
  L = warp_sum(L);
  const float inv = M == -kInf ? 0.0f : 1.0f / L;
  const int dv = p.dv;  // the partials and o are rows of the values' head dim
  const float* op = p.o_part + r * p.splits * dv;
  for (int c = lane; c < dv; c += 32) {
    float y = 0.0f;
    if (M != -kInf)
      for (int s = 0; s < p.splits; ++s) {
        const float ls = lp[s];
        if (ls != -kInf) y += exp2f(ls - M) * op[int64_t(s) * dv + c];  // an empty split adds nothing
      }
    st_any(p.o, p.t, r * dv + c, y * inv);
  }
  if (lane == 0) p.lse[r] = M == -kInf ? -kInf : (M + log2f(L)) * kLn2;
}

}  // namespace
}  // namespace cpbench::cuda::kern
