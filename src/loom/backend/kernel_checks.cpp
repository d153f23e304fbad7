#include "loom/backend/kernel_checks.h"

namespace loom {

void check_same_layout(const char* kernel, const Tensor& a, const Tensor& out) {
  LOOM_CHECK(a.shape() == out.shape() && a.dtype() == out.dtype())
      << kernel << ": operand " << dtype_name(a.dtype()) << " " << a.shape() << " vs output "
      << dtype_name(out.dtype()) << " " << out.shape();
}

void check_f32_like(const char* kernel, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(a.dtype() == DType::F32 && b.dtype() == DType::F32 && a.is_contiguous() &&
             b.is_contiguous() && a.numel() == b.numel())
      << kernel << ": expected contiguous f32 tensors of one size, got " << dtype_name(a.dtype())
      << " " << a.shape() << " and " << dtype_name(b.dtype()) << " " << b.shape();
}

void check_reduce_rows(const Tensor& x, const Tensor& out) {
  LOOM_CHECK(x.dim() == 2 && x.is_contiguous())
      << "reduce_rows: expected contiguous (rows, n), got " << x.shape();
  LOOM_CHECK(out.numel() == x.size(0) && out.dtype() == x.dtype())
      << "reduce_rows: output " << out.shape() << " for input " << x.shape();
}

namespace {
// A (rows, n) matrix whose rows are contiguous and do not overlap.
bool has_contiguous_rows(const Tensor& t) {
  return t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1) && t.stride(0) >= t.size(1);
}
}  // namespace

void check_gelu_bias_backward(const Tensor& pre, const Tensor& gout, const Tensor& gpre,
                              const Tensor& gbias) {
  check_same_layout("gelu_bias_backward", pre, gout);
  LOOM_CHECK(
      gpre.shape() == pre.shape() &&
      (gpre.dtype() == pre.dtype() || (gpre.dtype() == DType::BF16 && pre.dtype() == DType::F32)))
      << "gelu_bias_backward: gpre " << dtype_name(gpre.dtype()) << " " << gpre.shape()
      << " for pre " << dtype_name(pre.dtype()) << " " << pre.shape()
      << " (pre's dtype, or bf16 from f32)";
  LOOM_CHECK(has_contiguous_rows(pre) && has_contiguous_rows(gout) && has_contiguous_rows(gpre))
      << "gelu_bias_backward: expected (rows, n) tensors with contiguous rows, got " << pre.shape();
  LOOM_CHECK(!gbias.defined() || (gbias.numel() == pre.size(1) && gbias.dtype() == pre.dtype() &&
                                  gbias.is_contiguous()))
      << "gelu_bias_backward: bias gradient " << gbias.shape() << " for " << pre.shape();
}

void check_cast_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) {
  const bool cast = x.dtype() == DType::F32 && out.defined() && out.dtype() == DType::BF16 &&
                    out.shape() == x.shape() && has_contiguous_rows(out);
  const bool sums_only = x.dtype() == DType::BF16 && !out.defined();
  LOOM_CHECK((cast || sums_only) && has_contiguous_rows(x))
      << "cast_with_column_sums: expected (rows, n) f32 and bf16 with contiguous rows, or bf16 "
      << "and no output, got " << dtype_name(x.dtype()) << " " << x.shape() << " and "
      << (out.defined() ? dtype_name(out.dtype()) : "none") << " "
      << (out.defined() ? out.shape() : Shape{});
  LOOM_CHECK(sums.dtype() == DType::F32 && sums.is_contiguous() && x.dim() == 2 &&
             sums.numel() == x.size(1))
      << "cast_with_column_sums: sums " << sums.shape() << " for " << x.shape();
}

MatmulDims check_matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  LOOM_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3)
      << "matmul: expected 3-D (batch, rows, cols) tensors, got a " << a.shape() << ", b "
      << b.shape() << ", out " << out.shape();
  const Shape &as = a.shape(), &bs = b.shape(), &os = out.shape();
  const MatmulDims d{os[0], as[1], as[2], bs[2]};
  LOOM_CHECK(bs[1] == d.k) << "matmul: inner dims differ: a " << as << " @ b " << bs;
  LOOM_CHECK(os[1] == d.m && os[2] == d.n)
      << "matmul: out " << os << " does not match a " << as << " @ b " << bs
      << " (expected (batch, " << d.m << ", " << d.n << "))";
  LOOM_CHECK((as[0] == d.batch || as[0] == 1) && (bs[0] == d.batch || bs[0] == 1))
      << "matmul: batch dims of a " << as << " and b " << bs << " do not broadcast to out " << os;
  LOOM_CHECK(a.dtype() == b.dtype())
      << "matmul: a is " << dtype_name(a.dtype()) << " but b is " << dtype_name(b.dtype()) << " (a "
      << a.shape() << ", b " << b.shape() << ")";
  return d;
}

namespace {
bool is_fp8(DType t) {
  return t == DType::F8E4M3 || t == DType::F8E5M2;
}
// A scale or statistics tensor: n contiguous elements of dtype on the operand's device.
void check_small(const char* kernel, const char* name, const Tensor& t, int64_t n, DType dtype,
                 const Tensor& operand) {
  LOOM_CHECK(t.defined() && t.numel() == n && t.dtype() == dtype && t.is_contiguous() &&
             t.device() == operand.device())
      << kernel << ": " << name << " must be " << n << " contiguous " << dtype_name(dtype) << " on "
      << operand.device().str() << ", got "
      << (t.defined() ? dtype_name(t.dtype()) + std::string(" ") + shape_str(t.shape()) + " on " +
                            t.device().str()
                      : std::string("an undefined tensor"));
}
}  // namespace

bool check_fp8_quantize(const Tensor& x, const Tensor& out, const Tensor& inv_scale,
                        const Tensor& stats) {
  LOOM_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous())
      << "fp8_quantize: x must be contiguous f32 (rows, cols), got " << dtype_name(x.dtype()) << " "
      << x.shape();
  LOOM_CHECK(out.dim() == 2 && is_fp8(out.dtype()) && out.is_contiguous() &&
             out.size(0) >= x.size(0) && out.size(1) >= x.size(1) && out.device() == x.device())
      << "fp8_quantize: out must be contiguous f8e4m3 or f8e5m2 of at least x's " << x.shape()
      << " on " << x.device().str() << ", got " << dtype_name(out.dtype()) << " " << out.shape()
      << " on " << out.device().str();
  check_small("fp8_quantize", "inv_scale", inv_scale, 1, DType::F32, x);
  check_small("fp8_quantize", "stats", stats, 3, DType::I64, x);
  return out.dtype() == DType::F8E4M3;
}

void check_block_quantize(const Tensor& x, const BlockQuantizeSpec& spec, const Tensor& out,
                          const Tensor& stats) {
  LOOM_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous() && x.numel() > 0)
      << "block_quantize: x must be contiguous non-empty f32 (rows, cols), got "
      << dtype_name(x.dtype()) << " " << x.shape();
  LOOM_CHECK(out.shape() == x.shape() && out.dtype() == DType::F32 && out.is_contiguous() &&
             out.device() == x.device())
      << "block_quantize: out must be contiguous f32 " << x.shape() << " on " << x.device().str()
      << ", got " << dtype_name(out.dtype()) << " " << out.shape() << " on " << out.device().str();
  LOOM_CHECK(spec.tile_rows >= 0 && spec.tile_cols >= 0)
      << "block_quantize: tiles of (" << spec.tile_rows << ", " << spec.tile_cols << ")";
  LOOM_CHECK(spec.scale != GroupScale::Nvfp4 || spec.element == QuantElement::E2M1)
      << "block_quantize: NVFP4 scales take E2M1 elements";
  check_small("block_quantize", "stats", stats, 3, DType::I64, x);
}

void check_hadamard16(const Tensor& x, const Tensor& out) {
  LOOM_CHECK(x.dim() == 2 && x.dtype() == DType::F32 && x.is_contiguous())
      << "hadamard16: x must be contiguous f32 (rows, cols), got " << dtype_name(x.dtype()) << " "
      << x.shape();
  const int64_t padded = (x.size(1) + 15) / 16 * 16;
  LOOM_CHECK(out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == padded &&
             out.dtype() == DType::F32 && out.is_contiguous() && out.device() == x.device())
      << "hadamard16: out must be contiguous f32 (" << x.size(0) << ", " << padded << ") on "
      << x.device().str() << ", got " << dtype_name(out.dtype()) << " " << out.shape();
}

void check_wire(const char* kernel, const Tensor& values, const WireQuant& q, const Tensor& bytes) {
  LOOM_CHECK(q.block > 0 && (q.qmax == 127 || q.qmax == 7))
      << kernel << ": blocks of " << q.block << " values, qmax " << q.qmax
      << " (expected a positive block, 127 or 7)";
  LOOM_CHECK(values.dim() == 1 && values.dtype() == DType::F32 && values.is_contiguous())
      << kernel << ": values must be contiguous f32 (n), got " << dtype_name(values.dtype()) << " "
      << values.shape();
  const int64_t n = wire_bytes(q, values.numel());
  LOOM_CHECK(bytes.dim() == 1 && bytes.numel() == n && bytes.dtype() == DType::U8 &&
             bytes.is_contiguous() && bytes.device() == values.device())
      << kernel << ": bytes must be contiguous u8 (" << n << ") on " << values.device().str()
      << ", got " << dtype_name(bytes.dtype()) << " " << bytes.shape() << " on "
      << bytes.device().str();
}

void check_fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                      const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) {
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(1) &&
             out.size(0) == a.size(0) && out.size(1) == b.size(0))
      << "fp8_matmul: a (M, K) b (N, K) out (M, N) expected, got a " << a.shape() << ", b "
      << b.shape() << ", out " << out.shape();
  LOOM_CHECK(is_fp8(a.dtype()) && is_fp8(b.dtype()) &&
             !(a.dtype() == DType::F8E5M2 && b.dtype() == DType::F8E5M2))
      << "fp8_matmul: operands must be fp8, not both f8e5m2; got " << dtype_name(a.dtype())
      << " and " << dtype_name(b.dtype());
  LOOM_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous() &&
             out.dtype() == DType::F32)
      << "fp8_matmul: contiguous operands and an f32 out expected";
  LOOM_CHECK(a.size(1) % 16 == 0 && b.size(0) % 16 == 0)
      << "fp8_matmul: K (" << a.size(1) << ") and N (" << b.size(0)
      << ") must be multiples of 16 (pad the operands with zeros)";
  LOOM_CHECK(b.device() == a.device() && out.device() == a.device())
      << "fp8_matmul: operands on different devices";
  check_small("fp8_matmul", "a_inv_scale", a_inv_scale, 1, DType::F32, a);
  check_small("fp8_matmul", "b_inv_scale", b_inv_scale, 1, DType::F32, a);
  if (bias.defined()) check_small("fp8_matmul", "bias", bias, b.size(0), DType::F32, a);
}

void check_attention_rows(const Tensor& t, const char* name, const Shape& shape, DType dtype) {
  LOOM_CHECK(t.defined()) << "attention: " << name << " is undefined";
  LOOM_CHECK(t.shape() == shape) << "attention: " << name << " has shape " << shape_str(t.shape())
                                 << ", expected " << shape_str(shape);
  LOOM_CHECK(t.dtype() == dtype) << "attention: " << name << " has dtype " << dtype_name(t.dtype())
                                 << ", expected " << dtype_name(dtype);
  LOOM_CHECK((t.size(3) == 1 || t.stride(3) == 1) && (t.size(2) == 1 || t.stride(2) >= t.size(3)))
      << "attention: " << name << " " << shape_str(t.shape())
      << " must have contiguous, non-overlapping rows (last stride 1, row stride >= D)";
}

namespace {
void check_f32_shape(const char* what, const Tensor& t, const Shape& shape) {
  LOOM_CHECK(t.defined() && t.dtype() == DType::F32 && t.is_contiguous() && t.shape() == shape)
      << "ssm_scan: " << what << " must be contiguous f32 " << shape_str(shape) << ", got "
      << (t.defined() ? dtype_name(t.dtype()) + std::string(" ") + shape_str(t.shape())
                      : std::string("none"));
}
}  // namespace

SsmScanDims check_ssm_scan(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                           const Tensor& Cm, const Tensor& state, const Tensor& y,
                           const Tensor& checkpoints, int64_t every) {
  LOOM_CHECK(x.defined() && x.dim() == 4 && Bm.defined() && Bm.dim() == 4)
      << "ssm_scan: x (B, T, H, P) and Bm (B, T, G, N) are required";
  SsmScanDims d{x.size(0), x.size(1), x.size(2), x.size(3), Bm.size(2), Bm.size(3), 0};
  LOOM_CHECK(every > 0 && d.groups > 0 && d.heads % d.groups == 0)
      << "ssm_scan: " << d.heads << " heads over " << d.groups << " groups, checkpoints every "
      << every << " steps";
  d.chunks = (d.steps + every - 1) / every;
  check_f32_shape("x", x, x.shape());
  check_f32_shape("dt", dt, {d.batch, d.steps, d.heads});
  check_f32_shape("A", A, {d.heads});
  check_f32_shape("Bm", Bm, {d.batch, d.steps, d.groups, d.state});
  check_f32_shape("Cm", Cm, Bm.shape());
  check_f32_shape("checkpoints", checkpoints, {d.batch, d.heads, d.chunks, d.head_dim, d.state});
  if (state.defined()) check_f32_shape("state", state, {d.batch, d.heads, d.head_dim, d.state});
  if (y.defined()) check_f32_shape("y", y, x.shape());
  return d;
}

void check_ssm_scan_gradients(const SsmScanDims& d, const Tensor& dy, const Tensor& dstate,
                              const Tensor& dx, const Tensor& ddt, const Tensor& dA,
                              const Tensor& dB, const Tensor& dC) {
  const Shape xs{d.batch, d.steps, d.heads, d.head_dim}, bs{d.batch, d.steps, d.heads, d.state};
  check_f32_shape("dy", dy, xs);
  check_f32_shape("dx", dx, xs);
  check_f32_shape("dstate", dstate, {d.batch, d.heads, d.head_dim, d.state});
  check_f32_shape("ddt", ddt, {d.batch, d.steps, d.heads});
  check_f32_shape("dA", dA, {d.batch, d.heads});
  check_f32_shape("dB", dB, bs);
  check_f32_shape("dC", dC, bs);
}

}  // namespace loom
