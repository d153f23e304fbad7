// Every op's cases, declared once (registered at start-up) and checked by the harness
// (op_harness.h) on every backend: op_cases_test.cpp on the CPU, tests/cuda/ on CUDA.
#include <cmath>

#include "loom/ops/conv.h"
#include "op_harness.h"

using harness::F;
using harness::I;
using harness::OpCase;
using harness::P;
using loom::Tensor;
using ref::R;
using TV = std::vector<Tensor>;
using RV = std::vector<R>;

namespace {

std::vector<int64_t> as_ints(const R& r) {
  return std::vector<int64_t>(r.v.begin(), r.v.end());
}

// Index values for a gather/scatter along `dim` of a tensor whose size there is `limit`.
harness::Input index_input(loom::Shape shape, int64_t limit) {
  return I(std::move(shape), limit);
}

void register_elementwise() {
  using BinF = std::function<Tensor(const Tensor&, const Tensor&)>;
  auto binary_cases = [](BinF f, std::function<double(double, double)> g, bool positive_b) {
    auto b = [&](loom::Shape s) { return positive_b ? P(std::move(s)) : F(std::move(s)); };
    std::vector<OpCase> cases;
    for (auto [label, sa, sb] : std::vector<std::tuple<const char*, loom::Shape, loom::Shape>>{
             {"same shape", {3, 4}, {3, 4}},
             {"row broadcast", {2, 3, 4}, {4}},
             {"both broadcast", {3, 1, 5}, {1, 4, 1}},
             {"scalar tensor", {2, 5}, {}}}) {
      cases.push_back(OpCase{label,
                             {F(sa), b(sb)},
                             [f](const TV& x) { return f(x[0], x[1]); },
                             [g](const RV& x) { return ref::binary(x[0], x[1], g); }});
    }
    return cases;
  };
  harness::register_op("add", binary_cases(
                                  loom::add, [](double a, double b) { return a + b; }, false));
  harness::register_op("sub", binary_cases(
                                  loom::sub, [](double a, double b) { return a - b; }, false));
  harness::register_op("mul", binary_cases(
                                  loom::mul, [](double a, double b) { return a * b; }, false));
  // The divisor's gradient -g a / b^2 is rounded to bf16 after each of three products, then
  // summed over the broadcast dimensions, where weights of both signs cancel and magnify those
  // roundings against the result: over 10000 random seeds it differed from f32 by up to 4.7e-2
  // (above 3e-2 in about 1 seed in 500), so div's bf16 bound is 8e-2.
  auto div_cases = binary_cases(
      loom::div, [](double a, double b) { return a / b; }, true);
  for (OpCase& c : div_cases) c.bf16_tol = 8e-2;
  harness::register_op("div", div_cases);

  using UnF = std::function<Tensor(const Tensor&)>;
  auto unary = [](const char* name, UnF f, std::function<double(double)> g, bool positive,
                  double grad_tol = 2e-3) {
    auto in = [&](loom::Shape s) { return positive ? P(std::move(s)) : F(std::move(s)); };
    std::vector<OpCase> cases;
    for (loom::Shape s : {loom::Shape{7}, loom::Shape{3, 5}, loom::Shape{2, 3, 4}}) {
      OpCase c{loom::shape_str(s),
               {in(s)},
               [f](const TV& x) { return f(x[0]); },
               [g](const RV& x) { return ref::unary(x[0], g); }};
      c.grad_tol = grad_tol;
      cases.push_back(c);
    }
    harness::register_op(name, cases);
  };
  unary(
      "neg", loom::neg, [](double x) { return -x; }, false);
  unary(
      "add_scalar", [](const Tensor& x) { return loom::add_scalar(x, 0.75); },
      [](double x) { return x + 0.75; }, false);
  unary(
      "mul_scalar", [](const Tensor& x) { return loom::mul_scalar(x, -1.25); },
      [](double x) { return x * -1.25; }, false);
  unary(
      "exp", loom::exp, [](double x) { return std::exp(x); }, false);
  unary(
      "log", loom::log, [](double x) { return std::log(x); }, true);
  unary(
      "sqrt", loom::sqrt, [](double x) { return std::sqrt(x); }, true);
  unary(
      "rsqrt", loom::rsqrt, [](double x) { return 1.0 / std::sqrt(x); }, true);
  unary(
      "tanh", loom::tanh, [](double x) { return std::tanh(x); }, false);
  unary(
      "pow", [](const Tensor& x) { return loom::pow(x, 2.5); },
      [](double x) { return std::pow(x, 2.5); }, true);
  unary(
      "relu", loom::relu, [](double x) { return x > 0 ? x : 0.0; }, false);
  unary("gelu", loom::gelu, ref::gelu_tanh, false);
  unary("silu", loom::silu, ref::silu, false);
  unary(
      "sigmoid", loom::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, false);
  unary(
      "softplus", loom::softplus, [](double x) { return std::log1p(std::exp(x)); }, false);

  harness::register_op("swiglu", {OpCase{"(3, 8)",
                                         {F({3, 8}), F({3, 8})},
                                         [](const TV& x) { return loom::swiglu(x[0], x[1]); },
                                         [](const RV& x) {
                                           return ref::binary(x[0], x[1], [](double g, double u) {
                                             return ref::silu(g) * u;
                                           });
                                         }}});
}

void register_reductions() {
  auto cases = [](const char* op,
                  std::function<Tensor(const Tensor&, std::vector<int64_t>, bool)> f) {
    std::vector<OpCase> cs;
    for (auto [label, shape, dims, keep] :
         std::vector<std::tuple<const char*, loom::Shape, std::vector<int64_t>, bool>>{
             {"all", {3, 4}, {}, false},
             {"last dim", {2, 3, 5}, {-1}, false},
             {"first dim keepdim", {4, 3}, {0}, true},
             {"two dims", {2, 3, 4}, {0, 2}, false},
             // Contiguous runs of reduced dims before kept ones (summed in place, no transpose),
             // including more columns than one 256-wide column block.
             {"middle dim", {2, 5, 3}, {1}, false},
             {"leading dims", {3, 4, 5}, {0, 1}, false},
             {"first dim, wide", {3, 600}, {0}, false}}) {
      std::vector<int64_t> d = dims;
      const bool k = keep;
      cs.push_back(OpCase{label,
                          {F(shape)},
                          [f, d, k](const TV& x) { return f(x[0], d, k); },
                          [op, d, k](const RV& x) { return ref::reduce(x[0], d, k, op); }});
    }
    return cs;
  };
  harness::register_op("sum", cases("sum", [](const Tensor& x, std::vector<int64_t> d, bool k) {
                         return loom::sum(x, d, k);
                       }));
  harness::register_op("mean", cases("mean", [](const Tensor& x, std::vector<int64_t> d, bool k) {
                         return loom::mean(x, d, k);
                       }));
  auto max_cases = cases(
      "max", [](const Tensor& x, std::vector<int64_t> d, bool k) { return loom::max(x, d, k); });
  // bf16 rounding can create ties (and so a different argmax) in random data: compare
  // forward only there, the gradient routing is checked in f32.
  for (auto& c : max_cases) c.check_bf16 = false;
  harness::register_op("max", max_cases);
}

void register_matmul() {
  std::vector<OpCase> mm;
  for (auto [label, sa, sb] : std::vector<std::tuple<const char*, loom::Shape, loom::Shape>>{
           {"2d", {5, 7}, {7, 3}},
           {"batched", {2, 4, 6}, {2, 6, 3}},
           {"broadcast b", {3, 4, 5}, {5, 2}},
           {"broadcast a", {4, 5}, {3, 5, 2}}}) {
    mm.push_back(OpCase{label,
                        {F(sa), F(sb)},
                        [](const TV& x) { return loom::matmul(x[0], x[1]); },
                        [](const RV& x) { return ref::matmul(x[0], x[1]); }});
  }
  mm.push_back(OpCase{"transposed operands",
                      {F({6, 4}), F({3, 6})},
                      [](const TV& x) {
                        return loom::matmul(loom::transpose(x[0], 0, 1),
                                            loom::transpose(x[1], 0, 1));
                      },
                      [](const RV& x) {
                        return ref::matmul(ref::transpose_last(x[0]), ref::transpose_last(x[1]));
                      }});
  harness::register_op("matmul", mm);
  // The experts of a mixture: groups of any size, empty ones and all rows in one included.
  std::vector<OpCase> grouped;
  for (auto [label, sizes] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
           {"three groups", {3, 2, 4}},
           {"empty groups", {0, 5, 0, 2}},
           {"all rows to one", {0, 0, 7}},
           {"groups cut in pieces (256 + 32 + 12, 16 + 5)", {300, 0, 21}}}) {
    int64_t rows = 0;
    for (int64_t n : sizes) rows += n;
    grouped.push_back(
        OpCase{label,
               {F({rows, 5}), F({int64_t(sizes.size()), 3, 5})},
               [sizes](const TV& x) { return loom::grouped_linear(x[0], x[1], sizes); },
               [sizes](const RV& x) { return ref::grouped_linear(x[0], x[1], sizes); }});
  }
  harness::register_op("grouped_linear", grouped);
  harness::register_op("linear",
                       {OpCase{"bias",
                               {F({2, 3, 5}), F({4, 5}), F({4})},
                               [](const TV& x) { return loom::linear(x[0], x[1], x[2]); },
                               [](const RV& x) { return ref::linear(x[0], x[1], &x[2]); }},
                        OpCase{"no bias",
                               {F({6, 5}), F({3, 5})},
                               [](const TV& x) { return loom::linear(x[0], x[1]); },
                               [](const RV& x) { return ref::linear(x[0], x[1], nullptr); }}});
  // gelu(linear(x)) as one fused op.
  auto linear_gelu_ref = [](const R& linear_out) { return ref::unary(linear_out, ref::gelu_tanh); };
  harness::register_op(
      "linear_gelu",
      {OpCase{"bias",
              {F({2, 3, 5}), F({4, 5}), F({4})},
              [](const TV& x) { return loom::linear_gelu(x[0], x[1], x[2]); },
              [=](const RV& x) { return linear_gelu_ref(ref::linear(x[0], x[1], &x[2])); }},
       OpCase{"no bias",
              {F({6, 5}), F({3, 5})},
              [](const TV& x) { return loom::linear_gelu(x[0], x[1]); },
              [=](const RV& x) { return linear_gelu_ref(ref::linear(x[0], x[1], nullptr)); }}});
}

void register_shape_ops() {
  harness::register_op("reshape", {OpCase{"(2,3,4)->(4,6)",
                                          {F({2, 3, 4})},
                                          [](const TV& x) {
                                            return loom::reshape(x[0], {4, -1});
                                          },
                                          [](const RV& x) {
                                            return R{{4, 6}, x[0].v};
                                          }}});
  harness::register_op("permute", {OpCase{"(2,3,4)->(4,2,3)",
                                          {F({2, 3, 4})},
                                          [](const TV& x) {
                                            return loom::permute(x[0], {2, 0, 1});
                                          },
                                          [](const RV& x) {
                                            return ref::permute(x[0], {2, 0, 1});
                                          }}});
  harness::register_op("transpose", {OpCase{"(3,5)",
                                            {F({3, 5})},
                                            [](const TV& x) { return loom::transpose(x[0], 0, 1); },
                                            [](const RV& x) {
                                              return ref::permute(x[0], {1, 0});
                                            }}});
  harness::register_op("narrow", {OpCase{"dim 1 [1,4)",
                                         {F({3, 5})},
                                         [](const TV& x) { return loom::narrow(x[0], 1, 1, 3); },
                                         [](const RV& x) { return ref::narrow(x[0], 1, 1, 3); }}});
  harness::register_op("expand", {OpCase{"(3,1)->(2,3,4)",
                                         {F({3, 1})},
                                         [](const TV& x) {
                                           return loom::expand(x[0], {2, 3, 4});
                                         },
                                         [](const RV& x) {
                                           return ref::expand(x[0], {2, 3, 4});
                                         }}});
  harness::register_op(
      "contiguous",
      {OpCase{"of a transpose",
              {F({4, 3})},
              [](const TV& x) { return loom::contiguous(loom::transpose(x[0], 0, 1)); },
              [](const RV& x) {
                return ref::permute(x[0], {1, 0});
              }}});
  harness::register_op("cat", {OpCase{"dim 1",
                                      {F({2, 3}), F({2, 1}), F({2, 4})},
                                      [](const TV& x) {
                                        return loom::cat({x[0], x[1], x[2]}, 1);
                                      },
                                      [](const RV& x) {
                                        return ref::cat({x[0], x[1], x[2]}, 1);
                                      }},
                               OpCase{"dim 0",
                                      {F({1, 3}), F({2, 3})},
                                      [](const TV& x) {
                                        return loom::cat({x[0], x[1]}, 0);
                                      },
                                      [](const RV& x) {
                                        return ref::cat({x[0], x[1]}, 0);
                                      }}});
  harness::register_op(
      "split", {OpCase{"middle part",
                       {F({3, 7})},
                       [](const TV& x) {
                         return loom::split(x[0], {2, 3, 2}, 1)[1];
                       },
                       [](const RV& x) { return ref::narrow(x[0], 1, 2, 3); }},
                OpCase{"by size",
                       {F({5, 2})},
                       [](const TV& x) { return loom::split(x[0], 2, 0)[2]; },
                       [](const RV& x) { return ref::narrow(x[0], 0, 4, 1); }},
                OpCase{"every part, reordered",
                       {F({3, 7})},
                       [](const TV& x) {
                         auto p = loom::split(x[0], {2, 3, 2}, 1);
                         return loom::cat({p[2], p[0], p[1]}, 1);
                       },
                       [](const RV& x) {
                         return ref::cat({ref::narrow(x[0], 1, 5, 2), ref::narrow(x[0], 1, 0, 2),
                                          ref::narrow(x[0], 1, 2, 3)},
                                         1);
                       }}});
  harness::register_op("stack", {OpCase{"dim 1",
                                        {F({2, 3}), F({2, 3})},
                                        [](const TV& x) {
                                          return loom::stack({x[0], x[1]}, 1);
                                        },
                                        [](const RV& x) {
                                          R a = x[0], b = x[1];
                                          a.shape = {2, 1, 3};
                                          b.shape = {2, 1, 3};
                                          return ref::cat({a, b}, 1);
                                        }}});
}

void register_index_ops() {
  harness::register_op(
      "index_select",
      {OpCase{"dim 0 with repeats",
              {F({5, 3}), I({7}, 5)},
              [](const TV& x) { return loom::index_select(x[0], 0, x[1]); },
              [](const RV& x) { return ref::index_select(x[0], 0, as_ints(x[1])); }},
       OpCase{"dim 1",
              {F({2, 4, 3}), I({2}, 4)},
              [](const TV& x) { return loom::index_select(x[0], 1, x[1]); },
              [](const RV& x) { return ref::index_select(x[0], 1, as_ints(x[1])); }}});
  harness::register_op("gather", {OpCase{"dim 1",
                                         {F({3, 5}), index_input({3, 4}, 5)},
                                         [](const TV& x) { return loom::gather(x[0], 1, x[1]); },
                                         [](const RV& x) { return ref::gather(x[0], 1, x[1]); }},
                                  OpCase{"dim 0",
                                         {F({4, 2}), index_input({3, 2}, 4)},
                                         [](const TV& x) { return loom::gather(x[0], 0, x[1]); },
                                         [](const RV& x) { return ref::gather(x[0], 0, x[1]); }}});
  harness::register_op("scatter_add",
                       {OpCase{"dim 1",
                               {F({3, 4}), index_input({3, 6}, 4), F({3, 6})},
                               [](const TV& x) { return loom::scatter_add(x[0], 1, x[1], x[2]); },
                               [](const RV& x) { return ref::scatter_add(x[0], 1, x[1], x[2]); }}});
  harness::register_op("index_add",
                       {OpCase{"dim 0 with repeats",
                               {F({4, 3}), I({6}, 4), F({6, 3})},
                               [](const TV& x) { return loom::index_add(x[0], 0, x[1], x[2]); },
                               [](const RV& x) {
                                 R o = x[0];  // out[index[i], c] += src[i, c]
                                 for (size_t i = 0; i < x[1].v.size(); ++i)
                                   for (int64_t c = 0; c < 3; ++c)
                                     o.v[size_t(int64_t(x[1].v[i]) * 3 + c)] +=
                                         x[2].v[i * 3 + size_t(c)];
                                 return o;
                               }}});
  harness::register_op("embedding", {OpCase{"(2,5) ids into (11,4)",
                                            {I({2, 5}, 11), F({11, 4})},
                                            [](const TV& x) { return loom::embedding(x[0], x[1]); },
                                            [](const RV& x) {
                                              R o = ref::index_select(x[1], 0, as_ints(x[0]));
                                              o.shape = {2, 5, 4};
                                              return o;
                                            }}});
}

void register_norms_and_losses() {
  harness::register_op(
      "layer_norm",
      {OpCase{"affine",
              {F({2, 3, 8}), F({8}), F({8})},
              [](const TV& x) { return loom::layer_norm(x[0], x[1], x[2], 1e-5f); },
              [](const RV& x) { return ref::layer_norm(x[0], &x[1], &x[2], 1e-5); }},
       OpCase{"no affine",
              {F({4, 6})},
              [](const TV& x) { return loom::layer_norm(x[0], Tensor(), Tensor(), 1e-5f); },
              [](const RV& x) { return ref::layer_norm(x[0], nullptr, nullptr, 1e-5); }}});
  harness::register_op("rms_norm",
                       {OpCase{"weight",
                               {F({3, 2, 8}), F({8})},
                               [](const TV& x) { return loom::rms_norm(x[0], x[1], 1e-6f); },
                               [](const RV& x) { return ref::rms_norm(x[0], &x[1], 1e-6); }}});
  harness::register_op("softmax", {OpCase{"rows",
                                          {F({3, 7})},
                                          [](const TV& x) { return loom::softmax(x[0]); },
                                          [](const RV& x) { return ref::softmax(x[0], false); }}});
  harness::register_op("log_softmax",
                       {OpCase{"rows",
                               {F({2, 3, 6})},
                               [](const TV& x) { return loom::log_softmax(x[0]); },
                               [](const RV& x) { return ref::softmax(x[0], true); }}});
  auto targets_with_ignored = [](int64_t limit) {
    harness::Input t = I({2, 4}, limit);
    t.values = [limit](int64_t n, std::mt19937& rng) {
      std::vector<double> v(static_cast<size_t>(n));
      std::uniform_int_distribution<int64_t> d(0, limit - 1);
      for (auto& x : v) x = double(d(rng));
      v[1] = -100;  // one ignored position
      return v;
    };
    return t;
  };
  harness::register_op("cross_entropy",
                       {OpCase{"with ignore_index",
                               {F({2, 4, 9}), targets_with_ignored(9)},
                               [](const TV& x) { return loom::cross_entropy(x[0], x[1], -100); },
                               [](const RV& x) { return ref::cross_entropy(x[0], x[1], -100); }}});
  harness::register_op("mse", {OpCase{"(3,5)",
                                      {F({3, 5}), F({3, 5})},
                                      [](const TV& x) { return loom::mse(x[0], x[1]); },
                                      [](const RV& x) {
                                        R d = ref::binary(x[0], x[1], [](double a, double b) {
                                          return (a - b) * (a - b);
                                        });
                                        return ref::reduce(d, {}, false, "mean");
                                      }}});
}

void register_transformer_ops() {
  harness::register_op(
      "rope",
      {OpCase{"(2,3,5,8) at offset 7",
              {F({2, 3, 5, 8})},
              [](const TV& x) {
                Tensor pos = loom::from_vector(std::vector<int64_t>{7, 8, 9, 10, 11}, {5});
                return loom::rope(x[0], pos, 10000.0);
              },
              [](const RV& x) {
                return ref::rope(x[0], {7, 8, 9, 10, 11}, 10000.0);
              }},
       // Llama 3.x's scaling with an original context of 100 over D = 8: pair 0's
       // wavelength (6.3) is kept, pair 1's (63) blended, pairs 2 and 3 (628, 6283)
       // turn 8 times slower. The frequencies by Meta's formula, written out here.
       OpCase{"(2,3,5,8) llama3-scaled at offset 40",
              {F({2, 3, 5, 8})},
              [](const TV& x) {
                Tensor pos = loom::from_vector(std::vector<int64_t>{40, 41, 42, 43, 44}, {5});
                return loom::rope(x[0], pos, 10000.0, loom::RopeScaling{8, 1, 4, 100});
              },
              [](const RV& x) {
                const double two_pi = 2 * 3.14159265358979323846;
                const double f1 = std::pow(10000.0, -0.25);  // pair 1, wavelength 62.8
                const double smooth = (100 / (two_pi / f1) - 1) / (4 - 1);
                const std::vector<double> freq = {1.0, (1 - smooth) * f1 / 8 + smooth * f1,
                                                  0.01 / 8, 0.001 / 8};
                return ref::rope(x[0], {40, 41, 42, 43, 44}, 10000.0, freq);
              }},
       // Linear scaling (position interpolation) by 4: every pair's frequency / 4.
       OpCase{"(2,3,5,8) linear-scaled at offset 40",
              {F({2, 3, 5, 8})},
              [](const TV& x) {
                Tensor pos = loom::from_vector(std::vector<int64_t>{40, 41, 42, 43, 44}, {5});
                loom::RopeScaling linear;
                linear.factor = 4, linear.linear = true;
                return loom::rope(x[0], pos, 10000.0, linear);
              },
              [](const RV& x) {
                const std::vector<double> freq = {1.0 / 4, 0.1 / 4, 0.01 / 4, 0.001 / 4};
                return ref::rope(x[0], {40, 41, 42, 43, 44}, 10000.0, freq);
              }}});
  // conv2d: a direct float64 convolution (zero padding, channels last) as the reference.
  auto conv_ref = [](const RV& x, int64_t k, bool has_bias) {
    const R& in = x[0];
    const int64_t B = in.size(0), H = in.size(1), W = in.size(2), C = in.size(3);
    const int64_t Co = x[1].size(0), r = k / 2;
    R o = ref::zeros({B, H, W, Co});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t xx = 0; xx < W; ++xx)
          for (int64_t co = 0; co < Co; ++co) {
            double acc = has_bias ? x[2].v[size_t(co)] : 0.0;
            for (int64_t dy = -r; dy <= r; ++dy)
              for (int64_t dx = -r; dx <= r; ++dx) {
                const int64_t sy = y + dy, sx = xx + dx;
                if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
                for (int64_t c = 0; c < C; ++c)
                  acc += in.v[size_t(((b * H + sy) * W + sx) * C + c)] *
                         x[1].v[size_t(co * k * k * C + ((dy + r) * k + (dx + r)) * C + c)];
              }
            o.v[size_t(((b * H + y) * W + xx) * Co + co)] = acc;
          }
    return o;
  };
  harness::register_op("conv2d",
                       {OpCase{"3x3, (2,5,4,3) -> 4 channels",
                               {F({2, 5, 4, 3}), F({4, 27}), F({4})},
                               [](const TV& x) { return loom::conv2d(x[0], x[1], x[2], 3); },
                               [conv_ref](const RV& x) { return conv_ref(x, 3, true); }},
                        OpCase{"5x5 without bias, (1,3,6,2) -> 3",
                               {F({1, 3, 6, 2}), F({3, 50})},
                               [](const TV& x) { return loom::conv2d(x[0], x[1], Tensor(), 5); },
                               [conv_ref](const RV& x) { return conv_ref(x, 5, false); }}});
  harness::register_op(
      "modulate", {OpCase{"(2,5,6)",
                          {F({2, 5, 6}), F({2, 6}), F({2, 6})},
                          [](const TV& x) { return loom::modulate(x[0], x[1], x[2]); },
                          [](const RV& x) {
                            R o = ref::zeros(x[0].shape);
                            for (int64_t i = 0; i < o.numel(); ++i) {
                              const int64_t n = i / 30, c = i % 6;
                              o.v[size_t(i)] = x[0].v[size_t(i)] * (1 + x[2].v[size_t(n * 6 + c)]) +
                                               x[1].v[size_t(n * 6 + c)];
                            }
                            return o;
                          }}});
  harness::register_op(
      "layer_norm_modulate",
      {OpCase{"(2,5,6)",
              {F({2, 5, 6}), F({2, 6}), F({2, 6})},
              [](const TV& x) { return loom::layer_norm_modulate(x[0], x[1], x[2], 1e-6f); },
              [](const RV& x) {
                R o = ref::layer_norm(x[0], nullptr, nullptr, 1e-6);
                for (int64_t i = 0; i < o.numel(); ++i) {
                  const int64_t n = i / 30, c = i % 6;
                  o.v[size_t(i)] =
                      o.v[size_t(i)] * (1 + x[2].v[size_t(n * 6 + c)]) + x[1].v[size_t(n * 6 + c)];
                }
                return o;
              }}});
  harness::register_op("gated_residual",
                       {OpCase{"(2,5,6)",
                               {F({2, 5, 6}), F({2, 6}), F({2, 5, 6})},
                               [](const TV& x) { return loom::gated_residual(x[0], x[1], x[2]); },
                               [](const RV& x) {
                                 R o = ref::zeros(x[0].shape);
                                 for (int64_t i = 0; i < o.numel(); ++i) {
                                   const int64_t n = i / 30, c = i % 6;
                                   o.v[size_t(i)] = x[0].v[size_t(i)] +
                                                    x[1].v[size_t(n * 6 + c)] * x[2].v[size_t(i)];
                                 }
                                 return o;
                               }}});
  std::vector<OpCase> attn;
  for (auto [label, sq, skv, hq, hkv, causal, masked, window] : std::vector<
           std::tuple<const char*, int64_t, int64_t, int64_t, int64_t, bool, bool, int64_t>>{
           {"bidirectional", 5, 5, 2, 2, false, false, 0},
           {"causal", 6, 6, 2, 2, true, false, 0},
           {"causal gqa, more keys", 3, 7, 4, 2, true, false, 0},
           {"mqa with mask", 4, 5, 2, 1, false, true, 0},
           {"sliding window 3", 7, 7, 2, 2, true, false, 3},
           {"sliding window, gqa, more keys", 3, 8, 4, 2, true, false, 4}}) {
    const bool c = causal, m = masked;
    const int64_t w = window;
    std::vector<harness::Input> ins = {F({1, hq, sq, 4}), F({1, hkv, skv, 4}), F({1, hkv, skv, 4})};
    if (m) ins.push_back(F({sq, skv}, /*grad=*/false));
    OpCase oc{label, ins,
              [c, m, w](const TV& x) {
                // The additive mask stays f32 whatever the compute dtype.
                return loom::scaled_dot_product_attention(
                    x[0], x[1], x[2], m ? loom::to_dtype(x[3], loom::DType::F32) : Tensor(), c,
                    -1.0f, w);
              },
              [c, m, w](const RV& x) {
                return ref::attention(x[0], x[1], x[2], m ? &x[3] : nullptr, c, 0.5, w);
              }};
    attn.push_back(oc);
  }
  harness::register_op("attention", attn);
}

}  // namespace

namespace harness {
void register_all_cases() {
  static const bool done = [] {
    register_elementwise();
    register_reductions();
    register_matmul();
    register_shape_ops();
    register_index_ops();
    register_norms_and_losses();
    register_transformer_ops();
    return true;
  }();
  (void)done;
}
}  // namespace harness
