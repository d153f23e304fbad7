#include "op_harness.h"

#include <gtest/gtest.h>

#include <cmath>

namespace harness {

using loom::Shape;
using loom::Tensor;

std::map<std::string, std::vector<OpCase>>& registry() {
  static std::map<std::string, std::vector<OpCase>> r;
  return r;
}

void register_op(const std::string& op, std::vector<OpCase> cases) {
  registry()[op] = std::move(cases);
}

namespace {

struct Values {
  std::vector<std::vector<double>> data;  // per input, already rounded to f32 (or bf16)
};

std::vector<double> generate(const Input& in, std::mt19937& rng) {
  const int64_t n = loom::shape_numel(in.shape);
  if (in.values) return in.values(n, rng);
  std::vector<double> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> uni(-1.5, 1.5), pos(0.5, 2.0);
  std::uniform_int_distribution<int64_t> idx(0, std::max<int64_t>(in.limit - 1, 0));
  for (auto& x : v) {
    switch (in.kind) {
      case Kind::Float:
        x = uni(rng);
        break;
      case Kind::Positive:
        x = pos(rng);
        break;
      case Kind::Index:
        x = double(idx(rng));
        break;
    }
  }
  return v;
}

double round_to(double x, loom::DType dtype) {
  const float f = float(x);
  return dtype == loom::DType::BF16 ? double(loom::to_f32(loom::to_bf16(f))) : double(f);
}

// The same values as a non-contiguous view, built differentiably from `t` so gradients
// reach t: a transposed copy transposed back, or every other element of an interleaved copy.
Tensor non_contiguous_view(const Tensor& t) {
  if (t.numel() < 2) return t;
  if (t.dim() >= 2) {
    Tensor v = loom::transpose(loom::contiguous(loom::transpose(t, -1, -2)), -1, -2);
    if (!v.is_contiguous()) return v;
  }
  // Size-1 dims make a transpose contiguous: interleave with a copy instead (stride 2).
  Shape pair_shape = t.shape();
  pair_shape.push_back(2);
  Tensor pairs = loom::contiguous(loom::expand(loom::unsqueeze(t, -1), pair_shape));
  return loom::squeeze(loom::narrow(pairs, -1, 0, 1), -1);
}

Tensor make_leaf(const Input& in, const std::vector<double>& v, loom::DType dtype,
                 loom::Device device) {
  if (in.kind == Kind::Index) {
    std::vector<int64_t> iv(v.begin(), v.end());
    return loom::from_vector(iv, in.shape, loom::DType::I64, device);
  }
  std::vector<float> fv(v.begin(), v.end());
  return loom::from_vector(fv, in.shape, dtype, device);
}

ref::R to_ref(const Input& in, const std::vector<double>& v) {
  return ref::R{in.shape, v};
}

// max |a - b| / max(max |b|, floor). The floor keeps all-zero references comparable; for
// bf16 it is 1: inputs and weights are O(1), and a gradient that is a sum with cancellation
// (a broadcast scalar's) can be small while its bf16 rounding error is that of its terms.
double rel_error(const std::vector<double>& a, const std::vector<double>& b, size_t* where,
                 double floor = 1e-6) {
  double scale = floor, err = 0;
  for (double x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::isfinite(a[i]) ? std::fabs(a[i] - b[i]) : INFINITY;
    if (e > err || std::isnan(e)) {
      err = std::isnan(e) ? INFINITY : e;
      if (where) *where = i;
    }
  }
  return err / scale;
}

std::string describe(const std::string& op, const OpCase& c, unsigned seed) {
  return op + " [" + c.label + "] (seed " + std::to_string(seed) + ")";
}

struct RunResult {
  std::vector<double> out;
  std::vector<std::vector<double>> grads;  // per input (empty when not checked)
};

// Runs the Loom op once; with weights, also backpropagates sum(out * weights).
RunResult run_loom(const OpCase& c, const std::vector<std::vector<double>>& values,
                   loom::DType dtype, bool non_contiguous, const std::vector<double>* weights,
                   loom::Device device) {
  std::vector<Tensor> leaves, inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Tensor leaf = make_leaf(c.inputs[i], values[i], dtype, device);
    const bool float_input = c.inputs[i].kind != Kind::Index;
    if (weights && float_input && c.inputs[i].grad) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
    if (non_contiguous && float_input) {
      Tensor view = non_contiguous_view(leaf);
      EXPECT_TRUE(view.numel() < 2 || !view.is_contiguous()) << c.label;
      inputs.push_back(view);
    } else {
      inputs.push_back(leaf);
    }
  }
  RunResult r;
  Tensor out = c.run(inputs);
  r.out = loom::to_vector_f64(out);
  if (weights) {
    std::vector<float> w(weights->begin(), weights->end());
    EXPECT_EQ(out.device(), device) << c.label << ": output on " << out.device().str();
    loom::backward(out, loom::from_vector(w, out.shape(), out.dtype(), out.device()));
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].kind == Kind::Index || !c.inputs[i].grad) {
        r.grads.emplace_back();
        continue;
      }
      const Tensor& leaf = leaves[i];
      EXPECT_TRUE(leaf.grad().defined()) << c.label << ": no gradient reached input " << i;
      r.grads.push_back(leaf.grad().defined() ? loom::to_vector_f64(leaf.grad())
                                              : std::vector<double>());
    }
  }
  return r;
}

// Central finite differences of sum(reference(x) * weights) in float64.
std::vector<double> finite_difference(const OpCase& c, std::vector<ref::R> xs, size_t which,
                                      const std::vector<double>& weights) {
  std::vector<double> g(xs[which].v.size());
  auto loss = [&]() {
    ref::R out = c.reference(xs);
    double s = 0;
    for (size_t i = 0; i < out.v.size(); ++i) s += out.v[i] * weights[i];
    return s;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    const double x0 = xs[which].v[i], h = 1e-6 * std::max(1.0, std::fabs(x0));
    xs[which].v[i] = x0 + h;
    const double up = loss();
    xs[which].v[i] = x0 - h;
    const double down = loss();
    xs[which].v[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// Poisons new allocations on the host and on `device` for the scope.
class PoisonScope {
 public:
  explicit PoisonScope(loom::Device device)
      : device_(dynamic_cast<loom::CachingAllocator*>(&loom::allocator_for(device.type))) {
    loom::host_allocator().set_poison(true);
    if (device_) device_->set_poison(true);
  }
  ~PoisonScope() {
    loom::host_allocator().set_poison(false);
    if (device_) device_->set_poison(false);
  }

 private:
  loom::CachingAllocator* device_;
};

}  // namespace

void check_op(const std::string& op, loom::Device device) {
  register_all_cases();
  auto it = registry().find(op);
  ASSERT_TRUE(it != registry().end()) << "op " << op << " has no registered cases";
  ASSERT_FALSE(it->second.empty()) << "op " << op << " is registered without cases";
  PoisonScope poison(device);
  std::random_device random_device;
  for (const OpCase& c : it->second) {
    const unsigned seed = random_device();
    std::mt19937 rng(seed);
    const std::string what = describe(op, c, seed);
    std::vector<std::vector<double>> values;
    std::vector<ref::R> refs;
    for (const Input& in : c.inputs) {
      std::vector<double> v = generate(in, rng);
      if (in.kind != Kind::Index)
        for (double& x : v) x = round_to(x, loom::DType::F32);
      values.push_back(v);
      refs.push_back(to_ref(in, v));
    }
    const ref::R expected = c.reference(refs);
    std::vector<double> weights(expected.v.size());
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    for (double& w : weights) w = round_to(uni(rng), loom::DType::F32);

    // (a) forward, contiguous and non-contiguous inputs
    for (bool nc : {false, true}) {
      RunResult r = run_loom(c, values, loom::DType::F32, nc, nullptr, device);
      ASSERT_EQ(r.out.size(), expected.v.size()) << what << ": output size";
      size_t at = 0;
      const double err = rel_error(r.out, expected.v, &at);
      EXPECT_LE(err, c.forward_tol)
          << what << (nc ? " non-contiguous" : "") << ": forward error " << err << " at " << at
          << " (loom " << r.out[at] << ", ref " << expected.v[at] << ")";
    }

    // (b) gradients against finite differences of the float64 reference
    RunResult r = run_loom(c, values, loom::DType::F32, /*non_contiguous=*/true, &weights, device);
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].kind == Kind::Index || !c.inputs[i].grad) continue;
      std::vector<double> fd = finite_difference(c, refs, i, weights);
      ASSERT_EQ(r.grads[i].size(), fd.size()) << what << ": gradient size of input " << i;
      size_t at = 0;
      const double err = rel_error(r.grads[i], fd, &at);
      EXPECT_LE(err, c.grad_tol) << what << ": gradient of input " << i << " error " << err
                                 << " at " << at << " (loom " << r.grads[i][at] << ", fd " << fd[at]
                                 << ")";
    }

    // (c) bf16 against f32 on the same (bf16-representable) inputs
    if (c.check_bf16) {
      std::vector<std::vector<double>> v16 = values;
      for (size_t i = 0; i < v16.size(); ++i)
        if (c.inputs[i].kind != Kind::Index)
          for (double& x : v16[i]) x = round_to(x, loom::DType::BF16);
      std::vector<double> w16 = weights;
      for (double& w : w16) w = round_to(w, loom::DType::BF16);
      RunResult r32 = run_loom(c, v16, loom::DType::F32, false, &w16, device);
      RunResult r16 = run_loom(c, v16, loom::DType::BF16, false, &w16, device);
      const double err = rel_error(r16.out, r32.out, nullptr, 1.0);
      EXPECT_LE(err, c.bf16_tol) << what << ": bf16 forward differs from f32 by " << err;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        if (r32.grads[i].empty()) continue;
        const double gerr = rel_error(r16.grads[i], r32.grads[i], nullptr, 1.0);
        EXPECT_LE(gerr, c.bf16_tol)
            << what << ": bf16 gradient of input " << i << " differs from f32 by " << gerr;
      }
    }
  }
}

}  // namespace harness
