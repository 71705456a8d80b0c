// Data-parallel training pieces that run in one process: the engine's grad-ready hooks, the
// single-process communicator and the backend choice, and the GradReducer against a recording
// two-rank stand-in (its "other rank" holds twice this rank's gradient, so every average is 1.5x
// the local gradient). The real two-rank MPI run is a CTest (cmake/dist_tests.cmake).
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "train/distributed.h"

namespace hh::test {
namespace {

Tensor leaf(std::vector<double> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return from_vector(v, s, DType::f32).requires_grad_();
}

std::vector<double> values(const Tensor& t) { return to_vector<double>(t); }

// World 2, rank 0. A reduction adds the other rank's contribution, 2x this rank's values, when
// waited on; launches are recorded (the bucket sizes, in order) to check order and overlap.
class TwoRankStandIn final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 2; }
  std::string backend() const override { return "stand-in"; }
  void all_reduce_sum(Tensor& t) override { all_reduce_sum_async(t)->wait(); }
  std::unique_ptr<Pending> all_reduce_sum_async(Tensor& t) override {
    launched.push_back(t.numel());
    return std::make_unique<Triple>(t, this);
  }
  void broadcast(Tensor&, int) override { ++broadcasts; }
  void barrier() override {}
  std::vector<int64_t> launched;
  int waits = 0, broadcasts = 0, polls = 0;

 private:
  // Completes on wait() only; test() counts the polls (the reducer's progress calls).
  struct Triple final : Pending {
    Triple(Tensor t, TwoRankStandIn* comm) : t(std::move(t)), comm(comm) {}
    void wait() override {
      NoGradGuard no_grad;
      copy_(t, mul(t, 3.0));
      ++comm->waits;
    }
    bool test() override {
      ++comm->polls;
      return false;
    }
    Tensor t;
    TwoRankStandIn* comm;
  };
};

}  // namespace

TEST_CASE("grad-ready hook: fires once, after the last contribution, with the final gradient") {
  Tensor w = leaf({1, 2});
  Tensor x = from_vector(std::vector<double>{3, 5}, {2});
  int fired = 0;
  std::vector<double> seen;
  w.add_grad_ready_hook([&] {
    ++fired;
    seen = values(w.grad());
  });
  // Two contributions (w*x and w*w): d/dw = x + 2w = {5, 9}.
  add(sum(mul(w, x)), sum(mul(w, w))).backward();
  CHECK(fired == 1);
  CHECK(seen == std::vector<double>{5, 9});
}

TEST_CASE("grad-ready hook: runs in backward order, never for leaves without a gradient") {
  Tensor a = leaf({1, 2}), b = leaf({3, 4}), unused = leaf({0, 0}), cut = leaf({7, 7});
  std::vector<std::string> order;
  a.add_grad_ready_hook([&] { order.push_back("a"); });
  b.add_grad_ready_hook([&] { order.push_back("b"); });
  unused.add_grad_ready_hook([&] { order.push_back("unused"); });
  cut.add_grad_ready_hook([&] { order.push_back("cut"); });
  // An op whose backward gives `cut` no gradient (an undefined tensor, as integer paths do).
  Tensor blocked = record("test_no_grad", cut.detach(), {cut},
                          [](const Tensor&, const NeedsGrad&) { return std::vector<Tensor>{Tensor()}; });
  // b feeds mul(b, 2), which feeds mul(., a): a's gradient is final first.
  add(sum(mul(mul(b, 2.0), a)), sum(blocked)).backward();
  CHECK(order == std::vector<std::string>{"a", "b"});
  CHECK_FALSE(cut.grad().defined());
  CHECK_FALSE(unused.grad().defined());
}

TEST_CASE("grad-ready hook: removal, copies, a leaf root, and every backward of a retained graph") {
  Tensor w = leaf({2});
  int fired = 0;
  int64_t id = w.add_grad_ready_hook([&] { ++fired; });
  w.backward();  // the root is the leaf itself
  CHECK(fired == 1);
  Tensor y = mul(w, w);
  y.backward(Tensor(), true);
  y.backward();
  CHECK(fired == 3);
  // A detached copy shares the storage but not the hooks.
  Tensor copy = w.detach().requires_grad_();
  mul(copy, 3.0).backward();
  CHECK(fired == 3);
  w.remove_grad_ready_hook(id);
  mul(w, 3.0).backward();
  CHECK(fired == 3);
  CHECK_THROWS_WITH_AS(mul(w, 2.0).add_grad_ready_hook([] {}), doctest::Contains("only a leaf tensor"), hh::Error);
}

TEST_CASE("communicator: none is world 1; unknown and unbuilt backends are clear errors") {
  auto none = make_communicator("none");
  CHECK(none->world() == 1);
  CHECK(none->rank() == 0);
  CHECK(none->backend() == "none");
  Tensor t = leaf({1, 2}).detach();
  none->all_reduce_sum(t);
  none->all_reduce_sum_async(t)->wait();
  none->broadcast(t, 0);
  none->barrier();
  CHECK(values(t) == std::vector<double>{1, 2});
  CHECK_THROWS_WITH_AS(make_communicator("gloo"), doctest::Contains("unknown communicator backend 'gloo'"),
                       hh::Error);
  // hh_tests links neither hedgehog_mpi nor hedgehog_nccl.
  CHECK_THROWS_WITH_AS(make_communicator("mpi"),
                       doctest::Contains("communicator 'mpi' is not available: this program was built without MPI"),
                       hh::Error);
  CHECK_THROWS_WITH_AS(make_communicator("nccl"), doctest::Contains("built without NCCL"), hh::Error);
  if (launcher_world_size() == 1) CHECK(make_communicator("auto")->backend() == "none");
}

TEST_CASE("communicator: auto under mpirun without MPI is an error, not N processes training alone") {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) return;  // really under mpirun
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  CHECK(launcher_world_size() == 2);
  CHECK_THROWS_WITH_AS(make_communicator("auto"),
                       doctest::Contains("started by mpirun (2 processes) but this program was built without MPI"),
                       hh::Error);
  ::setenv("OMPI_COMM_WORLD_SIZE", "1", 1);  // a job of one: nothing to reduce, nothing lost
  CHECK(make_communicator("auto")->backend() == "none");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST_CASE("GradReducer: buckets in reverse registration order, launched during backward, averaged") {
  auto comm = std::make_shared<TwoRankStandIn>();
  Tensor p0 = leaf({1, 2, 3}), p1 = leaf({1, 1, 1, 1, 1}), p2 = leaf({2, 2, 2, 2, 2, 2, 2});
  // 16 bytes: p2 (28 bytes) fills bucket 0 alone, then p1 (20) bucket 1, then p0 (12) bucket 2.
  train::GradReducer r({{"p0", p0}, {"p1", p1}, {"p2", p2}}, comm, 16);
  CHECK(r.buckets() == 3);
  r.broadcast_parameters();
  CHECK(comm->broadcasts == 3);
  // Every parameter gets a gradient; p2 is used last in forward, so its gradient is final first.
  Tensor y = add(add(sum(mul(p0, 2.0)), sum(mul(p1, 3.0))), sum(mul(p2, 4.0)));
  y.backward();
  CHECK(comm->launched == std::vector<int64_t>{7, 5, 3});  // all three during backward
  CHECK(comm->waits == 0);
  CHECK(comm->polls == 3);  // bucket 0 polled when p1 and p0 got ready, bucket 1 when p0 did
  r.finish();
  CHECK(r.launched_during_backward() == 3);
  CHECK(r.completed_during_backward() == 0);  // the stand-in completes only on wait()
  CHECK(comm->waits == 3);
  CHECK(values(p0.grad()) == std::vector<double>{3, 3, 3});
  CHECK(values(p1.grad()) == std::vector<double>{4.5, 4.5, 4.5, 4.5, 4.5});
  CHECK(values(p2.grad()) == std::vector<double>(7, 6.0));
}

TEST_CASE("GradReducer: a bucket ready early waits for the ones before it (same order on every rank)") {
  auto comm = std::make_shared<TwoRankStandIn>();
  Tensor p0 = leaf({1, 2, 3}), p1 = leaf({1, 1, 1, 1, 1});
  train::GradReducer r({{"p0", p0}, {"p1", p1}}, comm, 4);  // bucket 0: p1, bucket 1: p0
  // p0's gradient is final before p1's: bucket 1 is ready first but launched second.
  Tensor p1_sum = sum(mul(p1, 2.0));
  sum(mul(p0, p1_sum)).backward();
  CHECK(comm->launched == std::vector<int64_t>{5, 3});
  r.finish();
  CHECK(values(p0.grad()) == std::vector<double>(3, 1.5 * 10.0));
  CHECK(values(p1.grad()) == std::vector<double>(5, 1.5 * 12.0));
}

TEST_CASE("GradReducer: a parameter without a gradient counts as zero; aliased gradients stay apart") {
  auto comm = std::make_shared<TwoRankStandIn>();
  Tensor unused = leaf({5, 5}), a = leaf({1, 2}), b = leaf({3, 4});
  train::GradReducer r({{"unused", unused}, {"a", a}, {"b", b}}, comm, 8);  // buckets: {b}, {a}, {unused}
  // add's backward may hand a and b the very same gradient tensor.
  sum(add(a, b)).backward();
  CHECK(comm->launched.size() == 2);  // {b}, {a} during backward; {unused} only in finish()
  r.finish();
  CHECK(r.launched_during_backward() == 2);
  CHECK(comm->launched.size() == 3);
  REQUIRE(unused.grad().defined());
  CHECK(values(unused.grad()) == std::vector<double>{0, 0});
  CHECK(values(a.grad()) == std::vector<double>{1.5, 1.5});
  CHECK(values(b.grad()) == std::vector<double>{1.5, 1.5});
  CHECK(a.grad().storage() != b.grad().storage());
}

TEST_CASE("GradReducer: a tied parameter (two uses) is reduced once, with both contributions") {
  auto comm = std::make_shared<TwoRankStandIn>();
  Tensor tied = leaf({1, 2}), other = leaf({1, 1});
  train::GradReducer r({{"tied", tied}, {"other", other}}, comm, 4);  // one bucket each
  // tied at the input and at the output, like an embedding shared with the vocabulary head.
  Tensor h = mul(mul(tied, 2.0), other);
  sum(mul(h, tied)).backward();  // d/dtied = 4 * tied * other = {4, 8}
  CHECK(comm->launched.size() == 2);
  r.finish();
  CHECK(values(tied.grad()) == std::vector<double>{6, 12});
}

TEST_CASE("GradReducer: no_sync micro-steps only accumulate; the last one reduces the sum") {
  auto comm = std::make_shared<TwoRankStandIn>();
  Tensor w = leaf({1, 2});
  train::GradReducer r({{"w", w}}, comm);
  r.set_enabled(false);
  sum(mul(w, 2.0)).backward();
  r.finish();  // disabled: nothing to do
  CHECK(comm->launched.empty());
  r.set_enabled(true);
  sum(mul(w, 3.0)).backward();
  CHECK(comm->launched.size() == 1);
  r.finish();
  CHECK(values(w.grad()) == std::vector<double>{7.5, 7.5});  // 1.5 * (2 + 3)
}

TEST_CASE("GradReducer: one process changes nothing; its hooks go with it") {
  Tensor w = leaf({1, 2});
  {
    train::GradReducer r({{"w", w}, {"w again", w}}, make_communicator("none"));
    CHECK(r.buckets() == 1);  // listed twice, reduced once
    sum(mul(w, 2.0)).backward();
    r.finish();
    CHECK(values(w.grad()) == std::vector<double>{2, 2});
    CHECK(w.impl_ptr()->grad_ready_hooks.list.size() == 1);
  }
  CHECK(w.impl_ptr()->grad_ready_hooks.list.empty());
  Tensor i = from_vector(std::vector<int64_t>{1}, {1});
  CHECK_THROWS_WITH_AS(train::GradReducer({{"ids", i}}, make_communicator("none")),
                       doctest::Contains("parameter 'ids' is not a leaf tensor that requires grad"), hh::Error);
}

}  // namespace hh::test
