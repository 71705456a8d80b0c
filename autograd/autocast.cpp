// Autocast state (thread-local) and its cast rules; see autograd/autocast.h for the op lists.
#include "autograd/autocast.h"

#include "autograd/ops/shape.h"
#include "core/error.h"

namespace hh {

namespace {
thread_local bool g_autocast_enabled = false;
thread_local DType g_autocast_dtype = DType::bf16;

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }
}  // namespace

bool AutocastMode::is_enabled() { return g_autocast_enabled; }
DType AutocastMode::dtype() { return g_autocast_dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_enabled_(g_autocast_enabled), prev_dtype_(g_autocast_dtype) {
  HH_CHECK(is_half(dtype), "autocast: the lower-precision dtype must be bf16 or f16, got ", dtype);
  g_autocast_enabled = enabled;
  g_autocast_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  g_autocast_enabled = prev_enabled_;
  g_autocast_dtype = prev_dtype_;
}

Tensor autocast_lower(const Tensor& t) {
  if (!g_autocast_enabled || !t.defined()) return t;
  if (t.dtype() != DType::f32 && !is_half(t.dtype())) return t;  // f64 and integers stay
  return to_dtype(t, g_autocast_dtype);
}

Tensor autocast_f32(const Tensor& t) {
  if (!g_autocast_enabled || !t.defined() || !is_half(t.dtype())) return t;
  return to_dtype(t, DType::f32);
}

DType autocast_promote(DType a, DType b) {
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  if (a == DType::f32 || b == DType::f32) return DType::f32;
  return a == b ? a : DType::f32;  // bf16 with f16: neither holds the other
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  if (s == "f32" || s == "fp32") return Precision::f32;
  if (s == "tf32") return Precision::tf32;
  if (s == "bf16") return Precision::bf16;
  fail(str("unknown precision '", s, "': expected f32, tf32 or bf16"));
}

void check_precision(Precision p, Device d) {
  HH_CHECK(p != Precision::tf32 || d.is_cuda(), "precision tf32 is a cuBLAS mode of CUDA GEMMs; on ", d,
           " use f32 or bf16");
}

}  // namespace hh
