// Creating tensors, moving data in and out, casting, and layout-invariant random fills.
#pragma once
#include <vector>

#include "loom/core/rng.h"
#include "loom/core/tensor.h"

namespace loom {

Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = cpu_device());
Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = cpu_device());
Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
            Device device = cpu_device());
Tensor zeros_like(const Tensor& t);
Tensor arange(int64_t n, DType dtype = DType::I64, Device device = cpu_device());  // 0..n-1

// Copies host values into a new tensor of `dtype` (converting from f32 / i64 as needed).
Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::F32,
                   Device device = cpu_device());
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::I64,
                   Device device = cpu_device());
// All elements in logical row-major order, converted to f32 (or f64 / i64).
std::vector<float> to_vector(const Tensor& t);
std::vector<double> to_vector_f64(const Tensor& t);
std::vector<int64_t> to_vector_i64(const Tensor& t);
float item(const Tensor& t);  // the value of a one-element tensor
// t's values on `device` (t itself when it is there already); not recorded by autograd.
Tensor to_device(const Tensor& t, Device device);

// Differentiable dtype conversion (gradients are converted back).
Tensor to_dtype(const Tensor& t, DType dtype);
// Copies src into dst (same shape) in place, converting dtype; not recorded by autograd.
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);

// Layout-invariant random fills (see core/rng.h). Element i of the logical row-major order of
// t gets stream value (global_offset + i): filling rows [r0, r1) of a (N, C) tensor with
// global_offset = r0 * C reproduces those rows of the full fill exactly.
void fill_normal(const Tensor& t, const RngKey& key, int64_t global_offset = 0, float mean = 0.0f,
                 float std = 1.0f);
void fill_uniform(const Tensor& t, const RngKey& key, int64_t global_offset = 0, float low = 0.0f,
                  float high = 1.0f);
// The same for any N-D block: t is the block starting at `start` of a tensor of global_shape
// (a column shard of a tensor-parallel weight, say).
void fill_normal_block(const Tensor& t, const RngKey& key, const Shape& global_shape,
                       const Shape& start, float mean = 0.0f, float std = 1.0f);
Tensor randn(const Shape& shape, const RngKey& key, DType dtype = DType::F32,
             Device device = cpu_device());

}  // namespace loom
