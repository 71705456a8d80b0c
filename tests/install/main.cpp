// The README.md "Using the library" snippet, verbatim inside main().
#include <iostream>

#include "autograd/ops.h"

int main() {
  hh::Generator gen(0);
  hh::Tensor x = hh::randn({4, 8}, gen).requires_grad_();
  hh::Tensor w = hh::randn({8, 2}, gen).requires_grad_();
  hh::Tensor loss = hh::sum(hh::square(hh::matmul(x, w)));
  loss.backward();
  std::cout << w.grad() << "\n";
  return 0;
}
