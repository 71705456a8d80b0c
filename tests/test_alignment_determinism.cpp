// The determinism promise (issue 35 item 3): the same source, seed, thread count and ISA path give
// the same bits whatever the addresses of the buffers. A small training runs once with the CPU
// allocator's blocks 64-byte aligned and again with every block 8, 24 or 40 bytes past a boundary
// (cpu_alloc::set_offset_for_testing); the losses and every parameter must match bit for bit. A
// kernel that blocks by address (a vectorized loop peeling up to the first aligned element sums or
// rounds the peeled elements differently) fails here, as a build whose heap lays buffers out
// differently (another machine, CUDA built in) would have given other tables. And the AVX2 and
// AVX-512 paths, the two a current x86 machine runs, give the same bits too.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/ops/nn.h"
#include "autograd/ops/shape.h"
#include "core/cpu/cpu_allocator.h"
#include "core/cpu_isa.h"
#include "core/generator.h"
#include "nn/gate.h"
#include "nn/mixer.h"
#include "nn/transformer.h"
#include "tests/sweep/sweep.h"
#include "train/optim.h"

namespace hh::test {

namespace {

// Restores aligned blocks however the test ends.
struct AllocationOffset {
  explicit AllocationOffset(size_t bytes) { cpu_alloc::set_offset_for_testing(bytes); }
  ~AllocationOffset() { cpu_alloc::set_offset_for_testing(0); }
  AllocationOffset(const AllocationOffset&) = delete;
  AllocationOffset& operator=(const AllocationOffset&) = delete;
};

struct Model {
  std::string mixer;  // parse_mixer's text
  nn::Gate gate = nn::Gate::none;
  bool encoder = false;  // an EncoderClassifier (bidirectional) instead of a DecoderLM
  int64_t mlp_hidden = 37;
};

// The bits of a run: each step's loss, then every parameter after the last step.
struct Trace {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  bool operator==(const Trace& o) const {
    const auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
    };
    if (!same(losses, o.losses) || params.size() != o.params.size()) return false;
    for (size_t i = 0; i < params.size(); ++i)
      if (!same(params[i], o.params[i])) return false;
    return true;
  }
};

// Three AdamW steps of a 2-layer model on random ids (B=4, L=40: the linear forms' chunks of 16 and
// the hybrid window of 8 are crossed; odd widths leave rows that are not multiples of a vector).
Trace train_small(const Model& m) {
  constexpr int64_t kVocab = 23, kBatch = 4, kLen = 40, kSteps = 3;
  nn::TransformerConfig c;
  c.vocab = kVocab;
  c.layers = 2;
  c.heads = 2;
  c.head_dim = 12;
  c.dim = 24;
  c.mlp_hidden = m.mlp_hidden;
  c.max_len = kLen;
  c.positions = "rope";
  c.attention.mixer = nn::parse_mixer(m.mixer, "test");
  c.attention.chunk = 16;
  c.attention.window = 8;
  c.attention.gate = m.gate;
  Generator init(5);
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<nn::DecoderLM> decoder;
  std::shared_ptr<nn::EncoderClassifier> encoder;
  if (m.encoder) {
    encoder = std::make_shared<nn::EncoderClassifier>(c, 3, "cls", nn::Init{init});
    model = encoder;
  } else {
    decoder = std::make_shared<nn::DecoderLM>(c, nn::Init{init});
    model = decoder;
  }
  train::AdamW opt(train::decay_groups(*model, 0.01), 3e-3);
  Generator data(7);
  Trace t;
  for (int64_t step = 0; step < kSteps; ++step) {
    const Tensor ids = randint(0, kVocab, {kBatch, kLen}, data);  // (B,L)
    Tensor loss;
    if (m.encoder) {
      const Tensor labels = randint(0, 3, {kBatch}, data);  // (B)
      loss = cross_entropy(encoder->forward(ids), labels);
    } else {
      const Tensor logits = decoder->forward(slice(ids, 1, 0, kLen - 1));  // (B,L-1,V)
      loss = cross_entropy(reshape(logits, {-1, kVocab}), reshape(slice(ids, 1, 1, kLen), {-1}));
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    t.losses.push_back(loss.item<double>());
  }
  for (const auto& [name, p] : model->named_parameters()) t.params.push_back(to_vector<double>(p));
  return t;
}

}  // namespace

TEST_CASE("determinism: a small training gives the same bits whatever the allocation offsets") {
  const std::vector<Model> models = {
      {"softmax"}, {"hedgehog"}, {"hybrid-hedgehog"}, {"hedgehog", nn::Gate::gla}, {"hedgehog", nn::Gate::delta},
      {"softmax", nn::Gate::none, true}, {"hedgehog", nn::Gate::none, true}};
  sweep::for_each_config([&](const sweep::Config&) {
    for (const Model& m : models) {
      CAPTURE(m.mixer);
      CAPTURE(nn::name(m.gate));
      CAPTURE(m.encoder);
      const Trace aligned = train_small(m);
      for (size_t offset : {8, 24, 40}) {
        CAPTURE(offset);
        AllocationOffset shifted(offset);
        CHECK(train_small(m) == aligned);
      }
    }
  });
}

// With the GEMM kernels' shared depth blocks (core/cpu/sgemm_kernels.h) the only kernels that differ
// between an AVX2 machine and an AVX-512 one give the same bits, so the whole training does.
TEST_CASE("determinism: a small training gives the same bits on the AVX2 and the AVX-512 paths") {
  if (!cpu_isa_supported(CpuIsa::avx512)) {
    MESSAGE("skipped: this machine lacks AVX-512 (the AVX2 and AVX-512 paths are compared where both run)");
    return;
  }
  const CpuIsa saved = cpu_isa();
  // An MLP of 200: its second product is deeper than one packed block (sgemm::kDepthBlock).
  for (const Model& m : {Model{"softmax", nn::Gate::none, false, 200}, Model{"hedgehog", nn::Gate::none, false, 200},
                         Model{"softmax", nn::Gate::none, true, 200}}) {
    CAPTURE(m.mixer);
    CAPTURE(m.encoder);
    set_cpu_isa(CpuIsa::avx2);
    const Trace avx2 = train_small(m);
    set_cpu_isa(CpuIsa::avx512);
    CHECK(train_small(m) == avx2);
  }
  set_cpu_isa(saved);
}

TEST_CASE("determinism: the allocation offset hook shifts fresh tensors and refuses misaligned offsets") {
  {
    AllocationOffset shifted(24);
    const Tensor x = zeros({100});
    CHECK(reinterpret_cast<uintptr_t>(x.data<float>()) % 64 == 24);
  }
  const Tensor y = zeros({100});
  CHECK(reinterpret_cast<uintptr_t>(y.data<float>()) % 64 == 0);
  CHECK_THROWS_WITH(cpu_alloc::set_offset_for_testing(4), doctest::Contains("multiple of 8 below 64"));
  CHECK_THROWS_WITH(cpu_alloc::set_offset_for_testing(64), doctest::Contains("multiple of 8 below 64"));
  CHECK(cpu_alloc::offset_for_testing() == 0);
}

}  // namespace hh::test
