// A Backend that times every kernel call as a trace event ("op" category) and passes it on.
// backend_for() hands it out only while a profile window records, so a step without the
// profiler never pays for it. Each method is the same two lines: a Scope and the call.
#include "loom/backend/traced_backend.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "loom/core/trace.h"

namespace loom {
namespace {

// GEMM geometry and FLOPs of a (batch, M, K) @ (batch, K, N) call.
std::string gemm_args(const Tensor& a, const Tensor& b) {
  const int64_t batch = std::max(a.size(0), b.size(0)), m = a.size(1), k = a.size(2), n = b.size(2);
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "\"batch\": %lld, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"flop\": %.0f",
                (long long)batch, (long long)m, (long long)n, (long long)k,
                2.0 * double(batch) * double(m) * double(n) * double(k));
  return buf;
}

class TracedBackend final : public Backend {
 public:
  explicit TracedBackend(Backend& inner) : inner_(inner) {}
  const char* name() const override { return inner_.name(); }

  void copy(const Tensor& src, const Tensor& dst) override {
    trace::Scope s("copy", "op");
    inner_.copy(src, dst);
  }
  void fill(const Tensor& dst, double value) override {
    trace::Scope s("fill", "op");
    inner_.fill(dst, value);
  }
  void random(RandomDist dist, uint64_t key, const Shape& global_shape, const Shape& start, float a,
              float b, const Tensor& out) override {
    trace::Scope s("random", "op");
    inner_.random(dist, key, global_shape, start, a, b, out);
  }
  void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) override {
    trace::Scope s("unary", "op");
    inner_.unary(op, alpha, x, out);
  }
  void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& gout,
                      const Tensor& gx) override {
    trace::Scope s("unary_backward", "op");
    inner_.unary_backward(op, alpha, x, gout, gx);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    trace::Scope s("binary", "op");
    inner_.binary(op, a, b, out);
  }
  void reduce_rows(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& argmax) override {
    trace::Scope s("reduce_rows", "op");
    inner_.reduce_rows(op, x, out, argmax);
  }
  void sum_middle(const Tensor& x, const Tensor& out) override {
    trace::Scope s("sum_middle", "op");
    inner_.sum_middle(x, out);
  }
  int64_t gemm_operand_row_stride(int64_t rows, int64_t cols, DType dtype) override {
    return inner_.gemm_operand_row_stride(rows, cols, dtype);
  }
  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) override {
    trace::Scope s("matmul", "op");
    if (s.active()) s.set_args(gemm_args(a, b));
    inner_.matmul(a, b, bias, out);
  }
  void fp8_quantize(const Tensor& x, float amax, const Tensor& out, const Tensor& inv_scale,
                    const Tensor& stats) override {
    trace::Scope s("fp8_quantize", "op");
    inner_.fp8_quantize(x, amax, out, inv_scale, stats);
  }
  void fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                  const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) override {
    trace::Scope s("fp8_matmul", "op");
    inner_.fp8_matmul(a, a_inv_scale, b, b_inv_scale, bias, out);
  }
  void block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                      const Tensor& stats) override {
    trace::Scope s("block_quantize", "op");
    inner_.block_quantize(x, spec, out, stats);
  }
  void hadamard16(const Tensor& x, const std::array<float, 16>& signs, const Tensor& out) override {
    trace::Scope s("hadamard16", "op");
    inner_.hadamard16(x, signs, out);
  }
  void wire_encode(const Tensor& x, const WireQuant& q, const Tensor& out) override {
    trace::Scope s("wire_encode", "op");
    inner_.wire_encode(x, q, out);
  }
  void wire_decode(const Tensor& in, const WireQuant& q, const Tensor& out) override {
    trace::Scope s("wire_decode", "op");
    inner_.wire_decode(in, q, out);
  }
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd) override {
    trace::Scope s("layer_norm_forward", "op");
    inner_.layer_norm_forward(x, weight, bias, eps, y, mean, rstd);
  }
  void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                           const Tensor& gweight, const Tensor& gbias) override {
    trace::Scope s("layer_norm_backward", "op");
    inner_.layer_norm_backward(x, weight, mean, rstd, gy, gx, gweight, gbias);
  }
  void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, const Tensor& y,
                        const Tensor& rstd) override {
    trace::Scope s("rms_norm_forward", "op");
    inner_.rms_norm_forward(x, weight, eps, y, rstd);
  }
  void rms_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                         const Tensor& gy, const Tensor& gx, const Tensor& gweight) override {
    trace::Scope s("rms_norm_backward", "op");
    inner_.rms_norm_backward(x, weight, rstd, gy, gx, gweight);
  }
  void softmax_forward(const Tensor& x, bool log, const Tensor& y) override {
    trace::Scope s("softmax_forward", "op");
    inner_.softmax_forward(x, log, y);
  }
  void softmax_backward(const Tensor& y, const Tensor& gy, bool log, const Tensor& gx) override {
    trace::Scope s("softmax_backward", "op");
    inner_.softmax_backward(y, gy, log, gx);
  }
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& loss, const Tensor& lse) override {
    trace::Scope s("cross_entropy_forward", "op");
    inner_.cross_entropy_forward(logits, targets, ignore_index, loss, lse);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                              const Tensor& lse, const Tensor& gloss,
                              const Tensor& glogits) override {
    trace::Scope s("cross_entropy_backward", "op");
    inner_.cross_entropy_backward(logits, targets, ignore_index, lse, gloss, glogits);
  }
  void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override {
    trace::Scope s("index_select", "op");
    inner_.index_select(x, dim, index, out);
  }
  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    trace::Scope s("index_add", "op");
    inner_.index_add(out, dim, index, src);
  }
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override {
    trace::Scope s("gather", "op");
    inner_.gather(x, dim, index, out);
  }
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                   const Tensor& src) override {
    trace::Scope s("scatter_add", "op");
    inner_.scatter_add(out, dim, index, src);
  }
  void rope(const Tensor& x, const Tensor& positions, double theta, const RopeScaling& scaling,
            bool inverse, const Tensor& out) override {
    trace::Scope s("rope", "op");
    inner_.rope(x, positions, theta, scaling, inverse, out);
  }
  void modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                        const Tensor& out) override {
    trace::Scope s("modulate_forward", "op");
    inner_.modulate_forward(x, shift, scale, out);
  }
  void modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& gout, const Tensor& gx,
                         const Tensor& gshift, const Tensor& gscale) override {
    trace::Scope s("modulate_backward", "op");
    inner_.modulate_backward(x, scale, gout, gx, gshift, gscale);
  }
  void gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                          const Tensor& gbias) override {
    trace::Scope s("gelu_bias_backward", "op");
    inner_.gelu_bias_backward(pre, gout, gpre, gbias);
  }
  void cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) override {
    trace::Scope s("cast_with_column_sums", "op");
    inner_.cast_with_column_sums(x, out, sums);
  }
  void layer_norm_modulate_forward(const Tensor& x, const Tensor& shift, const Tensor& scale,
                                   float eps, const Tensor& y, const Tensor& mean,
                                   const Tensor& rstd) override {
    trace::Scope s("layer_norm_modulate_forward", "op");
    inner_.layer_norm_modulate_forward(x, shift, scale, eps, y, mean, rstd);
  }
  void layer_norm_modulate_backward(const Tensor& x, const Tensor& scale, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                    const Tensor& gshift, const Tensor& gscale) override {
    trace::Scope s("layer_norm_modulate_backward", "op");
    inner_.layer_norm_modulate_backward(x, scale, mean, rstd, gy, gx, gshift, gscale);
  }
  void gated_residual_forward(const Tensor& x, const Tensor& gate, const Tensor& h,
                              const Tensor& out) override {
    trace::Scope s("gated_residual_forward", "op");
    inner_.gated_residual_forward(x, gate, h, out);
  }
  void gated_residual_backward(const Tensor& h, const Tensor& gate, const Tensor& gout,
                               const Tensor& gh, const Tensor& ggate) override {
    trace::Scope s("gated_residual_backward", "op");
    inner_.gated_residual_backward(h, gate, gout, gh, ggate);
  }
  void swiglu_forward(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    trace::Scope s("swiglu_forward", "op");
    inner_.swiglu_forward(gate, up, out);
  }
  void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gout,
                       const Tensor& ggate, const Tensor& gup) override {
    trace::Scope s("swiglu_backward", "op");
    inner_.swiglu_backward(gate, up, gout, ggate, gup);
  }
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, double lr, double beta1, double beta2, double eps,
                  double weight_decay, int64_t step, double grad_scale) override {
    trace::Scope s("adamw_step", "op");
    inner_.adamw_step(param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step,
                      grad_scale);
  }
  void axpby(const Tensor& y, const Tensor& x, double a, double b) override {
    trace::Scope s("axpby", "op");
    inner_.axpby(y, x, a, b);
  }
  double sum_squares(const Tensor& x) override {
    trace::Scope s("sum_squares", "op");
    return inner_.sum_squares(x);
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         float scale, const AttentionBand& band, const Tensor& out,
                         const Tensor& lse) override {
    trace::Scope s("attention_forward", "op");
    inner_.attention_forward(q, k, v, mask, scale, band, out, lse);
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          float scale, const AttentionBand& band, const Tensor& out,
                          const Tensor& lse, const Tensor& gout, const Tensor& gq, const Tensor& gk,
                          const Tensor& gv) override {
    trace::Scope s("attention_backward", "op");
    inner_.attention_backward(q, k, v, mask, scale, band, out, lse, gout, gq, gk, gv);
  }
  void ssm_scan_forward(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                        const Tensor& Cm, const Tensor& state, const Tensor& y,
                        const Tensor& checkpoints, int64_t every) override {
    trace::Scope s("ssm_scan_forward", "op");
    inner_.ssm_scan_forward(x, dt, A, Bm, Cm, state, y, checkpoints, every);
  }
  void ssm_scan_backward(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                         const Tensor& Cm, const Tensor& checkpoints, int64_t every,
                         const Tensor& dy, const Tensor& dstate, const Tensor& dx,
                         const Tensor& ddt, const Tensor& dA, const Tensor& dB,
                         const Tensor& dC) override {
    trace::Scope s("ssm_scan_backward", "op");
    inner_.ssm_scan_backward(x, dt, A, Bm, Cm, checkpoints, every, dy, dstate, dx, ddt, dA, dB, dC);
  }

 private:
  Backend& inner_;
};

}  // namespace

Backend& traced(Backend& inner) {
  if (&inner == &cpu_backend()) {
    static TracedBackend cpu(inner);
    return cpu;
  }
  return inner;  // the CUDA backend gets its twin when it arrives
}

}  // namespace loom
