// Block quantisation for the wire (backend.h: wire_encode, wire_decode) on the device: a thread
// per block of values, each running the rules the host runs (backend/wire_quantize.h), so a
// device's codes are the host's byte for byte.
#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/kernel_checks.h"
#include "loom/backend/wire_quantize.h"

namespace loom::LOOM_CUDA_NS {

namespace {

__global__ void wire_encode_kernel(const float* x, int64_t n, WireQuant q, int64_t stride,
                                   uint8_t* out) {
  LOOM_GRID_STRIDE(b, (n + q.block - 1) / q.block) {
    const int64_t b0 = b * q.block;
    wire_encode_block(q, x + b0, n - b0 < q.block ? n - b0 : q.block, out + b * stride);
  }
}

__global__ void wire_decode_kernel(const uint8_t* in, int64_t n, WireQuant q, int64_t stride,
                                   float* out) {
  LOOM_GRID_STRIDE(b, (n + q.block - 1) / q.block) {
    const int64_t b0 = b * q.block;
    wire_decode_block(q, in + b * stride, n - b0 < q.block ? n - b0 : q.block, out + b0);
  }
}

}  // namespace

void CudaBackend::wire_encode(const Tensor& x, const WireQuant& q, const Tensor& out) {
  check_wire("wire_encode", x, q, out);
  const int64_t n = x.numel(), blocks = (n + q.block - 1) / q.block;
  if (n == 0) return;
  LOOM_LAUNCH(wire_encode_kernel, blocks_for(blocks), kBlock, ptr<const float>(x), n, q,
              wire_bytes(q, q.block), ptr<uint8_t>(out));
}

void CudaBackend::wire_decode(const Tensor& in, const WireQuant& q, const Tensor& out) {
  check_wire("wire_decode", out, q, in);
  const int64_t n = out.numel(), blocks = (n + q.block - 1) / q.block;
  if (n == 0) return;
  LOOM_LAUNCH(wire_decode_kernel, blocks_for(blocks), kBlock, ptr<const uint8_t>(in), n, q,
              wire_bytes(q, q.block), ptr<float>(out));
}

}  // namespace loom::LOOM_CUDA_NS
