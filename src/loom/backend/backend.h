// The kernel set every device backend implements. ops/ validates shapes and dtypes, allocates
// outputs, records autograd nodes, and then calls these kernels through backend_for(device);
// it never knows which device it runs on. A new device adds a Backend subclass under
// backend/<device>/ and a case in registry.cpp, and nothing in ops/ changes.
//
// Conventions for every kernel: outputs are allocated by the caller and contiguous unless
// said otherwise; floating kernels accept f32, bf16 (and f16 where noted) and compute in f32.
#pragma once
#include <array>
#include <cstdint>

#include "loom/backend/attention_band.h"
#include "loom/backend/block_scaling.h"
#include "loom/backend/rope_scaling.h"
#include "loom/backend/wire_quantize.h"
#include "loom/core/tensor.h"

namespace loom {

enum class UnaryOp : uint8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Gelu /* tanh approximation */,
  Silu,
  Pow /* x^alpha */,
  AddScalar /* x+alpha */,
  MulScalar /* x*alpha */,
  Relu,
};
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };
enum class ReduceOp : uint8_t { Sum, Max };
enum class RandomDist : uint8_t { Normal /* mean a, std b */, Uniform /* [a, b) */ };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // How many devices of this kind the machine has (processes beyond them share one).
  virtual int device_count() const { return 1; }

  // --- memory ---
  // dst = src elementwise; same shape, any strides, any dtypes (converting: RNE, saturating fp8).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // Fills `out` (contiguous) with the block starting at `start` of a tensor of `global_shape`
  // whose element at global row-major index i is value i of the Philox stream `key`.
  virtual void random(RandomDist dist, uint64_t key, const Shape& global_shape, const Shape& start,
                      float a, float b, const Tensor& out) = 0;

  // --- elementwise: inputs strided (broadcast by stride 0) to out's shape; same dtype ---
  virtual void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) = 0;
  // gx = gout * d op(x) / dx
  virtual void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& gout,
                              const Tensor& gx) = 0;
  // out may be the same tensor as a (in-place accumulate).
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // --- reductions over the last dim of a contiguous (rows, n) tensor ---
  // out: (rows). argmax (i64, rows) is written for Max when defined.
  virtual void reduce_rows(ReduceOp op, const Tensor& x, const Tensor& out,
                           const Tensor& argmax) = 0;
  // Sum over the middle dim of a contiguous (outer, n, inner) tensor into (outer, inner):
  // reduces leading or middle dims (a bias gradient, a broadcast gate's gradient) in place,
  // without first transposing them to the end.
  virtual void sum_middle(const Tensor& x, const Tensor& out) = 0;

  // --- GEMM: out(b) = a(b) @ b(b) (+ bias) for 3-D (batch, rows, cols) operands ---
  // a, b may have any strides (a transpose is a stride swap) and batch 1 broadcasts
  // (stride 0). bias (N) is optional (undefined tensor). Same dtype for a and b; out f32 or
  // that dtype; accumulation in f32.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) = 0;
  // The row stride (elements) a (rows, cols) matrix should be allocated with when it will be a
  // GEMM operand: cols, or more where the GEMM would otherwise copy it to a padded layout.
  virtual int64_t gemm_operand_row_stride(int64_t rows, int64_t cols, DType dtype) { return cols; }

  // --- fp8 with one scale per tensor (train.precision fp8_tensorwise and fp8_delayed) ---
  // x (rows, cols) f32 contiguous -> out (at least rows, at least cols) F8E4M3 or F8E5M2,
  // contiguous, zeros beyond x: the codes of x * s (fp8_scaling.h: clamped to the largest value,
  // rounded to nearest even), s mapping amax to the largest value. amax >= 0 is given (delayed
  // scaling's history); < 0 takes x's own largest finite magnitude. A non-finite x makes every
  // code NaN. inv_scale (1) f32 gets 1 / s: what the GEMM multiplies back. stats (3) i64
  // accumulates, over calls, the largest measured amax (as the bits of the f32, f32_bits), the
  // values that saturated and the non-zero values that became zero.
  virtual void fp8_quantize(const Tensor& x, float amax, const Tensor& out, const Tensor& inv_scale,
                            const Tensor& stats) = 0;
  // out (M, N) f32 = (a a_inv_scale) (b b_inv_scale)^T (+ bias (N) f32 when defined), with f32
  // accumulation: a (M, K) and b (N, K) contiguous fp8 (not both E5M2), K and N multiples of
  // 16 (the shapes of fp8 tensor cores; fp8_quantize pads with zeros), the scales (1) f32.
  virtual void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                          const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) = 0;

  // --- block-scaled quantisation (fp8_blockwise, MXFP8, NVFP4), emulated ---
  // x (rows, cols) f32 contiguous -> out (rows, cols) f32: each value quantised to the spec's
  // element format under its group's scale and dequantised (block_scaling.h), what a tensor
  // core of that format would multiply. A group holding a NaN or an infinity becomes NaN.
  // stats (3) i64 accumulates as fp8_quantize's: the largest finite magnitude of x (f32 bits),
  // the values that saturated, the non-zero values that became zero.
  virtual void block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                              const Tensor& stats) = 0;
  // x (rows, cols) f32 contiguous -> out (rows, cols rounded up to 16) f32: each run of 16
  // values of a row (x padded with zeros) times diag(signs) H / 4, H the 16 x 16
  // Sylvester-Hadamard matrix, by the butterflies of the fast transform in their order.
  virtual void hadamard16(const Tensor& x, const std::array<float, 16>& signs,
                          const Tensor& out) = 0;

  // --- block quantisation for the wire (DiLoCo's int8 / int4 pseudo-gradients) ---
  // x (n) f32 contiguous -> out (wire_bytes(q, n)) u8 contiguous: each block of q.block values
  // its scale then its codes (backend/wire_quantize.h); wire_decode is the way back.
  virtual void wire_encode(const Tensor& x, const WireQuant& q, const Tensor& out) = 0;
  virtual void wire_decode(const Tensor& in, const WireQuant& q, const Tensor& out) = 0;

  // --- normalisation over the last dim of contiguous (rows, C) ---
  virtual void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  float eps, const Tensor& y, const Tensor& mean,
                                  const Tensor& rstd) = 0;
  // gweight/gbias are overwritten (not accumulated); weight/bias/gweight/gbias may be undefined.
  virtual void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                   const Tensor& gweight, const Tensor& gbias) = 0;
  virtual void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, const Tensor& y,
                                const Tensor& rstd) = 0;
  virtual void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& gy, const Tensor& gx, const Tensor& gweight) = 0;

  // --- softmax over the last dim of contiguous (rows, n); log=true gives log_softmax ---
  virtual void softmax_forward(const Tensor& x, bool log, const Tensor& y) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& gy, bool log, const Tensor& gx) = 0;

  // --- cross entropy of contiguous logits (N, V) against i64 targets (N) ---
  // loss (N) f32 = lse - logit[target] (0 where target == ignore_index); lse (N) f32 saved.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                     int64_t ignore_index, const Tensor& loss,
                                     const Tensor& lse) = 0;
  // glogits = gloss[n] * (softmax - onehot) per row; rows with ignore_index get 0.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      int64_t ignore_index, const Tensor& lse, const Tensor& gloss,
                                      const Tensor& glogits) = 0;

  // --- indexing on contiguous tensors; every index is range-checked (throws loom::Error) ---
  // out = x.index_select(dim, index), index i64 1-D.
  virtual void index_select(const Tensor& x, int64_t dim, const Tensor& index,
                            const Tensor& out) = 0;
  // out.index_add_(dim, index, src): out[.., index[i], ..] += src[.., i, ..]
  virtual void index_add(const Tensor& out, int64_t dim, const Tensor& index,
                         const Tensor& src) = 0;
  // out[i][j][k] = x[i][index[i][j][k]][k] (for dim 1), index i64 with out's shape.
  virtual void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // out[i][index[i][j][k]][k] += src[i][j][k] (for dim 1), index i64 with src's shape.
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                           const Tensor& src) = 0;

  // --- fused transformer pieces (contiguous) ---
  // Rotary embedding on x (B, H, T, D), rotate-half pairing (i, i + D/2), angle
  // positions[t] * rope_frequency(theta, scaling, i, D) (rope_scaling.h: theta^(-2i/D) unless
  // scaled). inverse=true rotates by the negative angle (the backward).
  virtual void rope(const Tensor& x, const Tensor& positions, double theta,
                    const RopeScaling& scaling, bool inverse, const Tensor& out) = 0;
  // out = x * (1 + scale) + shift; x (B, T, C), shift/scale (B, C).
  virtual void modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                const Tensor& out) = 0;
  virtual void modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& gout,
                                 const Tensor& gx, const Tensor& gshift, const Tensor& gscale) = 0;
  // The backward of gelu(x W^T + b) with the bias added by the GEMM: over pre (rows, n) =
  // x W^T + b, gpre = gout * gelu'(pre) and, when gbias is defined, gbias (n) = the column sums
  // of gpre (f64 partials over fixed chunks of rows: deterministic), in one pass. pre, gout and
  // gpre may have any row stride (rows contiguous); gbias is contiguous. gpre may be bf16 for
  // f32 pre and gout (autocast's operand of the next GEMMs): then gbias sums the f32 values
  // before their rounding.
  virtual void gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                                  const Tensor& gbias) = 0;
  // A linear layer's output gradient under autocast, in one pass: out (rows, n) bf16 = x (rows,
  // n) f32 rounded (the operand of both gradient products), and sums (n) f32 = the column sums
  // of x before the rounding (the bias gradient; f64 partials over fixed chunks of rows, like
  // gelu_bias_backward's). A gradient that already is the bf16 operand (x bf16, out undefined)
  // gets its sums alone. x and out may have any row stride (rows contiguous).
  virtual void cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) = 0;
  // LayerNorm without affine parameters fused with modulate (DiT's adaLN): y = (x - mean) *
  // rstd * (1 + scale) + shift; x (B, T, C), shift/scale (B, C); mean/rstd (B * T) f32.
  virtual void layer_norm_modulate_forward(const Tensor& x, const Tensor& shift,
                                           const Tensor& scale, float eps, const Tensor& y,
                                           const Tensor& mean, const Tensor& rstd) = 0;
  virtual void layer_norm_modulate_backward(const Tensor& x, const Tensor& scale,
                                            const Tensor& mean, const Tensor& rstd,
                                            const Tensor& gy, const Tensor& gx,
                                            const Tensor& gshift, const Tensor& gscale) = 0;
  // DiT's gated residual: out = x + gate * h; x/h (B, T, C), gate (B, C) broadcast over T.
  virtual void gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& h,
                                      const Tensor& out) = 0;
  // gh = gout * gate and ggate (B, C) = the sum over T of gout * h, in one pass.
  virtual void gated_residual_backward(const Tensor& h, const Tensor& gate, const Tensor& gout,
                                       const Tensor& gh, const Tensor& ggate) = 0;
  // out = silu(gate) * up, same shapes.
  virtual void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gout,
                               const Tensor& ggate, const Tensor& gup) = 0;

  // --- optimizer updates, in place on contiguous f32 tensors of one shape ---
  // AdamW (decoupled weight decay), bias-corrected with the 1-based step count, on the gradient
  // times grad_scale (gradient clipping folded into the update: no separate pass over the
  // gradients; 1 multiplies by nothing).
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                          const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                          double eps, double weight_decay, int64_t step, double grad_scale) = 0;
  // y = a * y + b * x (EMA of weights, interpolation).
  virtual void axpby(const Tensor& y, const Tensor& x, double a, double b) = 0;
  // sum of x_i^2 over a contiguous f32 tensor, in one pass without a temporary (gradient norms);
  // partial sums in f32 over runs of 1024, added in f64 in a fixed order (deterministic).
  virtual double sum_squares(const Tensor& x) = 0;

  // --- fused scaled-dot-product attention (flash-style: no S x S matrix is materialised) ---
  // q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D) with Hq % Hkv == 0 (GQA); mask, if defined, is an
  // additive f32 tensor broadcast to (B, Hq, Sq, Skv) through strides (stride 0 = broadcast).
  // band: the keys each query sees (causal, sliding window; attention_band.h); the kernels
  // skip the keys outside it. out (B, Hq, Sq, D), lse (B, Hq, Sq) f32.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& mask, float scale, const AttentionBand& band,
                                 const Tensor& out, const Tensor& lse) = 0;
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, float scale, const AttentionBand& band,
                                  const Tensor& out, const Tensor& lse, const Tensor& gout,
                                  const Tensor& gq, const Tensor& gk, const Tensor& gv) = 0;

  // --- Mamba-2's state-space scan (nn/ssd.h's recurrence), step by step per (batch, head) ---
  // S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t. Contiguous f32: x (B, T, H, P),
  // dt (B, T, H), A (H), Bm and Cm (B, T, G, N) (head h reads group h / (H / G)), state
  // (B, H, P, N): the initial state in, the final one out. y (B, T, H, P). checkpoints
  // (B, H, ceil(T / every), P, N): the state entering every every-th step, for the backward.
  virtual void ssm_scan_forward(const Tensor& x, const Tensor& dt, const Tensor& A,
                                const Tensor& Bm, const Tensor& Cm, const Tensor& state,
                                const Tensor& y, const Tensor& checkpoints, int64_t every) = 0;
  // The gradients, each chunk of `every` steps recomputed from its checkpoint: dy (B, T, H, P);
  // dstate the final state's gradient in (zeros if it has none), the initial state's out; dx
  // (B, T, H, P), ddt (B, T, H), and per head (the caller sums them): dA (B, H), dB and dC
  // (B, T, H, N).
  virtual void ssm_scan_backward(const Tensor& x, const Tensor& dt, const Tensor& A,
                                 const Tensor& Bm, const Tensor& Cm, const Tensor& checkpoints,
                                 int64_t every, const Tensor& dy, const Tensor& dstate,
                                 const Tensor& dx, const Tensor& ddt, const Tensor& dA,
                                 const Tensor& dB, const Tensor& dC) = 0;
};

// The backend for a device; throws loom::Error naming the device if Loom was built without it.
Backend& backend_for(Device device);

// Puts `backend` in place of the built-in backend of a device type (nullptr restores it): how
// the CUDA kernels compiled for the host (backend/cuda/emulate.h) run through every op in a
// test on a machine without a GPU.
void register_backend(DeviceType type, Backend* backend);

// Whether f32 GEMMs may round their operands to TF32 (10 mantissa bits) and run on tensor
// cores, where a backend has them (CUDA; train.tf32). Off by default: f32 means f32, as in
// PyTorch. Read when a GEMM runs, so set it before the first one.
void set_allow_tf32(bool allow);
bool allow_tf32();

Backend& cpu_backend();   // backend/cpu/cpu_backend.cpp
Backend& cuda_backend();  // backend/cuda/ (or the no_cuda.cpp twin that throws)

}  // namespace loom
