// Inference weights prepared once (core/prepacked.h): f32 panels for the packed GEMM, int8 slivers
// for the int8 GEMM, and the cache that keeps them while the weight is unchanged.
#include "core/prepacked.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/backend.h"
#include "core/cpu/qgemm.h"
#include "core/cpu/sgemm_kernels.h"
#include "core/error.h"

namespace hh {
namespace {

std::shared_ptr<void> aligned_block(size_t bytes) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  HH_CHECK(p != nullptr, "out of memory for a ", bytes, "-byte prepared weight");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// values (n · k row-major) -> qgemm's slivers, plus comp; scales padded.
std::shared_ptr<PreparedWeight> pack_int8(const int8_t* values, std::vector<float> scales, int64_t n, int64_t k) {
  auto out = std::make_shared<PreparedWeight>();
  out->format = WeightFormat::int8;
  out->isa = cpu_isa();
  out->out_features = n;
  out->in_features = k;
  const int64_t kp = qgemm::padded_k(k), np = qgemm::padded_n(n);
  out->bytes = static_cast<size_t>(np * kp);
  out->data = aligned_block(out->bytes);
  auto* dst = static_cast<int8_t*>(out->data.get());
  std::memset(dst, 0, out->bytes);
  out->comp.assign(static_cast<size_t>(np), 0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t s = r / qgemm::kNR, j = r % qgemm::kNR;
    int32_t sum = 0;
    for (int64_t c = 0; c < k; ++c) {
      const int8_t v = values[r * k + c];
      dst[s * kp * qgemm::kNR + (c / qgemm::kGroup) * qgemm::kGroup * qgemm::kNR + j * qgemm::kGroup + c % qgemm::kGroup] = v;
      sum += v;
    }
    out->comp[static_cast<size_t>(r)] = 128 * sum;
  }
  scales.resize(static_cast<size_t>(np), 1.0f);
  out->scales = std::move(scales);
  return out;
}

}  // namespace

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32: return "f32";
    case WeightFormat::int8: return "int8";
    case WeightFormat::bf16: return "bf16";
  }
  return "?";
}

WeightFormat parse_weight_format(const std::string& name) {
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::int8, WeightFormat::bf16})
    if (name == weight_format_name(f)) return f;
  throw Error("unknown weight format '" + name + "' (expected f32, int8 or bf16)");
}

void quantize_per_channel(const float* w, int64_t n, int64_t k, std::vector<int8_t>& values, std::vector<float>& scales) {
  values.assign(static_cast<size_t>(n * k), 0);
  scales.assign(static_cast<size_t>(n), 1.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = w + r * k;
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) {
      HH_CHECK(std::isfinite(row[c]), "int8 quantization: weight row ", r, " has a non-finite value (",
               row[c], ") at column ", c);
      amax = std::max(amax, std::fabs(row[c]));
    }
    if (amax == 0.0f) continue;  // all zeros: values 0, scale 1
    const float inv = 127.0f / amax;
    scales[static_cast<size_t>(r)] = amax / 127.0f;
    for (int64_t c = 0; c < k; ++c)
      values[static_cast<size_t>(r * k + c)] =
          static_cast<int8_t>(std::clamp(std::nearbyint(row[c] * inv), -127.0f, 127.0f));
  }
}

std::shared_ptr<const PreparedWeight> prepare_int8(const std::vector<int8_t>& values, const std::vector<float>& scales,
                                                   int64_t n, int64_t k) {
  HH_CHECK(n > 0 && k > 0, "int8 weight: sizes must be positive, got ", n, " x ", k);
  HH_CHECK(static_cast<int64_t>(values.size()) == n * k, "int8 weight: ", values.size(),
           " values for a (", n, ", ", k, ") weight");
  HH_CHECK(static_cast<int64_t>(scales.size()) == n, "int8 weight: ", scales.size(), " scales for ", n,
           " output channels (expected one per channel)");
  for (size_t i = 0; i < scales.size(); ++i)
    HH_CHECK(std::isfinite(scales[i]) && scales[i] > 0.0f, "int8 weight: scale ", i, " is ", scales[i],
             " (expected a finite positive number)");
  for (size_t i = 0; i < values.size(); ++i)
    HH_CHECK(values[i] >= -127, "int8 weight: value ", i, " is -128 (expected [-127, 127])");
  return pack_int8(values.data(), scales, n, k);
}

std::vector<int8_t> int8_values(const PreparedWeight& w) {
  HH_CHECK(w.format == WeightFormat::int8, "int8_values: the weight is ", weight_format_name(w.format));
  const int64_t n = w.out_features, k = w.in_features, kp = qgemm::padded_k(k);
  const auto* src = static_cast<const int8_t*>(w.data.get());
  std::vector<int8_t> out(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      out[static_cast<size_t>(r * k + c)] = src[(r / qgemm::kNR) * kp * qgemm::kNR +
                                                (c / qgemm::kGroup) * qgemm::kGroup * qgemm::kNR +
                                                (r % qgemm::kNR) * qgemm::kGroup + c % qgemm::kGroup];
  return out;
}

std::shared_ptr<const PreparedWeight> prepare_weight(const Tensor& weight, WeightFormat format) {
  HH_CHECK(weight.defined() && weight.dim() == 2, "prepare_weight: expected a 2-d weight (out, in)");
  HH_CHECK(weight.device().is_cpu(), "prepared (", weight_format_name(format),
           ") weights are CPU only; the weight is on ", weight.device());
  const int64_t n = weight.size(0), k = weight.size(1);
  if (format == WeightFormat::f32 || format == WeightFormat::bf16) {
    HH_CHECK(weight.dtype() == DType::f32, "prepare_weight: ", weight_format_name(format),
             " packing needs an f32 weight, got ", weight.dtype());
    const sgemm::Kernel* K = sgemm::kernel_for(cpu_isa());
    if (n == 0 || k == 0 || (K == nullptr && format == WeightFormat::f32)) return nullptr;
    auto out = std::make_shared<PreparedWeight>();
    out->format = format;
    out->isa = cpu_isa();
    out->out_features = n;
    out->in_features = k;
    if (K == nullptr) {  // bf16 without a packed kernel: the rounded weight, widened, for the plain GEMM
      auto wt = std::make_shared<Tensor>(empty({n, k}, {DType::f32, Device::cpu()}));
      const float* src = weight.data<float>();
      float* dst = wt->data<float>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)
          dst[r * k + c] = bf16_to_float(float_to_bf16(src[r * weight.stride(0) + c * weight.stride(1)]));
      out->bytes = static_cast<size_t>(n * k) * sizeof(float);
      out->data = std::shared_ptr<void>(wt, wt.get());  // a Tensor, (n, k) contiguous
      return out;
    }
    const int64_t floats = sgemm::prepacked_b_floats(*K, k, n);
    out->bytes = static_cast<size_t>(floats) * (format == WeightFormat::f32 ? sizeof(float) : sizeof(uint16_t));
    out->data = aligned_block(out->bytes);
    // B = weightᵀ (k, n): row stride weight.stride(1), column stride weight.stride(0).
    if (format == WeightFormat::f32) {
      sgemm::prepack_b(*K, weight.data<float>(), weight.stride(1), weight.stride(0), k, n,
                       static_cast<float*>(out->data.get()));
      return out;
    }
    const std::shared_ptr<void> panels = aligned_block(static_cast<size_t>(floats) * sizeof(float));  // f32 first
    float* f = static_cast<float*>(panels.get());
    sgemm::prepack_b(*K, weight.data<float>(), weight.stride(1), weight.stride(0), k, n, f);
    auto* dst = static_cast<uint16_t*>(out->data.get());
    for (int64_t row = 0; row < floats; row += K->nr)  // each sliver row of nr values, bf16_column's order
      for (int64_t p = 0; p < K->nr; ++p) dst[row + p] = float_to_bf16(f[row + sgemm::bf16_column(p, K->nr)]);
    return out;
  }
  Tensor w = empty({n, k}, {DType::f32, Device::cpu()});  // contiguous f32 (any dtype or strides in)
  if (w.numel() > 0) backend_of(w).copy(w, weight);
  std::vector<int8_t> values;
  std::vector<float> scales;
  quantize_per_channel(w.data<float>(), n, k, values, scales);
  return pack_int8(values.data(), std::move(scales), n, k);
}

bool prepared_f32_applies(const PreparedWeight& w, int64_t rows) {
  // Nothing of a prepacked weight is packed per call, so the packed engine also takes the few-row
  // products (a decoding step: 1 to 3 rows) that it leaves to Eigen's GEMV when it would have to
  // pack B: the weight is streamed once, and each row gets the bits it has in a larger product.
  return w.format == WeightFormat::f32 && w.isa == cpu_isa() && rows >= 1 &&
         sgemm::packed_applies(std::max<int64_t>(rows, 4), w.out_features, w.in_features);
}

void linear_prepared(const Tensor& x, const PreparedWeight& w, const Tensor& bias, const Tensor& y) {
  const int64_t rows = x.size(0), n = w.out_features, k = w.in_features;
  HH_CHECK(x.dim() == 2 && x.size(1) == k && x.dtype() == DType::f32 && x.device().is_cpu() &&
               (x.stride(1) == 1 || k <= 1),
           "linear_prepared: x ", x.shape(), " does not fit a prepared (", n, ", ", k, ") weight");
  HH_CHECK(y.dim() == 2 && y.size(0) == rows && y.size(1) == n && y.is_contiguous() && y.dtype() == DType::f32,
           "linear_prepared: y ", y.shape(), " does not fit");
  HH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == n && bias.dtype() == DType::f32),
           "linear_prepared: bias ", bias.defined() ? bias.shape() : Shape{}, " does not fit");
  HH_CHECK(w.isa == cpu_isa(), "linear_prepared: the weight was prepared for ", cpu_isa_name(w.isa),
           ", the kernels run ", cpu_isa_name(cpu_isa()));
  if (rows == 0) return;
  const int64_t ldx = rows == 1 ? k : x.stride(0);
  if (w.format == WeightFormat::f32) {
    const sgemm::Kernel* K = sgemm::kernel_for(w.isa);
    HH_CHECK(K != nullptr, "linear_prepared: no packed f32 kernel for ", cpu_isa_name(w.isa));
    // As linear: the bias broadcast into y, the GEMM accumulating onto it (beta = 1): the same bits.
    if (bias.defined())
      backend_of(y).copy(y, bias.as_strided({rows, n}, {0, bias.stride(0)}, bias.offset()));
    sgemm::gemm_prepacked(*K, rows, n, k, x.data<float>(), ldx, 1, static_cast<const float*>(w.data.get()),
                          bias.defined() ? 1.0f : 0.0f, y.data<float>(), n);
    return;
  }
  if (w.format == WeightFormat::bf16) {
    if (bias.defined())
      backend_of(y).copy(y, bias.as_strided({rows, n}, {0, bias.stride(0)}, bias.offset()));
    const float beta = bias.defined() ? 1.0f : 0.0f;
    if (const sgemm::Kernel* K = sgemm::kernel_for(w.isa)) {
      sgemm::gemm_prepacked_bf16(*K, rows, n, k, x.data<float>(), ldx, 1, static_cast<const uint16_t*>(w.data.get()),
                                 beta, y.data<float>(), n);
    } else {  // the widened weight (n, k) as B = weightᵀ (k, n): the plain GEMM's bits
      const Tensor& wt = *static_cast<const Tensor*>(w.data.get());
      backend_of(y).gemm(x.as_strided({1, rows, k}, {0, ldx, 1}, x.offset()), wt.as_strided({1, k, n}, {0, 1, k}, 0),
                         y.as_strided({1, rows, n}, {0, n, 1}, y.offset()), {1.0, beta});
    }
    return;
  }
  Tensor b = bias;
  if (b.defined() && b.stride(0) != 1) {
    b = empty({n}, {DType::f32, Device::cpu()});
    backend_of(b).copy(b, bias);
  }
  qgemm::gemm(qgemm::kernel_for(w.isa), rows, n, k, x.data<float>(), ldx, static_cast<const int8_t*>(w.data.get()),
              w.comp.data(), w.scales.data(), b.defined() ? b.data<float>() : nullptr, y.data<float>(), n);
}

bool WeightCache::same_weight(const Tensor& weight) const {
  const std::shared_ptr<Storage>& st = weight.storage();
  return valid_ && storage_.lock() == st && version_ == st->version && offset_ == weight.offset() &&
         shape_ == weight.shape() && strides_ == weight.strides();
}

void WeightCache::remember(const Tensor& weight) {
  const std::shared_ptr<Storage>& st = weight.storage();
  storage_ = st;
  version_ = st->version;
  offset_ = weight.offset();
  shape_ = weight.shape();
  strides_ = weight.strides();
  isa_ = cpu_isa();
  valid_ = true;
}

std::shared_ptr<const PreparedWeight> WeightCache::get(const Tensor& weight, WeightFormat format) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool same = same_weight(weight);
  if (same && format_ == format && isa_ == cpu_isa()) return prepared_;
  if (same && installed_ && format == WeightFormat::int8) {  // another ISA: re-packed from its own values
    const PreparedWeight& w = *prepared_;
    prepared_ = prepare_int8(int8_values(w), std::vector<float>(w.scales.begin(), w.scales.begin() + w.out_features),
                             w.out_features, w.in_features);
    ++prepares_;
    isa_ = cpu_isa();
    return prepared_;
  }
  // The cache holds one form: an installed int8 weight asked for in f32 is replaced (a later int8
  // request then quantizes the f32 values).
  prepared_ = prepare_weight(weight, format);
  installed_ = false;
  ++prepares_;
  format_ = format;
  remember(weight);
  return prepared_;
}

void WeightCache::install(const Tensor& weight, std::shared_ptr<const PreparedWeight> prepared) {
  HH_CHECK(prepared && prepared->format == WeightFormat::int8, "WeightCache::install: expected an int8 weight");
  HH_CHECK(weight.defined() && weight.dim() == 2 && weight.size(0) == prepared->out_features &&
               weight.size(1) == prepared->in_features,
           "WeightCache::install: the weight is ", weight.defined() ? str(weight.shape()) : std::string("undefined"),
           ", the int8 weight (", prepared->out_features, ", ", prepared->in_features, ")");
  std::lock_guard<std::mutex> lock(mu_);
  prepared_ = std::move(prepared);
  format_ = WeightFormat::int8;
  installed_ = true;
  remember(weight);
  isa_ = prepared_->isa;
}

bool WeightCache::installed_for(const Tensor& weight) {
  std::lock_guard<std::mutex> lock(mu_);
  return installed_ && same_weight(weight);
}

void WeightCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  valid_ = false;
  installed_ = false;
  prepared_.reset();
  storage_.reset();
}

}  // namespace hh
