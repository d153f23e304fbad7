// The seam through which a low-precision recipe (precision/recipe.h) sees the three GEMMs of a
// linear layer: ops/ calls it, precision/ implements it (ops/ does not include precision/).
// A recipe's wrapper sets the quantizer around a layer's forward (LinearQuantizerScope); the
// linear op keeps it in its backward node, so the gradient products use it as well.
#pragma once
#include <cstdint>
#include <memory>

#include "loom/core/tensor.h"

namespace loom {

// The products of y = x W^T: forward, input gradient dx = dy W, weight gradient dW = dy^T x.
enum class GemmPass : uint8_t { Forward, InputGrad, WeightGrad };
// The layer's input, its weight, or the gradient arriving at its output.
enum class GemmOperand : uint8_t { Input, Weight, OutputGrad };

class LinearQuantizer {
 public:
  virtual ~LinearQuantizer() = default;
  // The two operands of one product, each f32 (rows, K) row-major with the reduction K along
  // the rows, replaced by what the low-precision GEMM multiplies (dequantised f32). They may be
  // changed together (both rotated along K, both padded with zeros) as long as a b^T is kept.
  virtual void quantize(GemmPass pass, Tensor& a, GemmOperand a_role, Tensor& b,
                        GemmOperand b_role) = 0;
  // The whole product a b^T (+ bias (rows of b) f32), (rows of a, rows of b) f32, run in the
  // low-precision format itself where the operands' device has it (fp8 tensor cores).
  // Undefined where it does not: then quantize() and an f32 GEMM emulate the product.
  virtual Tensor gemm(GemmPass pass, const Tensor& a, GemmOperand a_role, const Tensor& b,
                      GemmOperand b_role, const Tensor& bias) = 0;
};

// The quantizer of the linear layer running now (null: none).
std::shared_ptr<LinearQuantizer> current_linear_quantizer();

class LinearQuantizerScope {
 public:
  explicit LinearQuantizerScope(std::shared_ptr<LinearQuantizer> quantizer);
  ~LinearQuantizerScope();
  LinearQuantizerScope(const LinearQuantizerScope&) = delete;
  LinearQuantizerScope& operator=(const LinearQuantizerScope&) = delete;

 private:
  std::shared_ptr<LinearQuantizer> saved_;
};

}  // namespace loom
