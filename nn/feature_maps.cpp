#include "nn/feature_maps.h"

#include <cmath>

namespace hh::nn {

namespace {

// Per-head affine map z = x W + b: x (B,H,L,D), W (H,D,F), b (H,F) -> (B,H,L,F).
Tensor head_affine(const Tensor& x, const Tensor& W, const Tensor& b) {
  Tensor z = matmul(x, unsqueeze(W, 0));  // (B,H,L,D)·(1,H,D,F)
  return b.defined() ? add(z, unsqueeze(unsqueeze(b, 0), 2)) : z;
}

// Shift that makes exp() safe: per query row, or one value shared by every key of a sequence (a
// per-token key shift would change the weights). The shift cancels in φ(q)·S / φ(q)·z only when
// ε = 0 and φ adds no constant (performer's +1e-6 does), so it is part of the function computed
// and differentiated like the rest (amax passes the gradient to the max element): a detached
// shift gave gradients off by up to 2e-4 relative.
// With a key mask, the key shift is the max over real tokens only (padding must not move it);
// with ctx.keys_one_by_one, each key's own max (as a decoding step of one key computes it).
Tensor stabilizer(const Tensor& z, bool is_query, const FeatureContext& ctx) {
  if (is_query || ctx.keys_one_by_one) return amax(z, {-1}, true);
  if (!ctx.key_mask.defined()) return amax(z, {-2, -1}, true);
  const Tensor& m = ctx.key_mask;
  HH_CHECK(m.dim() == 2 && m.size(0) == z.size(0) && m.size(1) == z.size(2), "feature map: key mask ", m.shape(),
           " does not match the keys ", z.shape());
  Tensor pad = eq(reshape(m.to(z.dtype()), {m.size(0), 1, m.size(1), 1}), 0.0);  // (B,1,L,1)
  return amax(masked_fill(z, pad, -1e30), {-2, -1}, true);
}

class Elu : public FeatureMap {
 public:
  explicit Elu(int64_t D) : FeatureMap("elu"), D_(D) {}
  Tensor forward(const Tensor& x, bool, const FeatureContext&) override { return add(elu(x), 1.0); }
  int64_t feature_dim() const override { return D_; }

 private:
  int64_t D_;
};

class Relu : public FeatureMap {
 public:
  explicit Relu(int64_t D) : FeatureMap("relu"), D_(D) {}
  Tensor forward(const Tensor& x, bool, const FeatureContext&) override { return relu(x); }
  int64_t feature_dim() const override { return D_; }

 private:
  int64_t D_;
};

class Exp : public FeatureMap {
 public:
  Exp(int64_t D, double t) : FeatureMap("exp"), D_(D), t_(t) {}
  Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) override {
    Tensor z = mul(x, t_);
    return exp(sub(z, stabilizer(z, is_query, ctx)));
  }
  int64_t feature_dim() const override { return D_; }

 private:
  int64_t D_;
  double t_;
};

class Taylor : public FeatureMap {
 public:
  Taylor(int64_t D, bool packed) : FeatureMap("taylor"), D_(D), packed_(packed) {
    if (!packed) return;
    // Upper triangle (i <= j) of the outer product; off-diagonal terms appear once, scaled √2 up.
    std::vector<int64_t> idx;
    std::vector<double> scale;
    for (int64_t i = 0; i < D; ++i)
      for (int64_t j = i; j < D; ++j) {
        idx.push_back(i * D + j);
        scale.push_back(i == j ? 1.0 : std::sqrt(2.0));
      }
    register_buffer("packed_index", &index_, from_vector(idx, {static_cast<int64_t>(idx.size())}));
    register_buffer("packed_scale", &scale_, from_vector(scale, {static_cast<int64_t>(scale.size())}, {DType::f64}));
  }
  Tensor forward(const Tensor& x, bool, const FeatureContext&) override {
    const double d = static_cast<double>(D_);
    Shape s = x.shape();
    Tensor one = ones({s[0], s[1], s[2], 1}, {x.dtype(), x.device()});
    Tensor lin = mul(x, 1.0 / std::pow(d, 0.25));
    // x_i x_j / (√2 √D) = (c x_i)(c x_j) with c = (2D)^-¼: scale the D entries, not the D² products.
    Tensor xc = mul(x, std::pow(2.0 * d, -0.25));
    Tensor outer = mul(unsqueeze(xc, -1), unsqueeze(xc, -2));  // (B,H,L,D,D)
    Tensor quad = reshape(outer, {s[0], s[1], s[2], D_ * D_});
    if (packed_) {
      quad = index_select(quad, -1, index_.to(x.device()));
      quad = mul(quad, scale_.to(x.dtype()).to(x.device()));
    }
    return cat({one, lin, quad}, -1);
  }
  int64_t feature_dim() const override { return 1 + D_ + (packed_ ? D_ * (D_ + 1) / 2 : D_ * D_); }

 private:
  int64_t D_;
  bool packed_;
  Tensor index_, scale_;
};

class CosFormer : public FeatureMap {
 public:
  CosFormer(int64_t D, int64_t M) : FeatureMap("cosformer"), D_(D), M_(M) {}
  bool reads_position() const override { return true; }
  Tensor forward(const Tensor& x, bool, const FeatureContext& ctx) override {
    int64_t L = x.size(2);
    Tensor r = relu(x);
    if (M_ == 0 && ctx.key_mask.defined() && ctx.pos_offset == 0) {
      // Padded rows: M is each row's real length, as if the row were processed alone.
      const Tensor& m = ctx.key_mask;
      HH_CHECK(m.dim() == 2 && m.size(0) == x.size(0) && m.size(1) == L, "cosformer: key mask ", m.shape(),
               " does not match ", x.shape());
      Tensor Mb = reshape(sum(m.to(x.dtype()), {1}), {m.size(0), 1, 1, 1});             // (B,1,1,1)
      Tensor pos = reshape(arange(1.0, static_cast<double>(L + 1), 1.0, {x.dtype(), x.device()}), {1, 1, L, 1});
      Tensor ang = div(mul(pos, M_PI / 2.0), Mb);                                      // (B,1,L,1)
      return cat({mul(r, cos(ang)), mul(r, sin(ang))}, -1);
    }
    int64_t M = M_ > 0 ? M_ : (ctx.total_len > 0 ? ctx.total_len : L);
    HH_CHECK(ctx.pos_offset + L <= M, "cosformer: position ", ctx.pos_offset + L, " exceeds the reweighting length M=", M,
             " (set cosformer_length for decoding)");
    // i = 1-based position; angle π i / (2M).
    Tensor pos = arange(static_cast<double>(ctx.pos_offset + 1), static_cast<double>(ctx.pos_offset + L + 1), 1.0,
                        {x.dtype(), x.device()});
    Tensor ang = mul(pos, M_PI / (2.0 * static_cast<double>(M)));
    Tensor c = reshape(cos(ang), {1, 1, L, 1}), s = reshape(sin(ang), {1, 1, L, 1});
    return cat({mul(r, c), mul(r, s)}, -1);
  }
  int64_t feature_dim() const override { return 2 * D_; }

 private:
  int64_t D_, M_;
};

class Performer : public FeatureMap {
 public:
  Performer(int64_t D, int64_t m, int64_t redraw, uint64_t seed, Init init)
      : FeatureMap("performer"), D_(D), m_(m), redraw_(redraw) {
    Generator gen(seed);
    register_buffer("omega", &omega_, draw(gen).to(init.dtype).to(init.device));
    // (seed, offset, steps) of the redraw stream: a buffer, so checkpoints resume it exactly.
    register_buffer("redraw_state", &state_,
                    from_vector(std::vector<int64_t>{static_cast<int64_t>(seed), static_cast<int64_t>(gen.offset()), 0}, {3}));
  }
  Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) override {
    const double d = static_cast<double>(D_);
    Tensor xs = mul(x, std::pow(d, -0.25));                                          // x' (B,H,L,D)
    Tensor proj = matmul(xs, transpose(omega_.to(x.dtype()).to(x.device()), 0, 1));  // Ω x' (B,H,L,m)
    Tensor sq = mul(sum(square(xs), {-1}, true), 0.5);                               // ‖x'‖²/2
    Tensor z = sub(proj, sq);
    Tensor out = exp(sub(z, stabilizer(proj, is_query, ctx)));
    return add(mul(out, 1.0 / std::sqrt(static_cast<double>(m_))), 1e-6);
  }
  int64_t feature_dim() const override { return m_; }
  void on_step() override {
    if (!is_training() || redraw_ <= 0) return;
    auto st = to_vector<int64_t>(state_);
    if (++st[2] % redraw_ == 0) {
      Generator gen(static_cast<uint64_t>(st[0]), static_cast<uint64_t>(st[1]));
      copy_(omega_, draw(gen).to(omega_.dtype()).to(omega_.device()));
      st[1] = static_cast<int64_t>(gen.offset());
    }
    copy_(state_, from_vector(st, {3}).to(state_.device()));
  }

 private:
  // Ω (m,D): stacked orthogonal D×D Gaussian blocks (Gram-Schmidt = QR), each row rescaled by the
  // norm of an independent Gaussian D-vector (chi-distributed), as FAVOR+.
  Tensor draw(Generator& gen) {
    std::vector<double> rows;
    int64_t blocks = (m_ + D_ - 1) / D_;
    for (int64_t bl = 0; bl < blocks; ++bl) {
      auto g = to_vector<double>(randn({D_, D_}, gen, {DType::f64}));
      for (int64_t i = 0; i < D_; ++i) {  // modified Gram-Schmidt over rows
        double* ri = &g[static_cast<size_t>(i * D_)];
        for (int64_t j = 0; j < i; ++j) {
          const double* rj = &g[static_cast<size_t>(j * D_)];
          double dot = 0;
          for (int64_t t = 0; t < D_; ++t) dot += ri[t] * rj[t];
          for (int64_t t = 0; t < D_; ++t) ri[t] -= dot * rj[t];
        }
        double nrm = 0;
        for (int64_t t = 0; t < D_; ++t) nrm += ri[t] * ri[t];
        nrm = std::sqrt(nrm);
        for (int64_t t = 0; t < D_; ++t) ri[t] /= nrm;
      }
      auto chi = to_vector<double>(randn({D_, D_}, gen, {DType::f64}));
      for (int64_t i = 0; i < D_ && static_cast<int64_t>(rows.size()) < m_ * D_; ++i) {
        double s = 0;
        for (int64_t t = 0; t < D_; ++t) s += chi[static_cast<size_t>(i * D_ + t)] * chi[static_cast<size_t>(i * D_ + t)];
        s = std::sqrt(s);
        for (int64_t t = 0; t < D_; ++t) rows.push_back(g[static_cast<size_t>(i * D_ + t)] * s);
      }
    }
    return from_vector(rows, {m_, D_}, {DType::f64});
  }
  int64_t D_, m_, redraw_;
  Tensor omega_, state_;
};

// Learned per-head maps: t2r (relu(xW+b)) and the Hedgehog family.
class Learned : public FeatureMap {
 public:
  enum class Kind { t2r, hedgehog, hedgehog_exp };
  Learned(const std::string& name, Kind kind, const FeatureMapConfig& c, bool frozen_identity, Init init)
      : FeatureMap(name), kind_(kind), F_(c.feature_dim > 0 ? c.feature_dim : c.head_dim), joint_(c.joint_softmax),
        untied_(c.untied) {
    const int64_t H = c.heads, D = c.head_dim;
    HH_CHECK(!frozen_identity || F_ == D, name, ": the identity map needs feature_dim == head_dim (", D, "), got ", F_);
    auto make_w = [&]() -> Tensor {
      if (kind == Kind::t2r) {  // torch Linear init
        double bound = 1.0 / std::sqrt(static_cast<double>(D));
        return uniform({H, D, F_}, -bound, bound, init.gen, {init.dtype, init.device});
      }
      // Identity init (paper App. A.2); F > D pads with zeros.
      Tensor w = zeros({H, D, F_}, {init.dtype, init.device});
      Tensor e = eye(std::min(D, F_), {init.dtype, init.device});
      copy_(slice(slice(w, 1, 0, e.size(0)), 2, 0, e.size(1)), expand(unsqueeze(e, 0), {H, e.size(0), e.size(1)}));
      return w;
    };
    auto make_b = [&]() -> Tensor {
      if (kind == Kind::t2r) {
        double bound = 1.0 / std::sqrt(static_cast<double>(D));
        return uniform({H, F_}, -bound, bound, init.gen, {init.dtype, init.device});
      }
      return zeros({H, F_}, {init.dtype, init.device});
    };
    if (frozen_identity) {
      register_buffer("weight", &wq_, make_w());
      register_buffer("bias", &bq_, make_b());
      return;
    }
    if (untied_) {
      register_parameter("q_weight", &wq_, make_w());
      register_parameter("q_bias", &bq_, make_b());
      register_parameter("k_weight", &wk_, make_w());
      register_parameter("k_bias", &bk_, make_b());
    } else {
      register_parameter("weight", &wq_, make_w());
      register_parameter("bias", &bq_, make_b());
    }
  }

  Tensor forward(const Tensor& x, bool is_query, const FeatureContext& ctx) override {
    bool use_k = untied_ && !is_query;
    Tensor z = head_affine(x, use_k ? wk_ : wq_, use_k ? bk_ : bq_);  // (B,H,L,F)
    switch (kind_) {
      case Kind::t2r: return relu(z);
      case Kind::hedgehog:
        if (joint_) return softmax(cat({mul(z, 2.0), mul(z, -2.0)}, -1), -1);
        return hedgehog_features(z);  // = cat({softmax(z, -1), softmax(neg(z), -1)}, -1), fused
      case Kind::hedgehog_exp: {
        Tensor both = cat({z, neg(z)}, -1);
        return exp(sub(both, stabilizer(both, is_query, ctx)));
      }
    }
    return z;
  }
  int64_t feature_dim() const override { return kind_ == Kind::t2r ? F_ : 2 * F_; }

 private:
  Kind kind_;
  int64_t F_;
  bool joint_, untied_;
  Tensor wq_, bq_, wk_, bk_;
};

}  // namespace

const std::vector<std::string>& feature_map_names() {
  static const std::vector<std::string> names = {"elu",    "relu",     "performer", "cosformer",   "exp",
                                                 "taylor", "t2r",      "t2r-hh",    "hedgehog",    "hedgehog-exp",
                                                 "hedgehog-untrained"};
  return names;
}

bool is_feature_map_name(const std::string& name) {
  for (const auto& n : feature_map_names())
    if (n == name) return true;
  return false;
}

std::shared_ptr<FeatureMap> make_feature_map(const FeatureMapConfig& c, Init init) {
  const int64_t D = c.head_dim;
  HH_CHECK(D > 0 && c.heads > 0, "feature map '", c.name, "': heads and head_dim must be positive, got ", c.heads, ", ", D);
  HH_CHECK(c.feature_dim >= 0, "feature map '", c.name, "': feature_dim must be >= 0, got ", c.feature_dim);
  if (c.name == "elu") return std::make_shared<Elu>(D);
  if (c.name == "relu") return std::make_shared<Relu>(D);
  if (c.name == "exp") {
    HH_CHECK(c.temperature > 0, "feature map 'exp': temperature must be positive, got ", c.temperature);
    return std::make_shared<Exp>(D, c.temperature);
  }
  if (c.name == "taylor") return std::make_shared<Taylor>(D, c.taylor_packed);
  if (c.name == "cosformer") return std::make_shared<CosFormer>(D, c.cosformer_length);
  if (c.name == "performer")
    return std::make_shared<Performer>(D, c.feature_dim > 0 ? c.feature_dim : 256, c.redraw_interval, c.seed, init);
  if (c.name == "t2r" || c.name == "t2r-hh") return std::make_shared<Learned>(c.name, Learned::Kind::t2r, c, false, init);
  if (c.name == "hedgehog") return std::make_shared<Learned>(c.name, Learned::Kind::hedgehog, c, false, init);
  if (c.name == "hedgehog-exp") return std::make_shared<Learned>(c.name, Learned::Kind::hedgehog_exp, c, false, init);
  if (c.name == "hedgehog-untrained")
    return std::make_shared<Learned>(c.name, Learned::Kind::hedgehog, c, true, init);
  std::string all;
  for (const auto& n : feature_map_names()) all += (all.empty() ? "" : ", ") + n;
  fail(str("feature map: unknown name '", c.name, "' (expected softmax or one of: ", all, ")"));
}

HybridFeatureMap::HybridFeatureMap(std::shared_ptr<FeatureMap> m, int64_t heads, Init init, bool affine_)
    : FeatureMap("hybrid-" + m->name()), map(std::move(m)), affine(affine_) {
  HH_CHECK(heads > 0, "feature map '", name(), "': heads must be positive, got ", heads);
  register_module("map", map);
  register_parameter("window_factor", &window_factor, zeros({heads}, {init.dtype, init.device}));
}

Tensor HybridFeatureMap::window_weight(DType dtype) const { return sigmoid(window_factor).to(dtype); }

Tensor HybridFeatureMap::linear_weight(DType dtype) const {
  if (affine) return sub(1.0, sigmoid(window_factor)).to(dtype);
  return ones({window_factor.size(0)}, {dtype, window_factor.device()});
}

}  // namespace hh::nn
