#include "bench/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "bench/dump.h"
#include "bench/measure.h"
#include "bench/parts/balance.h"
#include "bench/parts/sublayer_mesh.h"
#include "bench/block/block.h"
#include "bench/numerics.h"
#include "bench/verify_bound.h"

namespace cpbench {

std::atomic<int> g_stop_signal{0};

std::string agree_on_errors(World& w, const std::string& my_error) {
  std::vector<double> any = {my_error.empty() ? 0.0 : 1.0};
  w.allreduce_max(any);
  if (any[0] == 0) return "";
  const std::vector<std::string> all = w.gather_strings(my_error);
  std::string joined;
  if (w.rank() == 0)
    for (size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty()) joined += (joined.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + all[r];
  w.bcast_string(joined);
  return joined;
}

Harness::Harness(const RunConfig& cfg, Backend& be, World& w, double timeout_s, Watchdog::OnFire on_timeout)
    : cfg_(cfg), be_(be), w_(w), trace_((w.barrier(), log_.now_ms())), meshes_(w, log_, be, cfg.comm) {
  log_.set_node_map(w.node_map(cfg.ranks_per_node));
  if (timeout_s > 0) watchdog_ = std::make_unique<Watchdog>(w, log_, timeout_s, std::move(on_timeout));
}

// The watchdog stops first (its thread reads the log); the meshes go with the members after it.
Harness::~Harness() { watchdog_.reset(); }

void Harness::set_current(const Job* job) {
  {
    std::lock_guard<std::mutex> lk(current_mu_);
    if (job) current_ = *job;
    else current_.reset();
  }
  if (watchdog_) watchdog_->set_job(job ? job->label + " seq=" + std::to_string(job->seq) : "");
}

bool Harness::current_job_failed(const std::string& reason, JobResult* out) const {
  std::lock_guard<std::mutex> lk(current_mu_);
  if (!current_) return false;
  *out = JobResult::of(*current_);
  out->status = "failed";
  out->reason = reason;
  return true;
}

bool Harness::stop_requested() {
  std::vector<double> sig = {double(g_stop_signal.load())};
  w_.allreduce_max(sig);
  interrupted_ = int(sig[0]);
  return interrupted_ != 0;
}

std::vector<JobResult> Harness::run(const std::vector<Job>& jobs, const Peak& peak, const Sink& sink) {
  std::vector<JobResult> results;
  int index = 0;
  for (const Job& job : jobs) {
    if (stop_requested()) break;
    ++index;
    if (w_.rank() == 0 && cfg_.progress)
      std::fprintf(stderr, "[%d/%zu] %s seq=%lld%s\n", index, jobs.size(), job.label.c_str(),
                   static_cast<long long>(job.seq), job.skip.empty() ? "" : " (skipped)");
    if (!job.skip.empty()) {
      JobResult r = JobResult::of(job);
      r.status = "skipped";
      r.reason = job.skip;
      results.push_back(r);
    } else {
      set_current(&job);
      results.push_back(run_one(job, peak));
      set_current(nullptr);
    }
    if (w_.rank() == 0 && sink) sink(results);
  }
  return results;
}

namespace {
// The model's bytes for `shape` (forward only under prefill: the backward's bytes are not sent).
CommPrediction predicted_for(const Strategy& model, const LayerShape& shape, int P, const MeshSpec& mesh, int rank) {
  CommPrediction predicted = model.predicted_bytes(shape, P, mesh, int64_t(dtype_size(shape.dtype)), shape.acc_bytes(), rank);
  if (!shape.forward_only()) return predicted;
  CommPrediction fwd_only;
  for (const CommShare& c : predicted.shares)
    if (c.phase == Phase::fwd) fwd_only.add(c.level, c.phase, c.to, c.bytes);
  return fwd_only;
}
}  // namespace

JobResult Harness::run_one(const Job& job, const Peak& peak) {
  const int P = w_.size();
  // --docs-resample: timed iteration i runs on pack i (drawn with seed + i). Strategies fix their
  // layout at setup, so each pack sets the strategy up again, outside the timed region (the timed
  // step still allocates nothing); each pack's bytes are checked against its own pack's model, and
  // the comm and balance fields describe the last pack (the shape left in `shape`).
  const int packs = cfg_.docs_resample ? cfg_.iters : 1;
  LayerShape shape = cfg_.shape(job.seq);
  JobResult result = JobResult::of(job);
  std::unique_ptr<Strategy> strat;
  be_.set_poison(false);
  be_.mem().reset_peaks();
  std::string reasons;
  RankMeasurement m;
  std::vector<double> pack_step, pack_flops, pack_ok;  // per pack: this rank's figures
  std::vector<std::vector<int64_t>> pack_lens;
  std::vector<double> fwd_all, bwd_all, step_all;
  double allocations = 0;
  for (int pack = 0; pack < packs && reasons.empty(); ++pack) {
    if (pack > 0) {  // the previous pack's strategy and buffers go before the next is set up
      shape = cfg_.shape(job.seq, pack);
      strat.reset();
      be_.release_cached_memory();
      log_.clear();
    }
    strat = job.info->make();
    // Setup: a failure here (out of memory, --mem-limit, a device error) is agreed on by all ranks
    // before anyone enters the timed loop's first barrier.
    std::string error;
    try {
      Mesh& mesh = meshes_.get(job_mesh_desc(*strat, job.mesh));
      StrategyEnv env{&be_, &w_, &mesh, shape, cfg_.seed, job.mesh};
      strat->setup(env);
      be_.synchronize();
    } catch (const std::exception& e) {
      error = std::string("setup: ") + e.what();
    }
    reasons = agree_on_errors(w_, error);
    if (!reasons.empty()) break;
    // Errors that every rank meets at the same point (a device error surfacing at the final
    // synchronisation) are agreed on here; a rank that fails while its peers wait in a collective
    // leaves them there until the watchdog (--timeout) ends the run.
    try {
      m = measure(*strat, be_, w_, log_, MeasureOptions{cfg_.warmup, packs > 1 ? 1 : cfg_.iters, shape.forward_only()});
    } catch (const std::exception& e) {
      error = std::string("run: ") + e.what();
    }
    reasons = agree_on_errors(w_, error);
    if (!reasons.empty() || packs == 1) break;
    // The model from a fresh instance: a set-up strategy may answer from the layout it holds.
    const CommPrediction pred = predicted_for(*job.info->make(), shape, P, job.mesh, w_.rank());
    pack_step.push_back(m.step_ms.at(0));
    pack_flops.push_back(m.summary.model_flops);
    pack_ok.push_back(int64_t(std::llround(m.summary.bytes_fwd)) == pred.fwd &&
                      int64_t(std::llround(m.summary.bytes_bwd)) == pred.bwd &&
                      int64_t(std::llround(m.summary.bytes_rec)) == pred.rec);
    pack_lens.push_back(shape.mask.doc_lens);
    fwd_all.insert(fwd_all.end(), m.fwd_ms.begin(), m.fwd_ms.end());
    bwd_all.insert(bwd_all.end(), m.bwd_ms.begin(), m.bwd_ms.end());
    step_all.insert(step_all.end(), m.step_ms.begin(), m.step_ms.end());
    allocations += m.summary.timed_allocations;
  }
  std::vector<ResampledPack> resampled;
  if (packs > 1 && reasons.empty()) {  // every rank reached here: the collectives match
    m.fwd_ms = fwd_all, m.bwd_ms = bwd_all, m.step_ms = step_all;
    m.summary.timed_allocations = allocations;
    std::vector<double> flops_max = pack_flops, flops_sum = pack_flops;
    w_.allreduce_max(pack_step);
    w_.allreduce_max(flops_max);
    w_.allreduce_sum(flops_sum);
    w_.allreduce_min(pack_ok);
    for (int i = 0; i < packs; ++i) {
      const double mean = flops_sum[size_t(i)] / P;
      resampled.push_back({pack_lens[size_t(i)], pack_step[size_t(i)],
                           mean > 0 ? flops_max[size_t(i)] / mean : 1.0, pack_ok[size_t(i)] > 0});
    }
  }
  int64_t kv_cache_bytes = 0, cache_tokens = 0;  // --cached: this rank's shard of the KV cache (Block::HeldShare)
  if (auto* block = dynamic_cast<Block*>(strat.get()); block && reasons.empty()) {
    const Block::HeldShare held = block->held_share();
    m.summary.block_parameters = double(held.parameters);
    m.summary.block_input_bytes = double(held.input_bytes);
    m.summary.tp = held.tp;
    m.summary.norm_parameters = double(held.norm_parameters);
    m.summary.mlp_parameters = double(held.mlp_parameters);
    m.summary.mlp_tp = held.mlp_tp;
    m.summary.core_activations = double(held.core_activations);
    kv_cache_bytes = held.kv_cache_bytes;
    cache_tokens = held.cache_tokens;  // every rank holds an equal shard: rank 0's is the report's
  }
  strat.reset();  // its destructor frees its buffers
  be_.release_cached_memory();
  log_.clear();
  if (!reasons.empty()) {
    result.status = "failed";
    result.reason = reasons;
    if (w_.rank() == 0) std::fprintf(stderr, "cpbench: %s seq=%lld failed: %s\n", job.label.c_str(),
                                     static_cast<long long>(job.seq), reasons.c_str());
    return result;
  }
  if (!cfg_.trace.empty()) trace_.add(w_, job.label + " seq=" + std::to_string(job.seq), m.compute, m.records);

  // ---- reduce over ranks ----
  std::vector<double> all;
  w_.gather_to_root(m.summary.pack(), all);
  std::vector<double> fwd = m.fwd_ms, bwd = m.bwd_ms, step = m.step_ms;  // per iteration: max over ranks
  w_.allreduce_max(fwd);
  w_.allreduce_max(bwd);
  w_.allreduce_max(step);
  if (w_.rank() != 0) return result;

  std::vector<RankSummary> ranks;
  for (int r = 0; r < P; ++r) ranks.push_back(RankSummary::unpack(&all[size_t(r) * RankSummary::kFields]));
  const auto model = job.info->make();
  // The model's bytes: one prediction for every rank, or each rank's own where they differ
  // (ring --balance dynamic), with each rank's tiers from its own prediction.
  std::vector<CommPrediction> predicted;
  std::vector<RankTiers> tiers;
  const MeshDesc desc = job_mesh_desc(*model, job.mesh);
  if (model->predicts_per_rank(shape)) {
    for (int r = 0; r < P; ++r) {
      predicted.push_back(predicted_for(*model, shape, P, job.mesh, r));
      tiers.push_back(predict_tiers(predicted.back(), desc, P, log_.node_map()).at(size_t(r)));
    }
  } else {
    predicted.push_back(predicted_for(*model, shape, P, job.mesh, 0));
    tiers = predict_tiers(predicted[0], desc, P, log_.node_map());
  }
  result.warning = placement_warning(job.info->name, desc, P, log_.node_map());
  result.timed = make_timed_result(ranks, summarize(fwd), summarize(bwd), summarize(step), m.records, predicted,
                                   peak, model->activation_bytes_estimate(shape, P, job.mesh), tiers,
                                   shape.recompute != Recompute::none);
  // The layer's FLOPs (shape: the last pack's, as the counted ones); single runs it on every rank.
  result.timed->expected_flops = expected_job_flops(shape, model->describe().replicated ? P : 1);
  result.timed->packs = std::move(resampled);
  result.timed->balance_scheme = balance_name(shape.balance);
  if (shape.balance != BalanceScheme::none && !model->describe().replicated) {
    // Per rank, the pairs of the ring position it works on (usp: its ring index's, which its t*U
    // ranks share, each for its slice of the heads).
    const BalancePositions positions = model->balance_positions(job.mesh, P);
    const TokenLayout layout = TokenLayout::build(shape.balance, shape, positions.count);
    for (int r = 0; r < P; ++r)
      result.timed->visible_pairs_per_rank.push_back(layout.visible_pairs(positions.of_rank[size_t(r)]));
    if (shape.balance == BalanceScheme::dynamic) {
      result.timed->cp_cap = shape.cp_cap > 0 ? shape.cp_cap : std::max<int64_t>(1, shape.N / P);
      result.timed->cp_degrees = layout.doc_groups();
      std::vector<int>& degrees = result.timed->degrees;
      for (int c : layout.doc_groups())
        if (std::find(degrees.begin(), degrees.end(), c) == degrees.end()) degrees.push_back(c);
      std::sort(degrees.begin(), degrees.end());
      for (int r = 0; r < P; ++r) {
        result.timed->tokens_per_rank.push_back(layout.positions_of(r).count());
        std::vector<int64_t> by;
        for (int c : degrees) by.push_back(layout.tokens_of(r, c));
        result.timed->tokens_by_degree.push_back(by);
      }
    }
  }
  if (shape.forward_only()) {
    InferenceResult inf;
    inf.cached = shape.pass.cached;
    inf.kv_cache_bytes = kv_cache_bytes;
    if (shape.decode()) {  // one timed step is S decode steps: TPOT is its median over S
      inf.pass = "decode";
      inf.decode_steps = shape.pass.steps;
      inf.new_tokens = shape.pass.steps;
      inf.tpot_ms = result.timed->step_ms.median / double(shape.pass.steps);
    } else {
      inf.ring_pass = ring_travel(shape.pass.travel).flag;
      inf.new_tokens = shape.new_tokens();
      inf.miss_rate = double(shape.new_tokens()) / double(shape.N);
      inf.ttft_ms = result.timed->step_ms.median;
    }
    result.timed->inference = inf;
  }
  if (result.timed->inference && shape.full_block) {
    // The longest cache that fits a rank (metrics.h): the capacity is --mem-limit, else the
    // device's memory (unknown on the CPU: no figure without --mem-limit).
    InferenceResult& inf = *result.timed->inference;
    inf.memory_capacity_bytes = cfg_.mem_limit_bytes > 0 ? cfg_.mem_limit_bytes : be_.device_memory_bytes();
    if (inf.memory_capacity_bytes > 0) {
      CacheFitInput in;
      in.capacity = inf.memory_capacity_bytes;
      in.layers = cfg_.layers;
      for (const RankSummary& r : ranks) in.block_parameters = std::max(in.block_parameters, int64_t(r.block_parameters));
      in.vocab = cfg_.vocab;
      in.dim = shape.D;
      const int64_t busiest = *std::max_element(result.timed->mem_per_rank.begin(), result.timed->mem_per_rank.end());
      in.step_bytes = std::max<int64_t>(0, busiest - result.timed->mem_weights - kv_cache_bytes);
      // Per cached token a rank holds, and the ranks that split the cache's tokens (P; usp its R
      // ring positions; single 1): from the shard it holds; without a cache, every KV head's k (d)
      // and v (d_v), P.
      in.cache_bytes_per_token = cache_tokens > 0 ? kv_cache_bytes / cache_tokens
                                                  : shape.B * int64_t(shape.G) * (shape.d + shape.vdim()) * int64_t(dtype_size(shape.dtype));
      in.shards = cache_tokens > 0 ? shape.pass.cached / cache_tokens : model->describe().replicated ? 1 : P;
      inf.fit = longest_cache(in);
    }
  }
  if (shape.full_block) {  // DESIGN's whole-model memory estimate, from the busiest rank's share
    ModelEstimateInput in;
    for (const RankSummary& r : ranks) {
      in.block_parameters = std::max(in.block_parameters, int64_t(r.block_parameters));
      in.block_input_bytes = std::max(in.block_input_bytes, int64_t(r.block_input_bytes));
      in.tp = std::max(in.tp, int(r.tp));
      in.norm_parameters = std::max(in.norm_parameters, int64_t(r.norm_parameters));
      in.mlp_parameters = std::max(in.mlp_parameters, int64_t(r.mlp_parameters));
      in.mlp_tp = std::max(in.mlp_tp, int(r.mlp_tp));
    }
    // single runs the whole layer alone on every rank (a job of one rank, P copies): nothing is
    // replicated across ranks within one job.
    in.replicas = model->describe().replicated ? 1 : P;
    in.shard = cfg_.shard;
    in.layers = cfg_.layers;
    in.vocab = cfg_.vocab;
    in.dim = shape.D;
    in.block_activation_bytes = result.timed->mem_activations;  // measured, maximum over ranks
    in.recompute = cfg_.recompute;
    for (const RankSummary& r : ranks)  // the busiest rank's activations: its core's share of them
      if (int64_t(r.mem_activations) == in.block_activation_bytes)
        in.core_activation_bytes = std::max(in.core_activation_bytes, int64_t(r.core_activations));
    result.timed->model_estimate = model_estimate(in);
    if (!shape.forward_only()) result.timed->grad_sync = grad_sync(*result.timed->model_estimate);
  }
  return result;
}

std::vector<JobResult> Harness::verify(const std::vector<Job>& jobs, const Sink& sink) {
  std::vector<JobResult> results;
  const int P = w_.size();
  const double tol = verify_tolerance(cfg_.dtype, cfg_.comm_dtype);
  // Under --cached only the forward runs (persistent-KV prefill, decode): the gradients are not
  // compared. Decode compares the S new tokens' x, y, k, v (from the cache slots), o and lse and
  // the weights; its q is recomputed on every rank and has no sharded share to check. MLA's decode
  // caches latents, not k, v: its o, lse and y check the absorbed attention instead.
  std::vector<std::string> names =
      dump_tensor_names(cfg_.block == "full", cfg_.sinks, cfg_.attention == "mla" ? &cfg_.mla_dims : nullptr);
  const bool decode = cfg_.pass == "decode", latent_cache = decode && cfg_.attention == "mla";
  // --dtype fp8 defines the forward only: its prefill compares what the forward writes, as --cached does.
  if (cfg_.cached > 0 || cfg_.fp8())
    names.erase(std::remove_if(names.begin(), names.end(),
                               [&](const std::string& n) {
                                 if (decode && (n == "dy" || n == "q")) return true;
                                 if (latent_cache && (n == "k" || n == "v")) return true;
                                 return n != "dy" && n[0] == 'd';
                               }),
                names.end());
  // --mla-travel latent: the tokens' owners form neither their keys' k, v (a Ulysses member expands
  // its heads of the group's latent) nor dk, dv (the levels return the latent's gradient,
  // latent_keys.h); the up-projections' gradients, y and dx check the whole path instead. The
  // reference still exports them (the bound's scales read its dk), and drops them before its dump.
  const std::vector<std::string> ref_names = names;
  if (cfg_.mla_travel == "latent")
    names.erase(std::remove_if(names.begin(), names.end(),
                               [](const std::string& n) { return n == "k" || n == "v" || n == "dk" || n == "dv"; }),
                names.end());
  const TestPerturbation perturb = test_perturbation();  // test only; checked at start-up (main)
  be_.set_poison(true);

  // Whether verify runs the backward after the forward: every pass but --cached ones (prefill after
  // a cache, decode) and --dtype fp8's (forward only); a prefill without a cache checks the
  // gradients of the layer it computes too. The float64 reference of --numerics follows it.
  auto runs_backward = [](const LayerShape& shape) { return shape.pass.cached == 0 && !shape.fp8; };
  // Runs one strategy once and returns its global tensors (complete on every rank), or the
  // agreed failure reasons.
  using Tensors = std::map<std::string, std::vector<float>>;
  auto run_and_export = [&](const StrategyInfo& info, const MeshSpec& ms, const LayerShape& shape, uint64_t seed,
                            Tensors& out, const std::vector<std::string>& exported) {
    std::unique_ptr<Strategy> strat = info.make();
    std::string error;
    try {
      Mesh& mesh = meshes_.get(job_mesh_desc(*strat, ms));
      StrategyEnv env{&be_, &w_, &mesh, shape, seed, ms};
      strat->setup(env);
    } catch (const std::exception& e) {
      error = std::string("setup: ") + e.what();
    }
    std::string reasons = agree_on_errors(w_, error);
    if (reasons.empty()) {
      try {
        log_.set_phase(Phase::fwd);
        strat->forward();
        log_.set_phase(Phase::bwd);
        if (runs_backward(shape)) strat->backward();
        be_.synchronize();
      } catch (const std::exception& e) {
        error = std::string("run: ") + e.what();
      }
      log_.set_phase(Phase::other);
      reasons = agree_on_errors(w_, error);
    }
    if (reasons.empty())
      for (const auto& n : exported) {
        int64_t count = 1;
        for (int64_t s : global_tensor_shape(n, shape)) count *= s;
        std::vector<float> g(size_t(count), 0.0f);
        strat->export_tensor(n, g);
        w_.allreduce_sum(g);
        out[n] = std::move(g);
      }
    strat.reset();  // its destructor frees its buffers
    be_.release_cached_memory();
    log_.clear();
    return reasons;
  };
  auto dump = [&](const std::string& label, const MeshSpec& ms, const LayerShape& shape, const Tensors& t) {
    if (!cfg_.dump.empty() && w_.rank() == 0) write_dump(cfg_, P, label, ms, shape, t);
  };

  // --numerics S (bench/numerics.h): every job runs on S seeds, each against single's run on the
  // same seed and a float64 attention of single's inputs; a job's result is complete after its
  // last seed. Without it the one --seed.
  const int seeds = std::max(1, cfg_.numerics);
  const std::vector<std::string> numerics_names = numerics_tensor_names(names);
  for (int64_t seq : cfg_.seqs) {
    if (stop_requested()) break;
    const LayerShape shape = cfg_.shape(seq);
    const StrategyInfo* single = find_strategy("single");
    const MeshSpec single_mesh = single->make()->resolve_mesh({}, shape, P);
    std::vector<JobResult> state(jobs.size());  // each job's result so far, over the seeds
    // Jobs with nothing more to run: skipped, or they (or single) failed to run on a seed. A tensor
    // over verify's bound on one seed still runs the others (numerics measures them).
    std::vector<char> done(jobs.size(), 0);
    for (int si = 0; si < seeds && !stop_requested(); ++si) {
      const uint64_t seed = cfg_.seed + uint64_t(si);
      const bool first = si == 0, last = si + 1 == seeds;
      Tensors ref;
      // The reference computes its gradients from the forward it kept: a --recompute under test
      // must reproduce them, and its poisoned activations (Block::recompute_forward) must not
      // reach the reference too, where they would match NaN for NaN.
      LayerShape ref_shape = shape;
      ref_shape.recompute = Recompute::none;
      const std::string ref_error = run_and_export(*single, single_mesh, ref_shape, seed, ref, ref_names);
      // The bound's scales m (verify_bound.h) come from the reference, once per seq and seed; the
      // ranks share the work by (batch row, kv head) and sum the squares.
      GradientScales scales;
      if (ref_error.empty() && shape.pass.cached == 0) {
        const GradientScales part = gradient_scale_squares(ref, shape, w_.rank(), P);
        std::vector<double> sums = {part.dq, part.dk};
        w_.allreduce_sum(sums);
        scales = {std::sqrt(sums[0]), std::sqrt(sums[1])};
      }
      // The float64 attention of single's inputs (collective; every rank holds it whole).
      Reference64 ref64;
      if (cfg_.numerics > 0 && ref_error.empty())
        ref64 = attention_reference64(ref, shape, runs_backward(shape), w_);
      for (const auto& n : ref_names)  // (the tensors latent travel does not form: above)
        if (std::find(names.begin(), names.end(), n) == names.end()) ref.erase(n);
      if (ref_error.empty() && first) dump("single", single_mesh, shape, ref);
      for (size_t ji = 0; ji < jobs.size(); ++ji) {
        const Job& job = jobs[ji];
        if (job.seq != seq || job.info->name == "single") continue;
        if (stop_requested()) break;
        JobResult& r = state[ji];
        if (first) r = JobResult::of(job);
        if (done[ji]) {
          // nothing more to run
        } else if (!job.skip.empty()) {
          r.status = "skipped";
          r.reason = job.skip;
          done[ji] = 1;
        } else if (!ref_error.empty()) {
          r.status = "failed";
          r.reason = "the reference (single) failed: " + ref_error;
          done[ji] = 1;
        } else {
          if (w_.rank() == 0 && cfg_.progress)
            std::fprintf(stderr, "verify %s seq=%lld%s\n", job.label.c_str(), static_cast<long long>(seq),
                         cfg_.numerics > 0 ? (" seed=" + std::to_string(seed)).c_str() : "");
          Tensors got;
          set_current(&job);
          const std::string reasons = run_and_export(*job.info, job.mesh, shape, seed, got, names);
          set_current(nullptr);
          if (!reasons.empty()) {
            r.status = "failed";
            r.reason = reasons;
            done[ji] = 1;
          } else {
            if (!perturb.tensor.empty())
              for (float& x : got.at(perturb.tensor)) x += perturb.value;
            if (first) dump(job.label, job.mesh, shape, got);
            // Over the seeds each tensor keeps its largest error.
            VerifyResult v = r.verify.value_or(VerifyResult{});
            v.tolerance = tol;
            for (const auto& n : names) {
              const double e = verify_error(got.at(n), ref.at(n), scales.of(n));
              const double shown = std::isfinite(e) ? e : 1e300;  // JSON has no infinity
              if (first) v.tensors.emplace_back(n, shown);
              for (auto& [name, worst] : v.tensors)
                if (name == n) worst = std::max(worst, shown);
              v.max_rel_l2 = std::max(v.max_rel_l2, shown);
            }
            v.passed = v.max_rel_l2 <= tol;
            if (!v.passed && r.status == "ok") {  // the first seed over the bound gives the reason
              std::ostringstream why;
              why << "verification failed: " << v.worst_tensor() << " error=" << v.max_rel_l2 << " > " << tol
                  << " (||a-b|| / max(||b||, m))";
              if (cfg_.numerics > 0) why << " on seed " << seed;
              r.status = "failed";
              r.reason = why.str();
            }
            r.verify = v;
            if (cfg_.numerics > 0) {
              if (!r.numerics) r.numerics = NumericsResult{};
              r.numerics->add(seed, numerics_names, got, ref, ref64, shape.dtype);
            }
          }
        }
        if (last) {
          results.push_back(r);
          if (w_.rank() == 0 && sink) sink(results);
        }
      }
    }
  }
  be_.set_poison(false);
  return results;
}

}  // namespace cpbench
