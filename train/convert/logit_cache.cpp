#include "train/convert/logit_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/safetensors.h"

namespace hh::train {

namespace {
constexpr const char* kFingerprintKey = "hedgehog.logit_cache";
constexpr const char* kBatchKey = "hedgehog.logit_cache.batch";

// The shard's three tensors, checked against each other; empty `why` when they fit.
TopkLogits unpack(const SafeTensors& f, std::string& why) {
  TopkLogits t;
  auto take = [&](const char* name, DType want, Tensor& out) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) why = str("it lacks '", name, "'");
    else if (it->second.dtype() != want) why = str("'", name, "' is ", it->second.dtype(), ", expected ", want);
    else out = it->second;
  };
  take("values", DType::f32, t.values);
  take("indices", DType::i32, t.indices);
  take("lse", DType::f64, t.lse);
  if (why.empty() && (t.values.dim() != 2 || t.indices.shape() != t.values.shape() ||
                      t.lse.shape() != Shape{t.values.size(0)}))
    why = str("shapes ", t.values.shape(), ", ", t.indices.shape(), " and ", t.lse.shape(), " do not fit");
  return t;
}
}  // namespace

LogitCache parse_logit_cache(const std::string& s) {
  if (s == "none") return LogitCache::none;
  if (s == "topk") return LogitCache::topk;
  fail(str("unknown logit cache '", s, "' (none or topk)"));
}

const char* logit_cache_name(LogitCache c) { return c == LogitCache::topk ? "topk" : "none"; }

TopkLogits topk_logits(const Tensor& logits, int64_t k, double temperature) {
  HH_CHECK(logits.dim() == 2, "logit cache: expected logits (N,V), got ", logits.shape());
  const int64_t N = logits.size(0), V = logits.size(1);
  HH_CHECK(k >= 1 && k <= V, "logit cache: top-", k, " of a vocabulary of ", V, " (K must be in 1..", V, ")");
  HH_CHECK(V <= static_cast<int64_t>(INT32_MAX), "logit cache: a vocabulary of ", V, " exceeds i32 token ids");
  HH_CHECK(temperature > 0, "logit cache: temperature must be > 0, got ", temperature);
  NoGradGuard ng;
  const Tensor host = logits.detach().to(Device::cpu()).to(DType::f32).contiguous();
  TopkLogits t;
  t.values = empty({N, k}, {DType::f32});
  t.indices = empty({N, k}, {DType::i32});
  t.lse = empty({N}, {DType::f64});
  const float* x = host.data<float>();
  float* values = t.values.data<float>();
  int32_t* ids = t.indices.data<int32_t>();
  double* lse = t.lse.data<double>();
  int64_t bad = -1;  // a row with a NaN or +inf, or all -inf (the lowest such row)
  // Per row, O(V): the max and log-sum-exp in double, the K-th largest value by nth_element on a
  // copy, then the ids above it and (lowest ids first) those equal to it, sorted descending.
#pragma omp parallel
  {
    std::vector<float> buf(static_cast<size_t>(V));
    std::vector<std::pair<float, int32_t>> top;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* row = x + n * V;
      float m = -INFINITY;
      bool finite = true;
      for (int64_t v = 0; v < V; ++v) {
        finite = finite && !std::isnan(row[v]) && row[v] != INFINITY;
        m = std::max(m, row[v]);
      }
      if (!finite || m == -INFINITY) {
#pragma omp critical
        bad = bad < 0 ? n : std::min(bad, n);
        continue;
      }
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp((static_cast<double>(row[v]) - m) / temperature);
      lse[n] = static_cast<double>(m) / temperature + std::log(z);
      std::copy(row, row + V, buf.begin());
      std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), std::greater<float>());
      const float kth = buf[static_cast<size_t>(k - 1)];
      top.clear();
      for (int64_t v = 0; v < V; ++v)
        if (row[v] > kth) top.emplace_back(row[v], static_cast<int32_t>(v));
      for (int64_t v = 0; v < V && static_cast<int64_t>(top.size()) < k; ++v)
        if (row[v] == kth) top.emplace_back(row[v], static_cast<int32_t>(v));
      std::sort(top.begin(), top.end(), [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      for (int64_t j = 0; j < k; ++j) {
        values[n * k + j] = top[static_cast<size_t>(j)].first;
        ids[n * k + j] = top[static_cast<size_t>(j)].second;
      }
    }
  }
  HH_CHECK(bad < 0, "logit cache: the teacher's logits at position ", bad, " are not finite");
  return t;
}

std::string logit_cache_fingerprint(const std::string& conversion, int64_t k, double temperature) {
  char t[32];
  std::snprintf(t, sizeof t, "%.17g", temperature);
  return nlohmann::json{{"conversion", conversion}, {"k", k}, {"temperature", t}}.dump();
}

LogitShards::LogitShards(const std::string& folder, const std::string& prefix, std::string fingerprint)
    : shards_(folder, prefix), fingerprint_(std::move(fingerprint)) {}

std::vector<ShardFolder::Stamp> LogitShards::stamp(uint64_t batch) const {
  return {{kFingerprintKey, fingerprint_, "was written by another teacher, data, K or temperature"},
          {kBatchKey, checksum_hex(batch), "holds the teacher's logits of another batch than the one being trained on"}};
}

bool LogitShards::valid(size_t i, uint64_t batch) const {
  std::string why;
  const std::optional<SafeTensors> f = shards_.read_stamped(i, stamp(batch), why);
  if (f) unpack(*f, why);
  return f && why.empty();  // else rebuilt
}

int64_t LogitShards::put(size_t i, const TopkLogits& t) const {
  return shards_.write_stamped(i, {{"values", t.values}, {"indices", t.indices}, {"lse", t.lse}}, stamp(t.batch));
}

TopkLogits LogitShards::get(size_t i, uint64_t batch, Device device) const {
  const std::string p = shards_.path(i);
  std::string why;
  const std::optional<SafeTensors> f = shards_.read_stamped(i, stamp(batch), why);
  HH_CHECK(f, "logit cache: ", p, " ", why);
  TopkLogits t = unpack(*f, why);
  HH_CHECK(why.empty(), "logit cache: ", p, ": ", why);
  t.values = t.values.to(device);
  t.indices = t.indices.to(device);
  t.lse = t.lse.to(device);
  t.batch = batch;
  return t;
}

void LogitShards::remove(size_t n) const {
  for (size_t i = 0; i < n; ++i) shards_.remove(i);
}

}  // namespace hh::train
