// Parameter counts checked before a model is built (see nn/models/param_count.h).
#include "nn/models/param_count.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "core/checked.h"
#include "core/error.h"

namespace hh::nn {

void ParamCount::add(const std::string& key, int64_t value, int64_t n) {
  total_ = checked_add(total_, n, str(where_, ": the parameter count (adding the part of ", key, " = ", value, ")"));
  if (n > part_) {
    part_ = n;
    key_ = key;
    value_ = value;
  }
}

int64_t ParamCount::mul(int64_t a, int64_t b, const std::string& what) const {
  return checked_mul(a, b, str(where_, ": ", what));
}

std::string ParamCount::largest() const {
  return str("the largest part (", part_, " parameters) comes from \"", key_, "\" = ", value_);
}

void ParamCount::check_memory() const {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;
  const double memory = static_cast<double>(pages) * static_cast<double>(page);
  // 2 bytes a parameter (bf16, the narrowest dtype a model is held in): a lower bound of what the
  // weights need, so only configs that cannot fit at all are refused here.
  const double bytes = static_cast<double>(total_) * 2.0;
  HH_CHECK(bytes <= memory, where_, ": the config describes ", total_, " parameters (", bytes / (1 << 30),
           " GiB even as bf16), more than this machine's memory (", memory / (1 << 30), " GiB); ", largest());
}

void ParamCount::check_stored(const SafeTensors& weights, const std::string& folder, const std::string& key,
                              int64_t layers, const std::string& container) const {
  int64_t stored = 0, stored_layers = 0;
  const std::string seg = "." + container + ".";
  for (const auto& [name, t] : weights.tensors) {
    stored = checked_add(stored, t.numel(), "the weights' value count");
    const std::string dotted = "." + name;
    for (size_t at = dotted.find(seg); at != std::string::npos; at = dotted.find(seg, at + 1)) {
      size_t i = at + seg.size(), end = i;
      while (end < dotted.size() && end - i < 10 && std::isdigit(static_cast<unsigned char>(dotted[end]))) ++end;
      if (end > i && end < dotted.size() && dotted[end] == '.')
        stored_layers = std::max<int64_t>(stored_layers, std::stoll(dotted.substr(i, end - i)) + 1);
    }
  }
  HH_CHECK(layers <= stored_layers, where_, ": \"", key, "\" = ", layers, " but the weights in ", folder, " hold ",
           stored_layers, " layer", stored_layers == 1 ? "" : "s", " (", container, ".0 to ", container, ".",
           stored_layers - 1, ")");
  HH_CHECK(total_ - stored <= (int64_t{1} << 24), where_, ": the config describes ", total_, " parameters but the weights in ",
           folder, " hold ", stored, " values; ", largest());
}

}  // namespace hh::nn
