// GEMM: out(b) = a(b) @ b(b) (+ bias), through cuBLASLt (f32, on TF32 tensor cores if
// allow_tf32(), or bf16 with f32 accumulation), and the fp8 GEMM with per-tensor scales.
// cuBLAS is column-major: the row-major out (m, n) is the column-major (n, m) = b^T a^T, so the
// call takes b as its first operand. Each operand must have a unit stride in one of its last two
// dims (else it is copied contiguous first). The emulated build runs a plain loop over the same
// column-major call, so the layout logic below goes through the op harness on the CPU too.
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "loom/backend/cuda/cuda_backend.h"
#include "loom/backend/fp8_scaling.h"
#include "loom/backend/kernel_checks.h"

#ifndef LOOM_CUDA_EMULATE
#include <cublasLt.h>
#endif

namespace loom::LOOM_CUDA_NS {

namespace {

// One column-major strided-batched GEMM: D = A' B' (+ D when accumulate), A' = op(A) (m, k),
// B' = op(B) (k, n), D (m, n) with leading dim ldd; the operand types are equal.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* D = nullptr;
  int64_t ldd = 0, stride_d = 0;
  int64_t batch = 1;
  DType in_type = DType::F32, out_type = DType::F32;
  bool accumulate = false;  // D holds the bias rows already
  bool tf32 = false;        // f32 operands rounded to TF32 (allow_tf32())
};

#ifdef LOOM_CUDA_EMULATE
// TF32: f32 with its mantissa rounded to 10 bits (to nearest, ties away, as cvt.rna.tf32).
inline float to_tf32(float x) {
  if (!std::isfinite(x)) return x;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

template <typename I, typename O>
void reference_gemm(const GemmCall& g) {
  const I* A = static_cast<const I*>(g.A);
  const I* B = static_cast<const I*>(g.B);
  O* D = static_cast<O*>(g.D);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i) {
        float acc = 0.0f;
        for (int64_t p = 0; p < g.k; ++p) {
          // Column-major: element (r, c) of a stored matrix with leading dim ld is at r + c ld.
          const float x = to_f32(A[b * g.stride_a + (g.trans_a ? p + i * g.lda : i + p * g.lda)]);
          const float y = to_f32(B[b * g.stride_b + (g.trans_b ? j + p * g.ldb : p + j * g.ldb)]);
          acc += g.tf32 ? to_tf32(x) * to_tf32(y) : x * y;
        }
        O& d = D[b * g.stride_d + i + j * g.ldd];
        d = from_f32<O>(g.accumulate ? acc + to_f32(d) : acc);
      }
}
void run_gemm(const GemmCall& g) {
  if (g.in_type == DType::F32) return reference_gemm<float, float>(g);
  if (g.out_type == DType::F32) return reference_gemm<bf16, float>(g);
  reference_gemm<bf16, bf16>(g);
}
#else
cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::F8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::F8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      return CUDA_R_16BF;
  }
}

#define LOOM_CUBLAS_CHECK(expr)                                            \
  do {                                                                     \
    const cublasStatus_t loom_cublas_status_ = (expr);                     \
    LOOM_CHECK(loom_cublas_status_ == CUBLAS_STATUS_SUCCESS)               \
        << #expr << " failed: cuBLAS status " << int(loom_cublas_status_); \
  } while (0)

constexpr size_t kWorkspace = size_t(32) << 20;

struct Lt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  Lt() {
    stream();  // the device is chosen first
    LOOM_CUBLAS_CHECK(cublasLtCreate(&handle));
    LOOM_CUDA_CHECK(cudaMalloc(&workspace, kWorkspace));
  }
};
Lt& lt() {
  static Lt* l = new Lt();
  return *l;
}

// The descriptors and chosen algorithm of one problem shape, made once.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

cublasLtMatrixLayout_t layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  LOOM_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&l, cuda_type(t), uint64_t(rows), uint64_t(cols), ld));
  const int32_t count = int32_t(batch);
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof(stride)));
  return l;
}

// The largest power of two up to 16 dividing a pointer: cuBLASLt's algorithms differ in the
// operand alignment they need, and a view (a narrowed tensor) may start anywhere.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 16;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// cuBLASLt's first choice for a plan's descriptors, with our workspace and the operands'
// alignment; false if it has none.
bool best_algo(const Plan& p, const void* A, const void* B, const void* D,
               cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspace;
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = alignment(A), align_b = alignment(B), align_d = alignment(D);
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  LOOM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt().handle, p.op, p.a, p.b, p.d, p.d, pref, 1,
                                                   &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found > 0) algo = result.algo;
  return found > 0;
}

Plan make_plan(const GemmCall& g) {
  Plan p;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(
      &p.op, g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Stored shapes (before the op).
  p.a = g.trans_a ? layout(g.in_type, g.k, g.m, g.lda, g.batch, g.stride_a)
                  : layout(g.in_type, g.m, g.k, g.lda, g.batch, g.stride_a);
  p.b = g.trans_b ? layout(g.in_type, g.n, g.k, g.ldb, g.batch, g.stride_b)
                  : layout(g.in_type, g.k, g.n, g.ldb, g.batch, g.stride_b);
  p.d = layout(g.out_type, g.m, g.n, g.ldd, g.batch, g.stride_d);
  LOOM_CHECK(best_algo(p, g.A, g.B, g.D, p.algo))
      << "cuBLASLt has no algorithm for a " << g.m << "x" << g.k << " @ " << g.k << "x" << g.n
      << " GEMM (batch " << g.batch << ")";
  return p;
}

void run_gemm(const GemmCall& g) {
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int, int, uint32_t, bool>;
  static std::map<Key, Plan> plans;
  static std::mutex mutex;
  // The plan's algorithm fits the operands' alignment, so the alignment is part of the key.
  const uint32_t align = alignment(g.A) | alignment(g.B) << 5 | alignment(g.D) << 10;
  const Key key{g.trans_a,      g.trans_b,       g.m,        g.n,   g.k,        g.lda,
                g.stride_a,     g.ldb,           g.stride_b, g.ldd, g.stride_d, g.batch,
                int(g.in_type), int(g.out_type), align,      g.tf32};
  const Plan* plan;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, make_plan(g)).first;
    plan = &it->second;
  }
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  LOOM_CUBLAS_CHECK(cublasLtMatmul(lt().handle, plan->op, &alpha, g.A, plan->a, g.B, plan->b, &beta,
                                   g.D, plan->d, g.D, plan->d, &plan->algo, lt().workspace,
                                   kWorkspace, stream()));
}
#endif

// A matrix operand's last two dims: unit stride in one of them, or a contiguous copy.
struct Operand {
  Tensor t;  // the tensor read (the original, or its copy)
  bool row_major = true;
  int64_t ld = 0, batch_stride = 0;
};

Operand operand(const Tensor& x, CudaBackend& backend) {
  const int64_t rows = x.size(1), cols = x.size(2);
  Operand o{x, true, 0, x.stride(0)};
  if (x.size(0) == 1) o.batch_stride = 0;
  if ((x.stride(2) == 1 || cols == 1) && x.stride(1) >= cols) {
    o.ld = cols == 1 && x.stride(2) != 1 ? std::max<int64_t>(x.stride(1), 1) : x.stride(1);
    o.ld = std::max<int64_t>(o.ld, std::max<int64_t>(cols, 1));
    if (rows == 1) o.ld = std::max<int64_t>(cols, 1);
    return o;
  }
  if ((x.stride(1) == 1 || rows == 1) && x.stride(2) >= rows) {
    o.row_major = false;
    o.ld = std::max<int64_t>(x.stride(2), std::max<int64_t>(rows, 1));
    return o;
  }
  Tensor c = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend.copy(x, c);
  return Operand{c, true, std::max<int64_t>(cols, 1), x.size(0) == 1 ? 0 : rows * cols};
}

// A block per row (no division per element).
template <typename T>
__global__ void bias_rows_kernel(const T* bias, int64_t bias_stride, int64_t rows, int64_t n,
                                 int64_t row_stride, int64_t batch, int64_t batch_stride, T* out) {
  for (int64_t br = blockIdx.x; br < batch * rows; br += gridDim.x) {
    T* row = out + br / rows * batch_stride + br % rows * row_stride;
    LOOM_BLOCK_STRIDE(c, n) row[c] = bias ? bias[c * bias_stride] : from_f32<T>(0.0f);
  }
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const MatmulDims d = check_matmul(a, b, out);
  const int64_t batch = d.batch, m = d.m, k = d.k, n = d.n;
  const Shape& os = out.shape();
  LOOM_CHECK(a.dtype() == DType::F32 || a.dtype() == DType::BF16)
      << "matmul: " << dtype_name(a.dtype()) << " operands are not supported (f32 or bf16)";
  LOOM_CHECK(out.dtype() == DType::F32 || out.dtype() == a.dtype())
      << "matmul: out is " << dtype_name(out.dtype()) << "; expected f32 or "
      << dtype_name(a.dtype());
  LOOM_CHECK(out.stride(2) == 1 || n == 1)
      << "matmul: out " << os << " with strides " << out.strides() << " must be row-major";
  if (bias.defined()) {
    LOOM_CHECK(bias.dim() == 1 && bias.shape()[0] == n &&
               (bias.dtype() == out.dtype() || bias.dtype() == DType::F32))
        << "matmul: bias " << bias.shape() << " (" << dtype_name(bias.dtype())
        << ") does not match out " << os << " (" << dtype_name(out.dtype()) << ")";
  }
  if (batch == 0 || m == 0 || n == 0) return;
  const int64_t out_rs = m == 1 ? n : out.stride(1),
                out_bs = batch == 1 ? m * out_rs : out.stride(0);

  // Bias rows first (or zeros when k == 0); the GEMM then accumulates onto them. An f32 bias
  // of a bf16 product is rounded to bf16 for it.
  Tensor bias_out = bias;
  if (bias.defined() && bias.dtype() != out.dtype()) {
    bias_out = Tensor::empty(bias.shape(), out.dtype(), out.device());
    copy(bias, bias_out);
  }
  const bool prefill = bias.defined() || k == 0;
  if (prefill)
    dispatch_float(out.dtype(), "matmul", [&](auto z) {
      using T = decltype(z);
      LOOM_LAUNCH(bias_rows_kernel<T>, blocks_for(batch * m, 1), kBlock,
                  bias.defined() ? ptr<const T>(bias_out) : nullptr,
                  bias.defined() ? bias_out.stride(0) : 0, m, n, out_rs, batch, out_bs,
                  ptr<T>(out));
    });
  if (k == 0) return;

  Operand A = operand(a, *this), B = operand(b, *this);
  int64_t rows = m, batches = batch;
  // A batch of row-major a against one b: one GEMM of batch * m rows.
  if (batch > 1 && B.batch_stride == 0 && A.row_major && A.batch_stride == m * A.ld &&
      out_bs == m * out_rs) {
    rows = batch * m;
    batches = 1;
  }
  GemmCall g;
  // Column-major D (n, rows) = op(B') (n, k) op(A') (k, rows).
  g.m = n;
  g.n = rows;
  g.k = k;
  g.A = B.t.raw_ptr();
  g.trans_a = !B.row_major;  // row-major b (k, n) is column-major (n, k): no transpose
  g.lda = B.ld;
  g.stride_a = batches == 1 ? 0 : B.batch_stride;
  g.B = A.t.raw_ptr();
  g.trans_b = !A.row_major;
  g.ldb = A.ld;
  g.stride_b = batches == 1 ? 0 : A.batch_stride;
  g.D = out.raw_ptr();
  g.ldd = out_rs;
  g.stride_d = out_bs;
  g.batch = batches;
  g.in_type = a.dtype();
  g.out_type = out.dtype();
  g.accumulate = prefill;
  g.tf32 = g.in_type == DType::F32 && allow_tf32();
  run_gemm(g);
}

// fp8: out (M, N) = (a a_inv_scale) (b b_inv_scale)^T, a (M, K) and b (N, K) row-major. In
// cuBLAS's column-major terms out is D (N, M) = b (N, K) a^T (K, M): the "TN" layout that
// cuBLASLt's fp8 kernels take (A = b transposed, B = a not), the scales read on the device.
// cuBLASLt's default accumulation (not CUBLASLT_MATMUL_DESC_FAST_ACCUM): the f32 the CPU's
// emulation assumes.
void CudaBackend::fp8_matmul(const Tensor& a, const Tensor& a_inv_scale, const Tensor& b,
                             const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) {
  check_fp8_matmul(a, a_inv_scale, b, b_inv_scale, bias, out);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (m == 0) return;
  if (bias.defined())  // bias rows first; the GEMM accumulates onto them (beta 1)
    LOOM_LAUNCH(bias_rows_kernel<float>, blocks_for(m, 1), kBlock, ptr<const float>(bias),
                int64_t(1), m, n, n, int64_t(1), m * n, ptr<float>(out));
  const bool accumulate = bias.defined();
#ifdef LOOM_CUDA_EMULATE
  const uint8_t* A = ptr<const uint8_t>(a);
  const uint8_t* B = ptr<const uint8_t>(b);
  const bool a_e4m3 = a.dtype() == DType::F8E4M3, b_e4m3 = b.dtype() == DType::F8E4M3;
  const float sa = ptr<const float>(a_inv_scale)[0], sb = ptr<const float>(b_inv_scale)[0];
  float* D = ptr<float>(out);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p)
        acc += fp8_decode(A[i * k + p], a_e4m3) * fp8_decode(B[j * k + p], b_e4m3);
      // Both scales after the sum, as the tensor cores apply them.
      acc *= sa * sb;
      D[i * n + j] = accumulate ? D[i * n + j] + acc : acc;
    }
#else
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, uint32_t, bool>;
  static std::map<Key, Plan> plans;
  static std::mutex mutex;
  const uint32_t align =
      alignment(a.raw_ptr()) | alignment(b.raw_ptr()) << 5 | alignment(out.raw_ptr()) << 10;
  const Key key{m, n, k, int(a.dtype()), int(b.dtype()), align, accumulate};
  // Held through the call: the plan's descriptor takes this call's scale pointers.
  std::lock_guard<std::mutex> lock(mutex);
  // The scale pointers are per call (each operand's own scale tensor); the heuristic sees them.
  const void* scale_a = b_inv_scale.raw_ptr();
  const void* scale_b = a_inv_scale.raw_ptr();
  auto set_scales = [&](cublasLtMatmulDesc_t op) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &scale_a, sizeof(scale_a)));
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &scale_b, sizeof(scale_b)));
  };
  auto it = plans.find(key);
  if (it == plans.end()) {
    Plan p;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    set_scales(p.op);
    p.a = layout(b.dtype(), k, n, k, 1, 0);  // b (N, K) row-major: column-major (K, N)
    p.b = layout(a.dtype(), k, m, k, 1, 0);
    p.d = layout(DType::F32, n, m, n, 1, 0);
    LOOM_CHECK(best_algo(p, b.raw_ptr(), a.raw_ptr(), out.raw_ptr(), p.algo))
        << "cuBLASLt has no fp8 algorithm for a " << m << "x" << k << " (" << dtype_name(a.dtype())
        << ") by " << n << "x" << k << " (" << dtype_name(b.dtype()) << ")^T GEMM";
    it = plans.emplace(key, p).first;
  }
  const Plan* plan = &it->second;
  set_scales(plan->op);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  LOOM_CUBLAS_CHECK(cublasLtMatmul(lt().handle, plan->op, &alpha, b.raw_ptr(), plan->a, a.raw_ptr(),
                                   plan->b, &beta, out.raw_ptr(), plan->d, out.raw_ptr(), plan->d,
                                   &plan->algo, lt().workspace, kWorkspace, stream()));
#endif
}

}  // namespace loom::LOOM_CUDA_NS
