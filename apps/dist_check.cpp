// dist_check: data-parallel training end to end (train/distributed.h). Trains a tiny decoder LM
// for --steps AdamW (or SGD) steps on seeded random token batches. Every step draws the SAME global batch
// of --global-batch rows on every rank; rank r of W takes rows [r*G/W, (r+1)*G/W), optionally in
// --accum micro-batches (no_sync for all but the last), and its loss is the mean over its rows
// (divided by --accum), so the average of the ranks' gradients is the single-process gradient.
// Rank 0 writes the final weights (atomic safetensors). With --compare, nothing is trained: the
// weights in --out are compared with --compare and the run fails when max |delta| > --tol.
//   dist_check --out one.safetensors
//   mpirun -np 2 dist_check --out two.safetensors
//   dist_check --out two.safetensors --compare one.safetensors --tol 1e-5
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/app.h"
#include "cli/flags.h"
#include "autograd/ops.h"
#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "nn/transformer.h"
#include "train/distributed.h"
#include "train/optim.h"

namespace {

using namespace hh;

int compare(const std::string& mine, const std::string& other, double tol) {
  SafeTensors a = load_safetensors(mine), b = load_safetensors(other);
  HH_CHECK(a.tensors.size() == b.tensors.size(), "--compare: ", mine, " has ", a.tensors.size(), " tensors, ", other,
           " has ", b.tensors.size());
  double worst = 0.0;
  std::string worst_name;
  for (const auto& kv : a.tensors) {
    auto it = b.tensors.find(kv.first);
    HH_CHECK(it != b.tensors.end(), "--compare: tensor '", kv.first, "' of ", mine, " is not in ", other);
    HH_CHECK(it->second.shape() == kv.second.shape(), "--compare: tensor '", kv.first, "' has shape ",
             kv.second.shape(), " in ", mine, " and ", it->second.shape(), " in ", other);
    double d = max_abs_diff(kv.second, it->second);
    HH_CHECK(std::isfinite(d), "--compare: tensor '", kv.first, "' is not finite");
    if (d >= worst) {
      worst = d;
      worst_name = kv.first;
    }
  }
  std::printf("max |delta| = %.3g (tensor %s) over %zu tensors, tol %.3g\n", worst, worst_name.c_str(),
              a.tensors.size(), tol);
  HH_CHECK(worst <= tol, "--compare: max |delta| ", worst, " is above the tolerance ", tol);
  return 0;
}

int run_training(const cli::Flags& f, const std::shared_ptr<Communicator>& comm_ptr) {
  Communicator& comm = *comm_ptr;
  const int64_t steps = f.integer("steps", 1, 100000);
  const int64_t global = f.integer("global-batch", 1, 1 << 20);
  const int64_t accum = f.integer("accum", 1, 1024);
  const int64_t len = f.integer("seq-len", 2, 4096);
  const uint64_t seed = static_cast<uint64_t>(f.integer("seed", 0));
  const double lr = f.number("lr", 0.0, 10.0);
  const int64_t bucket_kib = f.integer("bucket-kib", 1, 1 << 22);
  const std::string out = f.str("out");
  HH_CHECK(!out.empty(), "--out: empty path");
  if (comm.rank() == 0) {  // refused before training, not after
    std::string dir = std::filesystem::path(out).parent_path().string();
    ensure_writable_dir(dir.empty() ? "." : dir);
  }
  const int64_t world = comm.world(), rank = comm.rank();
  HH_CHECK(global % world == 0, "--global-batch ", global, " does not split evenly across ", world, " ranks");
  const int64_t local = global / world;
  HH_CHECK(local % accum == 0, "--accum ", accum, " does not divide the ", local, " rows of each rank");
  const int64_t micro = local / accum;

  nn::TransformerConfig cfg;
  cfg.vocab = 64;
  cfg.dim = 32;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.head_dim = 16;
  cfg.mlp_hidden = 64;
  cfg.max_len = len;
  // No linear biases: a key-projection bias has a true gradient of exactly zero (softmax ignores a
  // shift shared by all keys), so its computed gradient is rounding noise, which Adam scales up to
  // updates near lr * noise / eps that differ run to run. That says nothing about the reduction.
  cfg.bias = false;
  Generator init_gen(seed);
  nn::DecoderLM lm(cfg, {init_gen});
  train::GradReducer reducer(lm.named_parameters(), comm_ptr, bucket_kib * 1024);
  reducer.broadcast_parameters();
  // SGD as well as AdamW: Adam's update hardly changes when every gradient is scaled, so only an
  // SGD run shows a reduction that forgot to divide by world.
  const std::string opt_name = f.str("optimizer");
  std::unique_ptr<train::Optimizer> opt;
  if (opt_name == "adamw")
    opt = std::make_unique<train::AdamW>(train::decay_groups(lm, 0.01), lr);
  else if (opt_name == "sgd")
    opt = std::make_unique<train::SGD>(train::single_group(lm, 0.0), lr, 0.9);
  else
    fail(str("--optimizer: unknown '", opt_name, "' (expected adamw or sgd)"));
  if (rank == 0)
    std::printf("dist_check: backend %s, %lld rank(s), global batch %lld (%lld per rank, %lld micro-batch(es)), "
                "%lld buckets\n",
                comm.backend().c_str(), static_cast<long long>(world), static_cast<long long>(global),
                static_cast<long long>(local), static_cast<long long>(accum), static_cast<long long>(reducer.buckets()));

  Generator data_gen(seed + 1);  // the same global batches on every rank
  for (int64_t step = 0; step < steps; ++step) {
    Tensor batch = randint(0, cfg.vocab, {global, len + 1}, data_gen);
    double loss_sum = 0.0;
    for (int64_t m = 0; m < accum; ++m) {
      int64_t r0 = rank * local + m * micro;
      Tensor rows = slice(batch, 0, r0, r0 + micro);
      Tensor x = slice(rows, 1, 0, len).contiguous(), y = slice(rows, 1, 1, len + 1).contiguous();
      Tensor logits = lm.forward(x);
      Tensor loss = mul(cross_entropy(logits.reshape({-1, cfg.vocab}), y.reshape({-1})), 1.0 / accum);
      reducer.set_enabled(m == accum - 1);  // no_sync for all micro-batches but the last
      loss.backward();
      loss_sum += loss.item<double>();
    }
    reducer.finish();
    opt->step();
    opt->zero_grad();
    lm.on_optimizer_step();
    Tensor l = scalar_tensor(loss_sum / world, DType::f64);
    comm.all_reduce_sum(l);
    if (rank == 0)
      std::printf("step %lld: loss %.6f, buckets launched during backward %lld of %lld, completed %lld\n",
                  static_cast<long long>(step + 1), l.item<double>(),
                  static_cast<long long>(reducer.launched_during_backward()), static_cast<long long>(reducer.buckets()),
                  static_cast<long long>(reducer.completed_during_backward()));
  }
  if (rank == 0) {
    write_file_atomic(out, serialize_safetensors(lm.named_parameters(), {{"world", std::to_string(world)},
                                                                          {"accum", std::to_string(accum)},
                                                                          {"steps", std::to_string(steps)}}));
    std::printf("wrote %s\n", out.c_str());
  }
  comm.barrier();
  return 0;
}

// The communicator of this process, so that an error escaping run() can abort the other ranks
// (they may wait in a collective) before run_main reports it.
std::shared_ptr<hh::Communicator> process_comm;

int run(int argc, char** argv) {
  try {
    hh::cli::Flags f("dist_check", "Data-parallel training check: trains a tiny LM on 1 or N ranks (mpirun), "
                                    "or compares two weight files.");
    f.add("backend", "auto", "communicator: auto, none, mpi, nccl");
    f.add("steps", "5", "optimizer steps");
    f.add("global-batch", "8", "rows per step, split across the ranks");
    f.add("accum", "1", "gradient accumulation micro-batches per rank");
    f.add("seq-len", "16", "tokens per row");
    f.add("optimizer", "adamw", "adamw (decay 0.01) or sgd (momentum 0.9)");
    f.add("lr", "0.003", "learning rate");
    f.add("seed", "1", "seed of the weights and the batches");
    f.add("bucket-kib", "16", "gradient bucket size in KiB (small: several buckets for a tiny model)");
    f.add("out", "", "weights written by rank 0 (safetensors); with --compare, the file to check");
    f.add("compare", "", "compare --out with this file instead of training");
    f.add("tol", "0", "--compare: largest max |delta| accepted");
    if (!f.parse(argc, argv)) return 0;
    if (f.given("compare")) return compare(f.str("out"), f.str("compare"), f.number("tol", 0.0, 1e30));
    process_comm = hh::make_communicator(f.str("backend"));
    return run_training(f, process_comm);
  } catch (const std::exception& e) {
    if (process_comm && process_comm->world() > 1) {  // abort ends the process: say why first
      std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(stderr);
      process_comm->abort(1);  // the other ranks may wait in a collective
    }
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, run); }
