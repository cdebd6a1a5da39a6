#include "bench/workloads.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace cpbench {

// Generated at build time from configs/workloads/ (bench/CMakeLists.txt).
extern const char* const kEmbeddedWorkloads[];
extern const int kNumEmbeddedWorkloads;

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> list = [] {
    std::vector<Workload> v;
    for (int i = 0; i < kNumEmbeddedWorkloads; ++i) {
      const auto j = nlohmann::json::parse(kEmbeddedWorkloads[i]);
      Workload w;
      w.name = j.at("name").get<std::string>();
      w.description = j.value("description", "");
      if (j.contains("weights")) w.weights = j.at("weights").get<std::vector<int64_t>>();
      if (j.contains("distribution")) {
        const auto& d = j.at("distribution");
        w.source = d.at("source").get<std::string>();
        for (const auto& c : d.at("components"))
          w.components.push_back({c.at("name").get<std::string>(), c.at("share").get<double>(),
                                  c.at("mean_tokens").get<double>()});
      }
      // A config error is the build's, not the user's: fail loudly on first use.
      if (w.weights.empty() == w.components.empty())
        throw std::logic_error("configs/workloads/" + w.name + ".json: needs exactly one of weights, distribution");
      for (const auto& c : w.components)
        if (!(c.share > 0) || !(c.mean_tokens >= 1))
          throw std::logic_error("configs/workloads/" + w.name + ".json: component '" + c.name +
                                 "' needs share > 0 and mean_tokens >= 1");
      v.push_back(std::move(w));
    }
    std::sort(v.begin(), v.end(), [](const Workload& a, const Workload& b) { return a.name < b.name; });
    return v;
  }();
  return list;
}

namespace {

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  std::string shown;
  for (char ch : spec) shown += (ch >= 0x20 && ch < 0x7f) ? std::string(1, ch) : std::string("?");
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  throw std::invalid_argument("docs '" + shown + "': " + why);
}

// A strict positive-or-zero decimal integer (no sign, no spaces); false if not one or too big.
bool parse_count(const std::string& t, int64_t& out) {
  if (t.empty() || t.size() > 19) return false;
  for (char ch : t)
    if (ch < '0' || ch > '9') return false;
  errno = 0;
  const long long v = std::strtoll(t.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  out = v;
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// splitmix64: the same sequence on every rank and every platform.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from the top 53 bits.
double next_uniform(uint64_t& state) { return double(next_random(state) >> 11) * 0x1.0p-53; }

// One pack drawn from a distribution workload: per document, a component by its share, then a
// length from an exponential of the component's mean (at least one token), until N is filled;
// the last document takes the rest. The published tables give shares and means only, so the
// exponential (the maximum-entropy law for a given mean) is this tool's choice, not a figure.
std::vector<int64_t> sample_pack(const std::string& spec, const Workload& w, int64_t N, uint64_t seed) {
  double total = 0;
  for (const auto& c : w.components) total += c.share;
  std::vector<int64_t> lens;
  uint64_t state = seed ^ 0x5A3B1E5D15757A7Full;
  int64_t left = N;
  while (left > 0) {
    if (lens.size() >= (size_t(1) << 24))
      bad(spec, "more than 2^24 documents for seq=" + std::to_string(N) + "; use a shorter seq");
    double pick = next_uniform(state) * total;
    size_t k = 0;
    while (k + 1 < w.components.size() && pick >= w.components[k].share) pick -= w.components[k++].share;
    const double x = -w.components[k].mean_tokens * std::log1p(-next_uniform(state));
    const int64_t len = x >= double(left) ? left : std::max<int64_t>(1, int64_t(std::ceil(x)));
    lens.push_back(len);
    left -= len;
  }
  return lens;
}

std::string workload_names() {
  std::string names;
  for (const auto& w : workloads()) names += (names.empty() ? "" : ", ") + w.name;
  return names;
}

}  // namespace

std::vector<int64_t> resolve_doc_lens(const std::string& spec, int64_t N, uint64_t seed) {
  if (N <= 0) bad(spec, "seq must be positive, got " + std::to_string(N));
  if (spec.empty()) bad(spec, "empty spec");
  const std::string n = std::to_string(N);

  if (spec.rfind("equal:", 0) == 0) {
    int64_t K = 0;
    if (!parse_count(spec.substr(6), K) || K < 1) bad(spec, "K must be an integer >= 1");
    if (N % K != 0) bad(spec, "K=" + std::to_string(K) + " does not divide seq=" + n);
    return std::vector<int64_t>(size_t(K), N / K);
  }

  if (spec.rfind("random:", 0) == 0) {
    const auto parts = split(spec.substr(7), ':');
    int64_t lo = 0, hi = 0;
    if (parts.size() != 2 || !parse_count(parts[0], lo) || !parse_count(parts[1], hi))
      bad(spec, "expected random:MIN:MAX with integers MIN and MAX");
    if (lo < 1) bad(spec, "MIN must be >= 1, got " + std::to_string(lo));
    if (lo > hi) bad(spec, "MIN=" + std::to_string(lo) + " is greater than MAX=" + std::to_string(hi));
    if (lo > N) bad(spec, "MIN=" + std::to_string(lo) + " is greater than seq=" + n);
    // Documents are at least MIN tokens (but the last), so at most N/MIN + 1 of them.
    if (N / lo > (int64_t(1) << 24)) bad(spec, "more than 2^24 documents for seq=" + n + "; raise MIN");
    std::vector<int64_t> lens;
    uint64_t state = seed ^ 0xD0C5D0C5D0C5D0C5ull;
    int64_t left = N;
    while (left > 0) {
      const uint64_t span = uint64_t(hi - lo) + 1;
      const int64_t len = std::min(left, lo + int64_t(next_random(state) % span));
      lens.push_back(len);
      left -= len;
    }
    return lens;
  }

  if (spec.find_first_not_of("0123456789,") == std::string::npos) {
    std::vector<int64_t> lens;
    int64_t sum = 0;
    for (const auto& item : split(spec, ',')) {
      int64_t len = 0;
      if (!parse_count(item, len)) bad(spec, "'" + item + "' is not a document length");
      if (len < 1) bad(spec, "document " + std::to_string(lens.size()) + " has length 0 (lengths must be >= 1)");
      if (len > N - sum) bad(spec, "lengths sum to more than seq=" + n);
      sum += len;
      lens.push_back(len);
    }
    if (sum != N) bad(spec, "lengths sum to " + std::to_string(sum) + ", not seq=" + n);
    return lens;
  }

  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  for (const auto& w : workloads()) {
    if (w.name != name) continue;
    if (w.sampled()) {
      uint64_t pack_seed = seed;
      if (colon != std::string::npos) {
        int64_t s = 0;
        if (!parse_count(spec.substr(colon + 1), s)) bad(spec, "expected NAME:SEED with an integer SEED >= 0");
        pack_seed = uint64_t(s);
      }
      return sample_pack(spec, w, N, pack_seed);
    }
    if (colon != std::string::npos)
      bad(spec, "workload '" + name + "' is a fixed pack (scaled to N), not a distribution: it takes no :SEED");
    const int64_t total = std::accumulate(w.weights.begin(), w.weights.end(), int64_t(0));
    if (N > std::numeric_limits<int64_t>::max() / total)
      bad(spec, "seq=" + n + " is too large to scale this workload");
    const auto docs = int64_t(w.weights.size());
    if (N < docs)
      bad(spec, "workload of " + std::to_string(docs) + " documents needs seq >= " + std::to_string(docs) +
                    ", got seq=" + n);
    std::vector<int64_t> lens(w.weights.size());
    std::vector<std::pair<int64_t, size_t>> remainders;  // (fraction * total, index)
    int64_t sum = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      lens[i] = N * w.weights[i] / total;
      sum += lens[i];
      remainders.emplace_back(N * w.weights[i] % total, i);
    }
    std::stable_sort(remainders.begin(), remainders.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t k = 0; sum < N; ++k, ++sum) lens[remainders[k].second] += 1;
    for (size_t i = 0; i < lens.size(); ++i)
      if (lens[i] < 1)
        bad(spec, "seq=" + n + " gives document " + std::to_string(i) + " no token (weights " +
                      std::to_string(w.weights[i]) + "/" + std::to_string(total) + "); use a longer seq");
    return lens;
  }
  bad(spec, "not a list of lengths, equal:K, random:MIN:MAX or a workload (workloads: " + workload_names() + ")");
}

bool doc_spec_is_sampled(const std::string& spec) {
  if (spec.rfind("random:", 0) == 0) return true;
  const std::string name = spec.substr(0, spec.find(':'));
  for (const auto& w : workloads())
    if (w.name == name) return w.sampled();
  return false;
}

}  // namespace cpbench
