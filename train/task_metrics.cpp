#include "train/task_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"

namespace hh::train {

namespace {

template <typename A, typename B>
void check_pair(const char* fn, const std::vector<A>& a, const std::vector<B>& b) {
  HH_CHECK(!a.empty(), fn, ": empty input");
  HH_CHECK(a.size() == b.size(), fn, ": inputs of different sizes (", a.size(), " and ", b.size(), ")");
}

void check_finite(const char* fn, const std::vector<double>& v, const char* which) {
  for (size_t i = 0; i < v.size(); ++i)
    HH_CHECK(std::isfinite(v[i]), fn, ": ", which, "[", i, "] is not finite (", v[i], ")");
}

}  // namespace

double accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& label) {
  check_pair("accuracy", pred, label);
  int64_t hits = 0;
  for (size_t i = 0; i < pred.size(); ++i) hits += pred[i] == label[i];
  return static_cast<double>(hits) / static_cast<double>(pred.size());
}

double f1_binary(const std::vector<int64_t>& pred, const std::vector<int64_t>& label, int64_t positive) {
  check_pair("f1_binary", pred, label);
  int64_t tp = 0, fp = 0, fn = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    bool p = pred[i] == positive, t = label[i] == positive;
    tp += p && t;
    fp += p && !t;
    fn += !p && t;
  }
  int64_t denom = 2 * tp + fp + fn;
  return denom == 0 ? 0.0 : 2.0 * static_cast<double>(tp) / static_cast<double>(denom);
}

double matthews_corrcoef(const std::vector<int64_t>& pred, const std::vector<int64_t>& label) {
  check_pair("matthews_corrcoef", pred, label);
  // Counts per class: t_k (true), p_k (predicted); trace = correct predictions.
  std::map<int64_t, std::pair<double, double>> counts;
  double correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    counts[label[i]].first += 1;
    counts[pred[i]].second += 1;
    correct += pred[i] == label[i];
  }
  double n = static_cast<double>(pred.size()), tp_dot = 0, pp = 0, tt = 0;
  for (const auto& kv : counts) {
    tp_dot += kv.second.first * kv.second.second;
    tt += kv.second.first * kv.second.first;
    pp += kv.second.second * kv.second.second;
  }
  double cov_tp = correct * n - tp_dot, cov_pp = n * n - pp, cov_tt = n * n - tt;
  if (cov_pp * cov_tt == 0) return 0.0;
  return cov_tp / std::sqrt(cov_pp * cov_tt);
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  check_pair("pearson", x, y);
  HH_CHECK(x.size() >= 2, "pearson: needs at least 2 values, got ", x.size());
  check_finite("pearson", x, "x");
  check_finite("pearson", y, "y");
  double n = static_cast<double>(x.size());
  double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double dx = x[i] - mx, dy = y[i] - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx == 0 || syy == 0) return 0.0;  // constant input: undefined, see the header
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> ranks(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    double r = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;  // mean of ranks i+1 .. j+1
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = r;
    i = j + 1;
  }
  return ranks;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  check_pair("spearman", x, y);
  HH_CHECK(x.size() >= 2, "spearman: needs at least 2 values, got ", x.size());
  check_finite("spearman", x, "x");
  check_finite("spearman", y, "y");
  return pearson(average_ranks(x), average_ranks(y));
}

namespace {

std::vector<int64_t> class_ids(const char* which, const std::vector<double>& v) {
  std::vector<int64_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    HH_CHECK(std::isfinite(v[i]) && v[i] == std::floor(v[i]) && std::fabs(v[i]) < 9.0e15,
             "glue_metrics: ", which, "[", i, "] = ", v[i], " is not a class id (an integer)");
    out[i] = static_cast<int64_t>(v[i]);
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, double>> glue_metrics(const std::vector<std::string>& names,
                                                         const std::vector<double>& predictions,
                                                         const std::vector<double>& labels) {
  HH_CHECK(!names.empty(), "glue_metrics: no metric names");
  check_pair("glue_metrics", predictions, labels);
  std::vector<std::pair<std::string, double>> out;
  for (const std::string& name : names) {
    double v = 0;
    if (name == "accuracy") {
      v = accuracy(class_ids("predictions", predictions), class_ids("labels", labels));
    } else if (name == "f1") {
      v = f1_binary(class_ids("predictions", predictions), class_ids("labels", labels));
    } else if (name == "mcc") {
      v = matthews_corrcoef(class_ids("predictions", predictions), class_ids("labels", labels));
    } else if (name == "pearson") {
      v = pearson(predictions, labels);
    } else if (name == "spearman") {
      v = spearman(predictions, labels);
    } else {
      fail(str("glue_metrics: unknown metric '", name, "' (known: accuracy, f1, mcc, pearson, spearman)"));
    }
    out.emplace_back(name, v);
  }
  return out;
}

std::vector<std::string> glue_task_metrics(const std::string& task) {
  if (task == "cola") return {"mcc"};
  if (task == "sst2" || task == "mnli" || task == "qnli" || task == "rte" || task == "wnli") return {"accuracy"};
  if (task == "mrpc" || task == "qqp") return {"accuracy", "f1"};
  if (task == "stsb") return {"pearson", "spearman"};
  fail(str("glue_task_metrics: unknown task '", task, "' (known: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli)"));
}

// ---- ROUGE

std::vector<std::string> rouge_tokenize(const std::string& text) {
  std::vector<std::string> tokens;
  std::string cur;
  for (char ch : text) {
    auto u = static_cast<unsigned char>(ch);
    char c = (u >= 'A' && u <= 'Z') ? static_cast<char>(u - 'A' + 'a') : ch;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      cur.push_back(c);
    } else if (!cur.empty()) {
      tokens.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) tokens.push_back(cur);
  return tokens;
}

namespace {

RougeScore make_score(double matches, double pred_count, double ref_count) {
  RougeScore s;
  s.precision = pred_count > 0 ? matches / pred_count : 0.0;
  s.recall = ref_count > 0 ? matches / ref_count : 0.0;
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

RougeScore rouge_n(const std::vector<std::string>& pred, const std::vector<std::string>& ref, size_t n) {
  auto ngrams = [n](const std::vector<std::string>& t) {
    std::map<std::vector<std::string>, int64_t> counts;
    for (size_t i = 0; i + n <= t.size(); ++i) ++counts[std::vector<std::string>(t.begin() + i, t.begin() + i + n)];
    return counts;
  };
  auto p = ngrams(pred), r = ngrams(ref);
  int64_t matches = 0, p_total = 0, r_total = 0;
  for (const auto& kv : p) p_total += kv.second;
  for (const auto& kv : r) {
    r_total += kv.second;
    auto it = p.find(kv.first);
    if (it != p.end()) matches += std::min(it->second, kv.second);
  }
  return make_score(static_cast<double>(matches), static_cast<double>(p_total), static_cast<double>(r_total));
}

// Length of the longest common subsequence: the classic table, kept one row at a time.
size_t lcs_length(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<size_t> prev(b.size() + 1, 0), row(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j)
      row[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], row[j - 1]);
    std::swap(prev, row);
  }
  return prev[b.size()];
}

}  // namespace

Rouge rouge(const std::string& prediction, const std::string& reference) {
  std::vector<std::string> p = rouge_tokenize(prediction), r = rouge_tokenize(reference);
  Rouge out;
  out.rouge1 = rouge_n(p, r, 1);
  out.rouge2 = rouge_n(p, r, 2);
  if (!p.empty() && !r.empty())
    out.rougeL = make_score(static_cast<double>(lcs_length(r, p)), static_cast<double>(p.size()),
                            static_cast<double>(r.size()));
  return out;
}

Rouge rouge_corpus(const std::vector<std::string>& predictions, const std::vector<std::string>& references) {
  check_pair("rouge_corpus", predictions, references);
  Rouge sum;
  auto add = [](RougeScore& acc, const RougeScore& s) {
    acc.precision += s.precision;
    acc.recall += s.recall;
    acc.f1 += s.f1;
  };
  for (size_t i = 0; i < predictions.size(); ++i) {
    Rouge one = rouge(predictions[i], references[i]);
    add(sum.rouge1, one.rouge1);
    add(sum.rouge2, one.rouge2);
    add(sum.rougeL, one.rougeL);
  }
  double n = static_cast<double>(predictions.size());
  for (RougeScore* s : {&sum.rouge1, &sum.rouge2, &sum.rougeL}) {
    s->precision /= n;
    s->recall /= n;
    s->f1 /= n;
  }
  return sum;
}

}  // namespace hh::train
