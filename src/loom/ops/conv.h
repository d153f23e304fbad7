// 2-D convolution (differentiable) on channels-last images: stride 1, zero padding that keeps
// the size ("same"), odd kernel size k.
#pragma once
#include "loom/core/tensor.h"

namespace loom {

// x (B, H, W, C), weight (Cout, k * k * C) with each filter laid out (ky, kx, c), bias (Cout)
// or undefined -> (B, H, W, Cout).
// Built from differentiable ops, so its backward is theirs: an im2col gather (index_select
// over the flattened pixels plus one zero pixel that stands for the padding; its backward
// scatter-adds) followed by a linear layer over the gathered patches.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t k);

}  // namespace loom
