// The differentiable op library, PyTorch-style free functions in namespace hh. Each family has
// one header and one .cpp (checks, forward dispatch, backward together).
#pragma once
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/delta_attention.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/fused.h"
#include "autograd/ops/gated_attention.h"
#include "autograd/ops/hybrid_attention.h"
#include "autograd/ops/index.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/nn.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
