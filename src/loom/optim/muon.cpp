#include "loom/optim/muon.h"

#include <cmath>
#include <string>

#include "loom/ops/ops.h"

namespace loom::optim {

Tensor newton_schulz_orthogonalize(const Tensor& g, int steps) {
  LOOM_CHECK(g.dim() == 2 && g.dtype() == DType::F32)
      << "muon: orthogonalises 2-D f32 matrices, got " << g.shape() << " " << dtype_name(g.dtype());
  NoGradGuard no_grad;
  const bool tall = g.size(0) > g.size(1);
  Tensor x = tall ? contiguous(transpose(g, 0, 1)) : g;  // (r, c), r <= c
  const double norm = std::sqrt(sum_squares({x}));
  x = mul_scalar(x, 1.0 / (norm + 1e-7));
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  for (int i = 0; i < steps; ++i) {
    const Tensor A = matmul(x, transpose(x, 0, 1));                       // (r, r)
    const Tensor B = add(mul_scalar(A, b), mul_scalar(matmul(A, A), c));  // b A + c A^2
    x = add(mul_scalar(x, a), matmul(B, x));                              // a X + B X
  }
  return tall ? contiguous(transpose(x, 0, 1)) : x;
}

bool muon_updates(const std::string& name, const Shape& shape) {
  const std::string suffix = ".weight";
  return shape.size() == 2 && name.rfind("blocks.", 0) == 0 && name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace loom::optim
