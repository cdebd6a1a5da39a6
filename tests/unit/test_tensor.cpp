// Tensors, dtypes, memory tracking, positions, the exact visible-pair count, the backend factory.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <random>

#include "kernels/backend.h"
#include "kernels/tensor.h"
#include "tests/unit/test_kernels_ref.h"

using namespace cpbench;

TEST_CASE("dtype helpers", "[tensor]") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::f16) == 2);
  for (DType t : {DType::f32, DType::bf16, DType::f16}) CHECK(parse_dtype(dtype_name(t)) == t);
  CHECK(parse_dtype("float32") == DType::f32);
  CHECK_THROWS_WITH(parse_dtype("fp8"), Catch::Contains("fp8") && Catch::Contains("fp32, bf16 or fp16"));
}

TEST_CASE("MemTracker keeps live and peak bytes per kind and in total", "[tensor]") {
  MemTracker m;
  m.on_alloc(MemKind::weights, 100);
  m.on_alloc(MemKind::activations, 50);
  CHECK(m.stats().live_total == 150);
  CHECK(m.stats().peak_total == 150);
  m.on_free(MemKind::weights, 100);
  m.on_alloc(MemKind::comm, 30);
  CHECK(m.stats().live[0] == 0);
  CHECK(m.stats().peak[0] == 100);
  CHECK(m.stats().live[1] == 50);
  CHECK(m.stats().live[2] == 30);
  CHECK(m.stats().live_total == 80);
  CHECK(m.stats().peak_total == 150);  // the peak of the sum, not the sum of peaks (180)
  m.reset_peaks();
  CHECK(m.stats().peak_total == 80);
  CHECK(m.stats().peak[0] == 0);
  CHECK(m.stats().peak[1] == 50);
  CHECK_THROWS(m.on_alloc(MemKind::weights, -1));
}

TEST_CASE("Tensor numel, view, reshape, shape_str", "[tensor]") {
  auto buf = std::make_shared<std::vector<float>>(24);
  for (int i = 0; i < 24; ++i) (*buf)[size_t(i)] = float(i);
  Tensor t;
  t.holder = std::shared_ptr<void>(buf, buf->data());
  t.data = buf->data();
  t.shape = {2, 3, 4};
  CHECK(t.numel() == 24);
  CHECK(t.bytes() == 96);
  CHECK(t.shape_str() == "[2, 3, 4]");
  CHECK(Tensor{}.numel() == 0);
  CHECK(Tensor{}.empty());

  Tensor v = t.view(12, {3, 4});
  CHECK(v.ptr<float>()[0] == 12.0f);
  CHECK(v.numel() == 12);
  CHECK(v.holder == t.holder);
  CHECK_THROWS_AS(t.view(13, {3, 4}), std::out_of_range);
  CHECK_THROWS_AS(t.view(-1, {2}), std::out_of_range);

  Tensor r = t.reshape({6, -1});
  CHECK(r.shape == std::vector<int64_t>{6, 4});
  CHECK(r.data == t.data);
  CHECK_THROWS_WITH(t.reshape({5, 5}), Catch::Contains("24 elements"));
  CHECK_THROWS(t.reshape({-1, -1}));
  CHECK_THROWS(t.reshape({7, -1}));
}

TEST_CASE("Positions: contiguous, strided, two segments", "[tensor][positions]") {
  const Positions c = Positions::contiguous(5, 4);
  CHECK(c.count() == 4);
  CHECK(c.list() == std::vector<int64_t>{5, 6, 7, 8});
  CHECK(c.str() == "range(5,9)");
  const Positions s = Positions::strided(3, 4, 3);
  CHECK(s.list() == std::vector<int64_t>{3, 7, 11});
  CHECK(s.str() == "range(3,15,4)");
  const Positions z = Positions::two(0, 2, 10, 3);
  CHECK(z.list() == std::vector<int64_t>{0, 1, 10, 11, 12});
  CHECK(z.at(2) == 10);
  CHECK(z.str() == "range(0,2)+range(10,13)");
  CHECK_THROWS_AS(z.at(5), std::out_of_range);
  const Positions e = Positions::two(4, 0, 9, 2);  // an empty first segment
  CHECK(e.list() == std::vector<int64_t>{9, 10});
  CHECK(e.at(0) == 9);
  CHECK_THROWS_AS(Positions::strided(0, 0, 3), std::invalid_argument);
  CHECK_THROWS_AS(Positions::contiguous(-1, 3), std::invalid_argument);
}

TEST_CASE("Positions: any number of segments, copies keep them", "[tensor][positions]") {
  // Six segments: four inline, two beyond; a copy and an assignment hold the same list.
  std::vector<PosSeg> segs = {{0, 1, 2}, {10, 2, 3}, {30, 1, 0}, {40, 5, 2}, {100, 1, 3}, {7, 3, 2}};
  const Positions p = Positions::segments(segs);
  const std::vector<int64_t> want = {0, 1, 10, 12, 14, 40, 45, 100, 101, 102, 7, 10};
  CHECK(p.nseg() == 6);
  CHECK(p.count() == 12);
  CHECK(p.list() == want);
  CHECK(p.at(10) == 7);
  CHECK(p.at(11) == 10);
  CHECK_THROWS_AS(p.at(12), std::out_of_range);
  CHECK(p.str() == "range(0,2)+range(10,16,2)+range(30,30)+range(40,50,5)+range(100,103)+range(7,13,3)");
  Positions c = p;
  CHECK(c.list() == want);
  Positions d = Positions::contiguous(0, 1);
  d = p;
  CHECK(d.list() == want);
  CHECK(d.seg(5).start == 7);
  CHECK_THROWS_WITH(Positions().append(PosSeg{0, 0, 1}), Catch::Contains("stride >= 1"));
  CHECK_THROWS_AS(Positions::segments({{1, 1, 1}, {-3, 1, 1}}), std::invalid_argument);
  // rows(first, n): every slice is the list's slice, across segments (and strides).
  for (int64_t first = 0; first <= p.count(); ++first)
    for (int64_t n = 0; first + n <= p.count(); ++n)
      CHECK(p.rows(first, n).list() == std::vector<int64_t>(want.begin() + first, want.begin() + first + n));
  CHECK(p.rows(3, 4).str() == "range(12,16,2)+range(40,50,5)");
  CHECK_THROWS_WITH(p.rows(10, 3), Catch::Contains("rows [10, 13) of 12 rows"));
  CHECK_THROWS_AS(p.rows(-1, 1), std::out_of_range);
}

namespace {
int64_t brute_pairs(const Positions& q, const Positions& k, bool causal) {
  int64_t n = 0;
  for (int64_t a : q.list())
    for (int64_t b : k.list()) n += (!causal || b <= a);
  return n;
}
Positions random_positions(std::mt19937_64& g) {
  std::uniform_int_distribution<int> kind(0, 2), start(0, 300), cnt(0, 90), stride(1, 9);
  switch (kind(g)) {
    case 0: return Positions::contiguous(start(g), cnt(g));
    case 1: return Positions::strided(start(g), stride(g), cnt(g));
    default: return Positions::two(start(g), cnt(g), start(g), cnt(g));
  }
}
}  // namespace

TEST_CASE("count_visible_pairs is exact", "[positions]") {
  std::mt19937_64 g(42);
  for (int t = 0; t < 3000; ++t) {
    const Positions q = random_positions(g), k = random_positions(g);
    INFO("q " << q.str() << " k " << k.str());
    REQUIRE(count_visible_pairs(q, k, true) == brute_pairs(q, k, true));
    REQUIRE(count_visible_pairs(q, k, false) == q.count() * k.count());
  }
  // Layouts of the strategies at N = 4096, P = 4.
  const int64_t N = 4096, P = 4, c = N / (2 * P);
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < P; ++s) {
      const Positions zq = Positions::two(c * r, c, c * (2 * P - 1 - r), c);
      const Positions zk = Positions::two(c * s, c, c * (2 * P - 1 - s), c);
      CHECK(count_visible_pairs(zq, zk, true) == brute_pairs(zq, zk, true));
      const Positions sq = Positions::strided(r, P, N / P), sk = Positions::strided(s, P, N / P);
      CHECK(count_visible_pairs(sq, sk, true) == brute_pairs(sq, sk, true));
    }
}

TEST_CASE("count_visible_pairs: blocks of 2^31 tokens, counts near and beyond 2^63", "[positions]") {
  // Zigzag blocks of a ring of R = 256 over N = 2^40 tokens: chunks of C = 2^31. Hand counts, causal:
  // block 1 against block 0 sees C^2 pairs from each of its chunks (both come after block 0's first
  // chunk and before its second): 2 C^2 = 2^63, one beyond int64_t.
  const int64_t R = 256, C = int64_t(1) << 31;
  auto zz = [&](int64_t c, int64_t j) { return Positions::two(j * c, c, (2 * R - 1 - j) * c, c); };
  const AttnMask causal{true, 0, nullptr};
  CHECK(any_visible_pair(zz(C, 1), zz(C, 0), causal));
  CHECK_THROWS_AS(count_visible_pairs(zz(C, 1), zz(C, 0), causal), std::overflow_error);
  CHECK_THROWS_WITH(count_visible_pairs(zz(C, 1), zz(C, 0), causal),
                    "count_visible_pairs: the 4294967296 x 4294967296 block has more than 2^63 - 1 visible pairs");
  // One token less per chunk: 2 (C-1)^2 = 2^63 - 2^33 + 2 fits, exactly.
  const int64_t c1 = C - 1;
  CHECK(count_visible_pairs(zz(c1, 1), zz(c1, 0), causal) == 2 * c1 * c1);
  // The diagonal block: each chunk against itself c(c+1)/2, the second chunk against the first c^2.
  CHECK(count_visible_pairs(zz(c1 / 2, 3), zz(c1 / 2, 3), causal) ==
        (c1 / 2) * (c1 / 2 + 1) + (c1 / 2) * (c1 / 2));
  // Nothing visible: block 0's first chunk against block 1's first chunk (all keys after).
  CHECK_FALSE(any_visible_pair(Positions::contiguous(0, C), Positions::contiguous(C, C), causal));
  // Strided rows over a range of 2^40 (a striped ring of 256): row i at 256 i sees keys <= 256 i of
  // the stride-256 block at offset 1: i of them, sum over i < 2^32 = 2^32 (2^32 - 1) / 2.
  const int64_t n = int64_t(1) << 32;
  CHECK(count_visible_pairs(Positions::strided(0, R, n), Positions::strided(1, R, n), causal) == (n / 2) * (n - 1));
}

namespace {
// 1 to 4 segments of random starts, strides and counts (some empty).
Positions random_segments(std::mt19937_64& g) {
  std::uniform_int_distribution<int> nseg(1, 4), start(0, 200), cnt(0, 40), stride(1, 5), unit(0, 2);
  Positions p;
  for (int s = nseg(g); s > 0; --s) p.append(PosSeg{start(g), unit(g) ? 1 : stride(g), cnt(g)});
  return p;
}
// Causal or not; no window, a small or a large one; one document, or 1 to 6 random starts.
AttnShape random_mask(std::mt19937_64& g) {
  AttnShape s;
  std::uniform_int_distribution<int> coin(0, 1), wkind(0, 2), wsmall(1, 8), wlarge(9, 120), ndocs(1, 6),
      dstart(1, 320);
  s.causal = coin(g);
  const int wk = wkind(g);
  s.window = wk == 0 ? 0 : wk == 1 ? wsmall(g) : wlarge(g);
  if (coin(g)) {
    std::vector<int64_t> st = {0};
    for (int i = ndocs(g); i > 1; --i) st.push_back(dstart(g));
    std::sort(st.begin(), st.end());
    st.erase(std::unique(st.begin(), st.end()), st.end());
    s.docs = std::make_shared<const std::vector<int64_t>>(st);
  }
  return s;
}
}  // namespace

TEST_CASE("count_visible_pairs is exact under windows and documents", "[positions][mask]") {
  std::mt19937_64 g(7);
  for (int t = 0; t < 4000; ++t) {
    const Positions q = random_segments(g), k = random_segments(g);
    const AttnShape s = random_mask(g);
    INFO("q " << q.str() << " k " << k.str() << " causal " << s.causal << " window " << s.window
              << " docs " << (s.docs ? s.docs->size() : 0));
    REQUIRE(count_visible_pairs(q, k, s.mask()) == test::ref_visible_pairs(s, q, k));
  }
}

TEST_CASE("AttnMask bounds follow DESIGN's visibility rule", "[positions][mask]") {
  AttnShape s;
  s.causal = false;
  s.window = 3;
  s.docs = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{0, 10, 12});
  const AttnMask m = s.mask();
  CHECK(m.doc_start(11) == 10);
  CHECK(m.doc_end(11) == 12);
  CHECK(m.doc_end(500) == AttnMask::kNoEnd);
  CHECK(m.lo(11) == 10);  // the document start cuts the window
  CHECK(m.hi(11) == 11);  // the document end cuts it too
  CHECK(m.lo(20) == 18);
  CHECK(m.hi(20) == 22);
  for (int64_t i = 0; i < 30; ++i)
    for (int64_t j = 0; j < 30; ++j) {
      INFO("i " << i << " j " << j);
      REQUIRE(m.visible(i, j) == test::ref_visible(s, i, j));
      s.causal = true;
      REQUIRE(s.mask().visible(i, j) == test::ref_visible(s, i, j));
      s.causal = false;
    }
  // Bad masks are rejected with the values named.
  AttnShape bad;
  bad.B = 1; bad.nq = 1; bad.nk = 1; bad.hq = 1; bad.hk = 1; bad.d = 8;
  bad.window = -2;
  CHECK_THROWS_WITH(check_attn_shape(bad, "attn_fwd"), Catch::Contains("window -2"));
  bad.window = 0;
  bad.docs = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{0, 5, 5});
  CHECK_THROWS_WITH(check_attn_shape(bad, "attn_fwd"), Catch::Contains("strictly ascending") && Catch::Contains("5 after 5"));
  bad.docs = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{3, 5});
  CHECK_THROWS_WITH(check_attn_shape(bad, "attn_fwd"), Catch::Contains("begin with 0"));
}

// Exact counts at N = 262144 from the closed forms (per segment and document): a brute-force
// count would take minutes, so this also shows no N^2 loop is hiding behind the API.
TEST_CASE("count_visible_pairs gives exact closed-form counts at N = 262144", "[positions]") {
  const int64_t N = 262144;
  const Positions all = Positions::contiguous(0, N);
  CHECK(count_visible_pairs(all, all, true) == N * (N + 1) / 2);
  // Striped with stride 7 against itself: row i (position s + 7i) sees keys 0..i.
  const Positions st = Positions::strided(3, 7, N);
  CHECK(count_visible_pairs(st, st, true) == N * (N + 1) / 2);
  const Positions a = Positions::strided(1, 8, N / 8), b = Positions::strided(5, 8, N / 8);
  // Query 1 + 8i sees keys 5 + 8j with j <= i - 1: i pairs per row.
  CHECK(count_visible_pairs(a, b, true) == (N / 8) * (N / 8 - 1) / 2);
  // Masks in closed form (a brute-force count would take minutes): causal window W, row i sees
  // min(i + 1, W) keys; K equal documents of length L: K * L(L+1)/2 causal, K * L^2 not.
  const int64_t W = 1024, K = 64, L = N / K;
  CHECK(count_visible_pairs(all, all, AttnMask{true, W, nullptr}) == W * (W + 1) / 2 + (N - W) * W);
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < K; ++i) starts.push_back(i * L);
  const DocStarts docs = std::make_shared<const std::vector<int64_t>>(starts);
  CHECK(count_visible_pairs(all, all, AttnMask{true, 0, docs}) == K * L * (L + 1) / 2);
  CHECK(count_visible_pairs(all, all, AttnMask{false, 0, docs}) == K * L * L);
  // Non-causal window 2W-1 wide, cut at the two ends of the sequence.
  CHECK(count_visible_pairs(all, all, AttnMask{false, W, nullptr}) == N * (2 * W - 1) - W * (W - 1));
}

TEST_CASE("now_ms is monotonic from a process-wide origin", "[tensor]") {
  const double a = now_ms();
  const double b = now_ms();
  CHECK(a >= 0);
  CHECK(b >= a);
}

TEST_CASE("make_backend: cpu, and clear errors for the rest", "[backend]") {
  BackendOptions o;
  o.name = "cpu";
  o.threads = 2;
  auto be = make_backend(o);
  REQUIRE(be);
  CHECK(be->name() == "cpu");
  CHECK(be->threads() == 2);
  CHECK(!be->device_name().empty());
  const auto names = available_backends();
  CHECK(names.front() == "cpu");
  o.name = "tpu";
  CHECK_THROWS_WITH(make_backend(o), Catch::Contains("'tpu'") && Catch::Contains("cpu"));
  o.name = "cuda";
  if (std::find(names.begin(), names.end(), "cuda") == names.end())
    CHECK_THROWS_WITH(make_backend(o), Catch::Contains("cuda") && Catch::Contains("not compiled"));
  o.name = "cpu";
  o.threads = 0;
  CHECK_THROWS_AS(make_backend(o), std::invalid_argument);
}

namespace {
// A backend whose do_* only record that they ran: what the base class's entry points do around
// them (checks, replay gate, FLOP count, compute log) is then visible on its own.
class RecordingBackend final : public Backend {
 public:
  std::vector<std::string> ran;
  std::string name() const override { return "recording"; }
  std::string device_name() const override { return "none"; }
  Tensor alloc(std::vector<int64_t> shape, DType dtype, MemKind kind) override {
    Tensor t;
    t.dtype = dtype;
    t.kind = kind;
    t.shape = std::move(shape);
    auto buf = std::make_shared<std::vector<char>>(t.bytes() + 1);
    t.holder = std::shared_ptr<void>(buf, buf->data());
    t.data = buf->data();
    return t;
  }
  void upload(const std::vector<float>&, Tensor&) override {}
  std::vector<float> download(const Tensor&) override { return {}; }
  Event record_event() override { return Event{nullptr, now_ms()}; }
  double elapsed_ms(const Event& a, const Event& b) override { return b.host_ms - a.host_ms; }
  void synchronize() override {}

 protected:
  void check_dtypes(const char* op, std::initializer_list<const Tensor*> ts) const override {
    for (const Tensor* t : ts)
      if (t->dtype == DType::f16) throw std::invalid_argument(std::string(op) + ": no fp16 here");
  }
  void do_fill(Tensor&, float) override { ran.push_back("fill"); }
  void do_copy_2d(Tensor&, int64_t, const Tensor&, int64_t, int64_t, int64_t) override { ran.push_back("copy_2d"); }
  void do_convert(Tensor&, const Tensor&) override { ran.push_back("convert"); }
  void do_add(Tensor&, const Tensor&, const Tensor&) override { ran.push_back("add"); }
  void do_gemm(bool, bool, int64_t, int64_t, int64_t, float, const Tensor&, int64_t, const Tensor&, int64_t, float,
               Tensor&, int64_t) override {
    ran.push_back("gemm");
  }
  void do_rmsnorm_fwd(const Tensor&, const Tensor&, float, int64_t, Tensor&, Tensor&) override { ran.push_back("rmsnorm_fwd"); }
  void do_rmsnorm_bwd(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, Tensor&, Tensor&) override {
    ran.push_back("rmsnorm_bwd");
  }
  void do_rope(Tensor&, int64_t, int64_t, int, int, int64_t, const Positions&, double, bool, const DocStarts&) override {
    ran.push_back("rope");
  }
  void do_attn_fwd(const AttnShape&, const Tensor&, const Tensor&, const Tensor&, const Positions&, const Positions&,
                   Tensor&, Tensor&) override {
    ran.push_back("attn_fwd");
  }
  void do_attn_merge(const AttnShape&, Tensor&, Tensor&, const Tensor&, const Tensor&) override { ran.push_back("attn_merge"); }
  void do_attn_bwd_delta(const AttnShape&, const Tensor&, const Tensor&, Tensor&) override { ran.push_back("attn_bwd_delta"); }
  void do_attn_sink_fwd(const AttnShape&, const Tensor&, Tensor&, Tensor&) override { ran.push_back("attn_sink_fwd"); }
  void do_attn_sink_bwd(const AttnShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) override {
    ran.push_back("attn_sink_bwd");
  }
  void do_attn_bwd(const AttnShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, const Positions&, const Positions&, Tensor&, Tensor&, Tensor&) override {
    ran.push_back("attn_bwd");
  }
};
}  // namespace

TEST_CASE("Backend entry points check, gate, count and log around do_*", "[backend]") {
  RecordingBackend be;
  auto t = [&](std::vector<int64_t> shape, DType dt = DType::f32) { return be.alloc(std::move(shape), dt, MemKind::activations); };
  AttnShape s;
  s.nq = 4; s.nk = 6; s.hq = 2; s.hk = 1; s.d = 8; s.window = 2;
  s.docs = std::make_shared<const std::vector<int64_t>>(std::vector<int64_t>{0, 3});
  const Positions qp = Positions::contiguous(2, 4), kp = Positions::contiguous(0, 6);
  Tensor q = t({1, 4, 2, 8}), k = t({1, 6, 1, 8}), o = t({1, 4, 2, 8}), lse = t({1, 2, 4});
  Tensor A = t({3, 5}), B = t({5, 7}), C = t({3, 7});

  SECTION("compute: counted, logged, then do_* runs") {
    be.gemm(false, false, 3, 7, 5, 1.0f, A, 5, B, 7, 0.0f, C, 7);
    be.attn_fwd(s, q, k, k, qp, kp, o, lse);
    CHECK(be.ran == std::vector<std::string>{"gemm", "attn_fwd"});
    // Causal, window 2, documents {0, 3}: query 2 sees {1, 2}, 3 sees {3}, 4 sees {3, 4}, 5 sees {4, 5}.
    const double attn = 4.0 * 8 * 2 * 1 * 7;
    CHECK(be.model_flops() == 2.0 * 3 * 7 * 5 + attn);
    REQUIRE(be.compute_log().size() == 2);
    CHECK(be.compute_log()[0].name == "gemm");
    CHECK(be.compute_log()[1].name == "attn_fwd");
    CHECK(be.compute_log()[1].t1_ms >= be.compute_log()[1].t0_ms);
  }
  SECTION("a GEMM's model share: model FLOPs x share, hardware FLOPs all; a share outside [0, 1] refused") {
    be.gemm(false, false, 3, 7, 5, 1.0f, A, 5, B, 7, 0.0f, C, 7, 0.375);
    CHECK(be.model_flops() == 0.375 * 2.0 * 3 * 7 * 5);
    CHECK(be.hardware_flops() == 2.0 * 3 * 7 * 5);
    // 0: repeated work only (MLA latent travel's up-projection of a received block)
    be.gemm(false, false, 3, 7, 5, 1.0f, A, 5, B, 7, 0.0f, C, 7, 0.0);
    CHECK(be.model_flops() == 0.375 * 2.0 * 3 * 7 * 5);
    CHECK(be.hardware_flops() == 2 * 2.0 * 3 * 7 * 5);
    for (double bad : {-0.5, 1.5})
      CHECK_THROWS_WITH(be.gemm(false, false, 3, 7, 5, 1.0f, A, 5, B, 7, 0.0f, C, 7, bad), Catch::Contains("model_share"));
    CHECK(be.ran == std::vector<std::string>{"gemm", "gemm"});
  }
  SECTION("replay mode: compute skipped (not counted, not logged), layout still runs") {
    be.set_compute_enabled(false);
    be.gemm(false, false, 3, 7, 5, 1.0f, A, 5, B, 7, 0.0f, C, 7);
    be.attn_fwd(s, q, k, k, qp, kp, o, lse);
    be.fill(C, 1.0f);
    be.copy_2d(C, 7, C, 7, 3, 7);
    CHECK(be.ran == std::vector<std::string>{"fill", "copy_2d"});
    CHECK(be.model_flops() == 0);
    CHECK(be.compute_log().size() == 2);
  }
  SECTION("bad arguments never reach do_*, in replay mode either") {
    for (bool replay : {false, true}) {
      be.set_compute_enabled(!replay);
      CHECK_THROWS_WITH(be.gemm(false, false, 3, 7, 6, 1.0f, A, 5, B, 7, 0.0f, C, 7), Catch::Contains("gemm"));
      CHECK_THROWS_WITH(be.attn_fwd(s, q, k, k, Positions::contiguous(0, 3), kp, o, lse), Catch::Contains("qpos"));
      AttnShape bad = s;
      bad.window = -1;
      CHECK_THROWS_WITH(be.attn_fwd(bad, q, k, k, qp, kp, o, lse), Catch::Contains("window -1"));
      Tensor hq = t({1, 4, 2, 8}, DType::f16), hk = t({1, 6, 1, 8}, DType::f16), ho = t({1, 4, 2, 8}, DType::f16);
      CHECK_THROWS_WITH(be.attn_fwd(s, hq, hk, hk, qp, kp, ho, lse), Catch::Contains("no fp16"));
      CHECK_THROWS_WITH(be.rope(q, 1, 3, 2, 8, 16, qp, 10000.0, false), Catch::Contains("positions"));
    }
    CHECK(be.ran.empty());
    CHECK(be.model_flops() == 0);
    CHECK(be.compute_log().empty());
  }
}
