#include "loom/ops/conv.h"

#include "loom/ops/ops.h"

namespace loom {

namespace {

// For each output pixel (y, x) and kernel offset (dy, dx): the flat index of the input pixel
// it reads, or H * W (the zero pixel) where that falls outside the image.
Tensor im2col_index(int64_t H, int64_t W, int64_t k, Device device) {
  const int64_t r = k / 2;
  std::vector<int64_t> idx;
  idx.reserve(size_t(H * W * k * k));
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int64_t dy = -r; dy <= r; ++dy)
        for (int64_t dx = -r; dx <= r; ++dx) {
          const int64_t yy = y + dy, xx = x + dx;
          idx.push_back(yy >= 0 && yy < H && xx >= 0 && xx < W ? yy * W + xx : H * W);
        }
  return from_vector(idx, {int64_t(idx.size())}, DType::I64, device);  // (H W k k)
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t k) {
  LOOM_CHECK(k > 0 && k % 2 == 1) << "conv2d: kernel size " << k << " (expected odd and positive)";
  LOOM_CHECK(x.dim() == 4) << "conv2d: x must be (B, H, W, C), got " << x.shape();
  const int64_t B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  LOOM_CHECK(weight.dim() == 2 && weight.size(1) == k * k * C)
      << "conv2d: weight must be (Cout, " << k * k * C << ") for kernel " << k << " over " << C
      << " channels, got " << weight.shape();
  Tensor pixels = reshape(x, {B, H * W, C});
  Tensor padded = cat({pixels, zeros({B, 1, C}, x.dtype(), x.device())}, 1);  // (B, H W + 1, C)
  Tensor cols = index_select(padded, 1, im2col_index(H, W, k, x.device()));   // (B, H W k k, C)
  return linear(reshape(cols, {B, H, W, k * k * C}), weight, bias);           // (B, H, W, Cout)
}

}  // namespace loom
