// CUDA cross-entropy over contiguous (N,V) logits with i64 targets, label smoothing and
// ignore_index, forward (per-row loss and logsumexp) and backward. Targets outside [0, V) (other
// than ignore_index) are recorded on the device and reported after the kernel, naming the first
// bad row like the CPU.
#include "core/unary_functors.h"
#include "cuda/cuda_common.cuh"

namespace hh {
namespace cuda {
namespace {

struct MaxIgnoreNaN {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

__device__ __forceinline__ bool bad_target(int64_t t, int64_t V, int64_t ignore_index) {
  return t != ignore_index && (t < 0 || t >= V);
}

// Per row, with lse = logsumexp(x) and eps = label smoothing:
//   loss = (1-eps)(lse - x_t) + eps (lse - mean_j x_j);  0 where target == ignore_index.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_kernel(const T* logits, const int64_t* target, int64_t N, int64_t V, int64_t ignore_index,
                         double smoothing, T* loss, T* lse, unsigned long long* bad) {
  __shared__ T smem[32];
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; r0 < N;
       r0 += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool valid = row < N;
    const int64_t len = valid ? V : 0;
    const T* xi = logits + (valid ? row : 0) * V;
    T m = -infinity<T>(), sx = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      m = MaxIgnoreNaN{}(m, xi[j]);
      sx += xi[j];
    }
    m = row_reduce(m, MaxIgnoreNaN{}, smem);
    if (smoothing != 0.0) sx = row_reduce(sx, SumOp{}, smem);
    const bool inf_row = m == infinity<T>() || m == -infinity<T>();
    T se = 0;
    if (!inf_row)
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x) se += umath::exp(xi[j] - m);
    se = row_reduce(se, SumOp{}, smem);
    if (!valid || threadIdx.x != 0) continue;  // no block-wide calls below
    const T l = inf_row ? m : m + umath::log(se);
    lse[row] = l;
    const int64_t t = target[row];
    if (t == ignore_index) {
      loss[row] = T(0);
    } else if (bad_target(t, V, ignore_index)) {
      flag_bad(bad, row);
      loss[row] = T(0);
    } else {
      T out = static_cast<T>(1.0 - smoothing) * (l - xi[t]);
      if (smoothing != 0.0) out += static_cast<T>(smoothing) * (l - sx / static_cast<T>(V));
      loss[row] = out;
    }
  }
}

// glogits_ij = gloss_i (exp(x_ij - lse_i) - eps/V) - gloss_i (1-eps) [j == t_i]; 0 for ignored rows.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_backward_kernel(const T* logits, const int64_t* target, const T* lse, const T* gloss, int64_t N,
                                  int64_t V, int64_t ignore_index, T smooth, T hit, T* glogits,
                                  unsigned long long* bad) {
  for (int64_t row = first_row(); row < N; row += row_step()) {
    const T* xi = logits + row * V;
    T* oi = glogits + row * V;
    const int64_t t = target[row];
    const bool skip = t == ignore_index || bad_target(t, V, ignore_index);
    if (threadIdx.x == 0 && bad_target(t, V, ignore_index)) flag_bad(bad, row);
    const T g = gloss[row], l = lse[row];
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      T v = T(0);
      if (!skip) {
        v = g * (umath::exp(xi[j] - l) - smooth);
        if (j == t) v -= g * hit;
      }
      oi[j] = v;
    }
  }
}

template <typename T>
void cross_entropy_cuda(const T* logits, const int64_t* target, int64_t N, int64_t V, const CrossEntropyParams& p,
                        T* loss, T* lse, unsigned long long* bad, cudaStream_t stream) {
  const RowLaunch l = row_launch(N, V);
  cross_entropy_kernel<T>
      <<<l.grid, l.block, 0, stream>>>(logits, target, N, V, p.ignore_index, p.label_smoothing, loss, lse, bad);
  check_launch("cross_entropy");
}

template <typename T>
void cross_entropy_backward_cuda(const T* logits, const int64_t* target, const T* lse, const T* gloss, int64_t N,
                                 int64_t V, const CrossEntropyParams& p, T* glogits, unsigned long long* bad,
                                 cudaStream_t stream) {
  const T smooth = static_cast<T>(p.label_smoothing / static_cast<double>(V > 0 ? V : 1));
  const T hit = static_cast<T>(1.0 - p.label_smoothing);
  const RowLaunch l = row_launch(N, V);
  cross_entropy_backward_kernel<T>
      <<<l.grid, l.block, 0, stream>>>(logits, target, lse, gloss, N, V, p.ignore_index, smooth, hit, glogits, bad);
  check_launch("cross_entropy_backward");
}

void check_ce(const char* op, const Tensor& logits, const Tensor& target, int64_t n,
              std::initializer_list<std::pair<const Tensor*, int64_t>> ts) {
  HH_CHECK(logits.is_contiguous(), op, ": logits must be contiguous, got strides ", logits.strides());
  HH_CHECK(target.dtype() == DType::i64 && target.is_contiguous() && target.numel() == n, op,
           ": target must be a contiguous i64 tensor of ", n, " elements, got ", target.shape(), " ", target.dtype());
  for (const auto& [t, numel] : ts)
    HH_CHECK(t->is_contiguous() && t->dtype() == logits.dtype() && t->numel() == numel, op, ": expected a contiguous ",
             logits.dtype(), " tensor of ", numel, " elements, got ", t->shape(), " ", t->dtype());
}

// Throws the CPU's message for the first out-of-range target, if any (waits for the stream).
void report_bad_target(CudaBackend& b, const BadPosition& bad, const Tensor& target, int64_t V, int64_t ignore_index,
                       const char* op) {
  const int64_t row = bad.first();
  if (row < 0) return;
  const int64_t t = read_device(b, target.data<int64_t>() + row);
  fail(str(op, ": target ", t, " at row ", row, " is out of range for ", V, " classes (expected 0 <= target < ", V,
           " or ignore_index ", ignore_index, ")"));
}

}  // namespace
}  // namespace cuda

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyParams& p,
                                const Tensor& loss, const Tensor& lse) {
  cuda::check_device(*this, "cross_entropy", {&logits, &target, &loss, &lse});
  const cuda::Rows s = cuda::rows_of(logits);
  cuda::check_ce("cross_entropy", logits, target, s.n, {{&loss, s.n}, {&lse, s.n}});
  if (s.n == 0) return;
  cuda::DeviceGuard guard(index_);
  cuda::BadPosition bad(*this);
  dispatch_float(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::cross_entropy_cuda<T>(logits.data<T>(), target.data<int64_t>(), s.n, s.r, p, loss.data<T>(), lse.data<T>(),
                                bad.ptr(), stream_);
  });
  cuda::report_bad_target(*this, bad, target, s.r, p.ignore_index, "cross_entropy");
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                         const Tensor& gloss, const CrossEntropyParams& p, const Tensor& glogits) {
  cuda::check_device(*this, "cross_entropy_backward", {&logits, &target, &lse, &gloss, &glogits});
  const cuda::Rows s = cuda::rows_of(logits);
  cuda::check_ce("cross_entropy_backward", logits, target, s.n, {{&lse, s.n}, {&gloss, s.n}, {&glogits, s.n * s.r}});
  if (s.n == 0) return;
  cuda::DeviceGuard guard(index_);
  cuda::BadPosition bad(*this);
  dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::cross_entropy_backward_cuda<T>(logits.data<T>(), target.data<int64_t>(), lse.data<T>(), gloss.data<T>(), s.n,
                                         s.r, p, glogits.data<T>(), bad.ptr(), stream_);
  });
  cuda::report_bad_target(*this, bad, target, s.r, p.ignore_index, "cross_entropy_backward");
}

}  // namespace hh
