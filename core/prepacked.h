// Inference weights prepared once for the CPU GEMMs (issue 37): a Linear's weight (out, in)
//  - f32: packed into the f32 GEMM's B slivers for the ISA in use (core/cpu/sgemm_kernels.h,
//    prepack_b), so a forward no longer repacks every weight matrix (30% of a batch-1 forward of
//    a MiniLM-sized encoder was that packing). The same micro-kernel and depth blocks as the
//    unpacked GEMM: the same bits.
//  - int8: quantized per output channel, symmetric: wq[n, k] = round_half_even(w[n, k] · 127 / amax_n)
//    in [-127, 127], scale sw[n] = amax_n / 127; the activations are quantized per row at every
//    call and the product is an exact int32 sum (core/cpu/qgemm.h has the arithmetic).
//  - bf16: the f32 panels' layout with each weight rounded to bf16 (round to nearest even), half
//    the bytes a decoding step reads. Widened back to f32 one sliver at a time (exact: a bf16 is
//    the top half of an f32) and multiplied by the f32 micro-kernel with f32 activations and f32
//    sums: the bits the prepared f32 weight gives for the weight rounded to bf16 first, on every
//    ISA path (CpuIsa::scalar: the plain GEMM's bits on the rounded weight).
// A WeightCache holds one prepared form and hands it out while the weight is unchanged: the same
// storage (held weakly, so a replaced weight never aliases), at the same Storage::version, offset,
// shape and strides, for the same format and CPU ISA. Every in-place writer of a parameter bumps
// the version: copy_ (load_state_dict, merge_lora, SGD), AdamW's step, the all-reduces of
// core/comm_mpi.cpp and cuda/comm_nccl.cpp, so a stale pack is never used after any of them.
// A writer that bypasses them (a raw data<T>() pointer) must call bump_version.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/tensor.h"

namespace hh {

// How a Linear's weight is multiplied when no gradient is recorded (HFModelOptions::weights,
// the apps' --weights flag). Parsed once at the edge.
enum class WeightFormat { f32, int8, bf16 };
const char* weight_format_name(WeightFormat f);
// "f32", "int8" or "bf16"; throws hh::Error naming the valid values otherwise.
WeightFormat parse_weight_format(const std::string& name);

struct PreparedWeight {
  WeightFormat format = WeightFormat::f32;
  CpuIsa isa = CpuIsa::scalar;  // the ISA it was prepared under
  int64_t out_features = 0, in_features = 0;
  // f32: sgemm::prepack_b's panels of weightᵀ; int8: qgemm's slivers; bf16: the f32 panels rounded
  // to bf16 (uint16 each), or on CpuIsa::scalar the rounded weight widened to f32, (out, in) row-major.
  std::shared_ptr<void> data;
  // int8: per output channel, padded to a multiple of 32 (scale 1, comp 0 past out_features).
  std::vector<float> scales;  // sw[n]
  std::vector<int32_t> comp;  // 128 · Σ_k wq[n, k] (VNNI's unsigned activations)
  size_t bytes = 0;           // of data
};

// weight (out, in) f32 -> its prepared form, on the CPU; f32 gives nullptr when this ISA has no
// packed kernel (the plain GEMM runs then). int8 throws hh::Error on a NaN or
// infinite weight; bf16 keeps them (a NaN stays NaN, a value beyond bf16's range becomes inf).
std::shared_ptr<const PreparedWeight> prepare_weight(const Tensor& weight, WeightFormat format);
// An int8 weight from its values (out · in, row-major, each in [-127, 127]) and per-channel scales
// (out, each finite and > 0); hh::Error on a wrong size, a value out of range, or a NaN, infinite,
// zero or negative scale.
std::shared_ptr<const PreparedWeight> prepare_int8(const std::vector<int8_t>& values, const std::vector<float>& scales,
                                                   int64_t out_features, int64_t in_features);
// The quantization prepare_weight applies: w (out, in) row-major -> values, scales (an all-zero
// row gets scale 1). hh::Error on a non-finite weight.
void quantize_per_channel(const float* w, int64_t out_features, int64_t in_features, std::vector<int8_t>& values,
                          std::vector<float>& scales);
// The int8 values of a prepared int8 weight, (out · in) row-major (unpacked; for tests and saving).
std::vector<int8_t> int8_values(const PreparedWeight& w);

// Whether linear_prepared takes an f32 product of `rows` rows now: the packed engine's choice for
// that size with at least 4 rows (with B packed once, 1-3 rows cost the weight's one read; a row's
// bits are then those it has among more rows). Otherwise the plain GEMM runs.
bool prepared_f32_applies(const PreparedWeight& w, int64_t rows);
// y (R, out) = x (R, in) · weightᵀ (+ bias (out)) with a prepared weight; x f32 on the CPU with
// unit column stride, y f32 contiguous. No autograd.
void linear_prepared(const Tensor& x, const PreparedWeight& w, const Tensor& bias, const Tensor& y);

class WeightCache {
 public:
  WeightCache() = default;
  // A copy starts empty (it prepares its own on first use).
  WeightCache(const WeightCache&) {}
  WeightCache& operator=(const WeightCache&) {
    clear();
    return *this;
  }
  // The prepared form of `weight` for `format`: the cached one while still valid, else prepared
  // anew (and kept). May be nullptr for f32 (see prepare_weight). Thread-safe.
  std::shared_ptr<const PreparedWeight> get(const Tensor& weight, WeightFormat format);
  // Installs an int8 weight read from a file (nn/models/hf_int8.h: a quantized folder) for
  // `weight`, the f32 tensor that holds its dequantized values: get(weight, int8) hands it out
  // while the weight is unchanged, never re-quantized from those values (a CPU ISA change re-packs
  // its own values and scales). Any change to the weight (a new storage, a version bump) drops it
  // and the f32 values are quantized as usual. `prepared` must be int8 and of the weight's shape.
  void install(const Tensor& weight, std::shared_ptr<const PreparedWeight> prepared);
  // Whether an installed int8 weight is held for `weight` as it is now.
  bool installed_for(const Tensor& weight);
  void clear();
  // How many times get() prepared (tests).
  int64_t prepares() const { return prepares_; }

 private:
  std::mutex mu_;
  std::weak_ptr<Storage> storage_;
  uint64_t version_ = 0;
  int64_t offset_ = 0;
  Shape shape_;
  Strides strides_;
  WeightFormat format_ = WeightFormat::f32;
  CpuIsa isa_ = CpuIsa::scalar;
  bool valid_ = false;
  bool installed_ = false;  // prepared_ came from install(): its values are the source, not the weight
  std::shared_ptr<const PreparedWeight> prepared_;
  int64_t prepares_ = 0;
  // Whether the cached entry was made for this weight as it is now (storage, version, layout).
  bool same_weight(const Tensor& weight) const;
  void remember(const Tensor& weight);
};

}  // namespace hh
