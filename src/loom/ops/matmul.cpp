#include "loom/ops/matmul.h"

#include "loom/autograd/checkpoint.h"
#include "loom/autograd/engine.h"

#include "loom/ops/detail.h"
#include "loom/ops/linear_quantizer.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"

namespace loom {

using detail::backend_of;

namespace {

// 3-D (batch, rows, cols) raw view of a 2-D or 3-D operand; 2-D gets batch 1 (broadcast).
Tensor as_batched(const Tensor& t) {
  if (t.dim() == 3) return t;
  return t.as_strided({1, t.size(0), t.size(1)}, {0, t.stride(0), t.stride(1)}, t.offset());
}

Tensor mT(const Tensor& t) {
  return transpose(t, -2, -1);
}

Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const char* op, DType out_dtype);

// A bf16 copy of t for autocast (outside the graph: the op's own node carries the gradient);
// a parameter's is made once per step (bf16_copy_of).
Tensor lowered(const Tensor& t) {
  return bf16_copy_of(t);
}

// x @ y in backward: a mixed-precision product takes bf16 operands (the gradient rounded like
// the forward's inputs) and returns f32 (or `out`: a bf16 input's gradient), as the forward did.
Tensor product(const Tensor& x, const Tensor& y, bool mixed, DType out = DType::F32) {
  return mixed ? gemm(lowered(x), lowered(y), Tensor(), "matmul", out) : matmul(x, y);
}

// An uninitialised (rows, cols) matrix for a GEMM operand, with the row stride the backend
// prefers (the CPU pads rows of a multiple of 4 KB, which its GEMM would otherwise copy).
Tensor empty_gemm_operand(int64_t rows, int64_t cols, DType dtype, Device device) {
  const int64_t stride = backend_for(device).gemm_operand_row_stride(rows, cols, dtype);
  if (stride == cols) return Tensor::empty({rows, cols}, dtype, device);
  return Tensor::empty({rows, stride}, dtype, device).as_strided({rows, cols}, {stride, 1}, 0);
}

// m (rows, cols) with unit column stride seen as `shape` (..., cols), rows in order.
Tensor rows_as(const Tensor& m, const Shape& shape) {
  Shape strides(shape.size(), 1);
  int64_t stride = m.stride(0);
  for (size_t i = shape.size() - 1; i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return m.as_strided(shape, strides, m.offset());
}

struct MatmulBackward : Node {
  Tensor a, b;         // bf16 copies when mixed
  bool mixed = false;  // autocast: bf16 operands, f32 output
  const char* name() const override { return "MatmulBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (inputs[0].active()) ga = sum_to_shape(product(g, mT(b), mixed), a.shape());
    if (inputs[1].active()) {
      if (b.dim() == 2 && g.dim() == 3) {
        // Broadcast b: fold the batch into the rows so dB is one GEMM, not a sum of many.
        Tensor g2 = reshape(g, {-1, g.size(-1)});  // (batch M, N)
        Tensor a2 = reshape(a.dim() == 3 ? a : expand(a, {g.size(0), a.size(0), a.size(1)}),
                            {-1, a.size(-1)});  // (batch M, K)
        gb = product(mT(a2), g2, mixed);        // (K, N)
      } else {
        gb = sum_to_shape(product(mT(a), g, mixed), b.shape());
      }
    }
    return {ga, gb};
  }
  void release() override { a = b = Tensor(); }
};

Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const char* op, DType out_dtype) {
  detail::check_floating(op, a, "a");
  detail::check_floating(op, b, "b");
  detail::check_same_dtype(op, a, b);
  detail::check_same_device(op, a, b);
  LOOM_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3))
      << op << ": expected 2-D or 3-D operands, got " << a.shape() << " and " << b.shape();
  LOOM_CHECK(a.size(-1) == b.size(-2))
      << op << ": inner dims differ: " << a.shape() << " @ " << b.shape();
  const int64_t batch_a = a.dim() == 3 ? a.size(0) : 1, batch_b = b.dim() == 3 ? b.size(0) : 1;
  LOOM_CHECK(batch_a == batch_b || batch_a == 1 || batch_b == 1)
      << op << ": batch dims differ: " << a.shape() << " @ " << b.shape();
  const int64_t batch = std::max(batch_a, batch_b);
  Shape out_shape = {a.size(-2), b.size(-1)};  // (M, N) for (M, K) @ (K, N)
  if (a.dim() == 3 || b.dim() == 3) out_shape.insert(out_shape.begin(), batch);  // (batch, M, N)
  Tensor out = Tensor::empty(out_shape, out_dtype, a.device());
  // Any strides go to the kernel as they are: it packs only layouts the GEMM cannot read.
  backend_of(a).matmul(
      as_batched(a), as_batched(b), bias,
      out.as_strided({batch, out_shape[out_shape.size() - 2], out_shape.back()},
                     {out_shape.size() == 3 ? out.stride(0) : 0, out.stride(-2), 1}, 0));
  return out;
}

// a (rows, K) b (rows', K)^T (+ bias) with a recipe's operands: on the device's own
// low-precision GEMM where it has one, else quantised and multiplied in f32 (emulated).
Tensor quantized_product(LinearQuantizer& quantizer, GemmPass pass, Tensor a, GemmOperand a_role,
                         Tensor b, GemmOperand b_role, const Tensor& bias) {
  const Tensor direct = quantizer.gemm(pass, a, a_role, b, b_role, bias);
  if (direct.defined()) return direct;
  quantizer.quantize(pass, a, a_role, b, b_role);
  return gemm(a, mT(b), bias, "linear", DType::F32);
}

struct LinearBackward : Node {
  // x2: x flattened to (M, K), a bf16 copy when mixed. weight: the f32 parameter itself (not a
  // bf16 copy), so ZeRO-3 can free and re-gather it; backward lowers it again (which for a
  // parameter finds the forward's copy while the step's bf16 region lasts).
  Tensor x2, weight;
  DType x_dtype;       // the input's: its gradient's (bf16 for a Compute output under autocast)
  Tensor pre;          // linear_gelu: x W^T + b (M, N), the GELU's input; undefined otherwise
  bool mixed = false;  // autocast: bf16 operands, f32 output
  // A low-precision recipe's: both gradient products on operands it quantised (x2 is f32).
  std::shared_ptr<LinearQuantizer> quantizer;
  Shape x_shape;
  bool has_bias;
  const char* name() const override {
    return pre.defined() ? "LinearGeluBackward" : "LinearBackward";
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    Tensor g2 = reshape(grads[0], {-1, weight.size(0)});  // (M, N)
    Tensor gx, gw, gbias;
    const bool want_bias = has_bias && inputs[2].active();
    if (pre.defined()) {
      // Through the GELU, with the bias gradient summed in the same pass. Mixed: gpre is
      // written as the products' bf16 operand directly (the bias still sums the f32 values).
      const DType gpre_dtype = mixed ? DType::BF16 : pre.dtype();
      const Tensor gpre = empty_gemm_operand(pre.size(0), pre.size(1), gpre_dtype, pre.device());
      if (want_bias) gbias = Tensor::empty({pre.size(1)}, pre.dtype(), pre.device());
      backend_of(pre).gelu_bias_backward(pre, detail::raw_contiguous(g2), gpre, gbias);
      g2 = gpre;
    } else if (want_bias && mixed) {
      // Rounded for both products with the bias gradient summed (in f32) in the same pass; the
      // gradient of a Compute output is the products' bf16 operand already: its sums alone.
      const Tensor g = detail::raw_contiguous(g2);
      gbias = Tensor::empty({g.size(1)}, DType::F32, g.device());
      if (g.dtype() == DType::BF16) {
        backend_of(g).cast_with_column_sums(g, Tensor(), gbias);
        g2 = g;
      } else {
        const Tensor low = empty_gemm_operand(g.size(0), g.size(1), DType::BF16, g.device());
        backend_of(g).cast_with_column_sums(g, low, gbias);
        g2 = low;
      }
    } else if (want_bias) {
      gbias = sum(g2, {0});  // from the f32 gradient
    }
    if (quantizer) {
      if (inputs[0].active()) {  // dx (M, K) = dy (M, N) W (N, K): reduction along N
        Tensor a = detail::raw_contiguous(g2), b = detail::raw_contiguous(mT(weight.detach()));
        gx = quantized_product(*quantizer, GemmPass::InputGrad, a, GemmOperand::OutputGrad, b,
                               GemmOperand::Weight, Tensor());
        gx = reshape(gx, x_shape);
      }
      if (inputs[1].active()) {  // dW (N, K) = dy^T (N, M) x (M, K): reduction along M
        Tensor a = detail::raw_contiguous(mT(g2)), b = detail::raw_contiguous(mT(x2));
        gw = quantized_product(*quantizer, GemmPass::WeightGrad, a, GemmOperand::OutputGrad, b,
                               GemmOperand::Input, Tensor());
      }
      return {gx, gw, gbias};
    }
    if (mixed) g2 = lowered(g2);  // rounded once for both products (if not already above)
    const Tensor w = mixed ? lowered(weight) : weight.detach();                     // (N, K)
    if (inputs[0].active()) gx = reshape(product(g2, w, mixed, x_dtype), x_shape);  // (M, K)
    if (inputs[1].active()) {
      DeferredWeightGradients* later = DeferredWeightGradients::current();
      if (later && inputs[1].leaf) {  // dW made when the W pass comes (zero-bubble pipelines)
        later->add([leaf = Tensor(inputs[1].leaf), g2, x2 = x2, mixed = mixed] {
          accumulate_grad(leaf, product(mT(g2), x2, mixed));  // (N, K)
        });
      } else {
        gw = product(mT(g2), x2, mixed);  // (N, K)
      }
    }
    return {gx, gw, gbias};
  }
  void release() override { x2 = weight = pre = Tensor(); }
};

bool autocast_bf16(const Tensor& a, const Tensor& b) {
  return autocast_dtype() == DType::BF16 && a.dtype() == DType::F32 && b.dtype() == DType::F32;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const bool mixed = autocast_bf16(a, b);
  const Tensor ag = mixed ? lowered(a).detach() : a, bg = mixed ? lowered(b).detach() : b;
  Tensor out = computed_or_kept(
      [&] { return std::vector<Tensor>{gemm(ag, bg, Tensor(), "matmul", a.dtype())}; })[0];
  if (any_requires_grad({a, b})) {
    auto node = std::make_shared<MatmulBackward>();
    node->a = ag.detach();
    node->b = bg.detach();
    node->mixed = mixed;
    record(node, {a, b}, {out});
  }
  return out;
}

namespace {

// linear, and with gelu = true linear_gelu: the GELU applied to the GEMM's output (which the
// backward keeps as the GELU's input).
Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, bool gelu,
                   AutocastOutput output) {
  const char* op = gelu ? "linear_gelu" : "linear";
  detail::check_floating(op, x, "input");
  detail::check_floating(op, weight, "weight");
  LOOM_CHECK(weight.dim() == 2) << op << ": weight must be (out, in), got " << weight.shape();
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1))
      << op << ": input " << x.shape() << " does not match weight " << weight.shape()
      << " (expected last dim " << weight.size(1) << ")";
  if (bias.defined()) {
    detail::check_shape(op, bias, {weight.size(0)}, "bias");
  }
  Tensor x2;
  {
    NoGradGuard raw;                    // the graph edge is recorded once, below, against x itself
    x2 = reshape(x, {-1, x.size(-1)});  // (M, K), M = product of leading dims
  }
  // Under autocast x may be f32 or already bf16 (a Compute output).
  const bool autocast = autocast_dtype() == DType::BF16 && weight.dtype() == DType::F32 &&
                        (x.dtype() == DType::F32 || x.dtype() == DType::BF16);
  // A low-precision recipe quantises f32 operands itself, in place of autocast's bf16 copies:
  // inside the training step's bf16 region only, so evaluation in f32 sees the weights exact.
  std::shared_ptr<LinearQuantizer> quantizer = autocast ? current_linear_quantizer() : nullptr;
  LOOM_CHECK(!quantizer || x.dtype() == DType::F32)
      << op << ": a low-precision recipe quantises f32 inputs; this one is "
      << dtype_name(x.dtype()) << " " << x.shape() << " (a bf16 Compute output into a quantised "
      << "layer: a recipe covers whole blocks, so keep both layers in or out of it)";
  const bool mixed = autocast && !quantizer;
  if (mixed) x2 = lowered(x2);
  const DType out_dtype =
      !mixed ? x2.dtype() : (output == AutocastOutput::Compute ? DType::BF16 : DType::F32);
  const Tensor w = mixed ? lowered(weight).detach() : weight.detach();  // (N, K)
  Tensor out2 = computed_or_kept([&] {                                  // (M, N)
    const Tensor b_raw = bias.defined() ? detail::raw_contiguous(bias.detach()) : Tensor();
    if (quantizer)
      return std::vector<Tensor>{quantized_product(
          *quantizer, GemmPass::Forward, detail::raw_contiguous(x2), GemmOperand::Input,
          detail::raw_contiguous(w), GemmOperand::Weight, b_raw)};
    return std::vector<Tensor>{gemm(x2, mT(w), b_raw, op, out_dtype)};
  })[0];
  Tensor pre;
  if (gelu) {
    // Outside any selective checkpoint's keep list: recomputing it from the kept GEMM output
    // is cheap.
    pre = out2;
    out2 = empty_gemm_operand(pre.size(0), pre.size(1), pre.dtype(), pre.device());  // next layer's
    backend_of(pre).unary(UnaryOp::Gelu, 0.0, pre, out2);
  }
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  Tensor out = rows_as(out2, out_shape);  // (..., N)
  if (any_requires_grad({x, weight, bias})) {
    auto node = std::make_shared<LinearBackward>();
    node->x2 = x2.detach();
    node->x_dtype = x.dtype();
    node->weight = weight;
    node->pre = pre;
    node->mixed = mixed;
    node->quantizer = quantizer;
    node->x_shape = x.shape();
    node->has_bias = bias.defined();
    record(node, {x, weight, bias}, {out});
  }
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, AutocastOutput output) {
  return linear_impl(x, weight, bias, false, output);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_impl(x, weight, bias, true, AutocastOutput::Wide);
}

}  // namespace loom
