// The CPU backend: each kernel family is defined in its own file in this directory.
#pragma once
#include "loom/backend/backend.h"

namespace loom {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void random(RandomDist dist, uint64_t key, const Shape& global_shape, const Shape& start, float a,
              float b, const Tensor& out) override;
  void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) override;
  void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& gout,
                      const Tensor& gx) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce_rows(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& argmax) override;
  void sum_middle(const Tensor& x, const Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) override;
  int64_t gemm_operand_row_stride(int64_t rows, int64_t cols, DType dtype) override;
  void fp8_quantize(const Tensor& x, float amax, const Tensor& out, const Tensor& inv_scale,
                    const Tensor& stats) override;
  void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                  const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) override;
  void block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                      const Tensor& stats) override;
  void hadamard16(const Tensor& x, const std::array<float, 16>& signs, const Tensor& out) override;
  void wire_encode(const Tensor& x, const WireQuant& q, const Tensor& out) override;
  void wire_decode(const Tensor& in, const WireQuant& q, const Tensor& out) override;
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                           const Tensor& gweight, const Tensor& gbias) override;
  void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, const Tensor& y,
                        const Tensor& rstd) override;
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& gy, const Tensor& gx, const Tensor& gweight) override;
  void softmax_forward(const Tensor& x, bool log, const Tensor& y) override;
  void softmax_backward(const Tensor& y, const Tensor& gy, bool log, const Tensor& gx) override;
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& loss, const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                              const Tensor& lse, const Tensor& gloss,
                              const Tensor& glogits) override;
  void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;
  void rope(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling,
            bool inverse, const Tensor& out) override;
  void modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                        const Tensor& out) override;
  void modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& gout, const Tensor& gx,
                         const Tensor& gshift, const Tensor& gscale) override;
  void gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                          const Tensor& gbias) override;
  void cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) override;
  void layer_norm_modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                   float eps, const Tensor& y, const Tensor& mean,
                                   const Tensor& rstd) override;
  void layer_norm_modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                    const Tensor& gshift, const Tensor& gscale) override;
  void gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& h,
                              const Tensor& out) override;
  void gated_residual_backward(const Tensor& h, const Tensor& gate, const Tensor& gout,
                               const Tensor& gh, const Tensor& ggate) override;
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gout,
                       const Tensor& ggate, const Tensor& gup) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, double grad_scale) override;
  void axpby(const Tensor& y, const Tensor& x, double a, double b) override;
  double sum_squares(const Tensor& x) override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         float scale, const AttentionBand& band, const Tensor& out,
                         const Tensor& lse) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          float scale, const AttentionBand& band, const Tensor& out,
                          const Tensor& lse, const Tensor& gout, const Tensor& gq, const Tensor& gk,
                          const Tensor& gv) override;
  void ssm_scan_forward(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                        const Tensor& Cm, const Tensor& state, const Tensor& y,
                        const Tensor& checkpoints, int64_t every) override;
  void ssm_scan_backward(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                         const Tensor& Cm, const Tensor& checkpoints, int64_t every,
                         const Tensor& dy, const Tensor& dstate, const Tensor& dx,
                         const Tensor& ddt, const Tensor& dA, const Tensor& dB,
                         const Tensor& dC) override;
};

}  // namespace loom
