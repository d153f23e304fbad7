#include "loom/ops/grouped_linear.h"

#include "loom/autograd/checkpoint.h"
#include "loom/ops/creation.h"
#include "loom/ops/detail.h"

namespace loom {

using detail::backend_of;

namespace {

// Rows [first, first + count) of a matrix m (rows, cols) with unit column stride, as the 3-D
// (1, count, cols) operand the backend GEMM takes; transposed: (1, cols, count).
Tensor rows_of(const Tensor& m, int64_t first, int64_t count, bool transposed = false) {
  const int64_t offset = m.offset() + first * m.stride(0);
  if (transposed) return m.as_strided({1, m.size(1), count}, {0, 1, m.stride(0)}, offset);
  return m.as_strided({1, count, m.size(1)}, {0, m.stride(0), 1}, offset);
}

// Matrix e of a contiguous (E, N, K) weight as a (1, N, K) operand; transposed: (1, K, N).
Tensor matrix_of(const Tensor& w, int64_t e, bool transposed) {
  const int64_t N = w.size(1), K = w.size(2), offset = w.offset() + e * N * K;
  if (transposed) return w.as_strided({1, K, N}, {0, 1, K}, offset);
  return w.as_strided({1, N, K}, {0, K, 1}, offset);
}

// A group's rows as GEMM pieces of a few fixed sizes: runs of 256 rows, then the rest as a
// multiple of 16 and a last piece of fewer than 16. The backend makes one GEMM kernel per shape
// and keeps it (about a millisecond each); group sizes change every step, and cut this way
// they need at most 31 row counts per weight shape, made once in the first steps.
std::vector<std::pair<int64_t, int64_t>> pieces_of(int64_t first, int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> out;  // (first row, rows)
  for (; count >= 256; first += 256, count -= 256) out.emplace_back(first, 256);
  if (count >= 16) {
    out.emplace_back(first, count / 16 * 16);
    first += count / 16 * 16;
    count %= 16;
  }
  if (count > 0) out.emplace_back(first, count);
  return out;
}

// out (M, N) contiguous: each group's rows = a's rows (M, K) times matrix e of w.
void grouped_gemm(const Tensor& a, const Tensor& w, bool transpose_w,
                  const std::vector<int64_t>& sizes, const Tensor& out) {
  Backend& be = backend_of(a);
  int64_t first = 0;
  for (size_t e = 0; e < sizes.size(); ++e) {
    for (auto [row, rows] : pieces_of(first, sizes[e]))
      be.matmul(rows_of(a, row, rows), matrix_of(w, int64_t(e), transpose_w), Tensor(),
                rows_of(out, row, rows));
    first += sizes[e];
  }
}

struct GroupedLinearBackward : Node {
  // x: contiguous (M, K), a bf16 copy when mixed. weight: the f32 parameter itself (E, N, K),
  // which ZeRO-3 may free and gather again before backward; lowered again there when mixed.
  Tensor x, weight;
  bool mixed = false;  // autocast: bf16 operands, f32 output
  std::vector<int64_t> sizes;
  const char* name() const override { return "GroupedLinearBackward"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    Tensor g = detail::raw_contiguous(grads[0]);  // (M, N)
    if (mixed) g = bf16_copy_of(g);
    const int64_t M = x.size(0), K = x.size(1), E = weight.size(0), N = weight.size(1);
    const Tensor w = mixed ? bf16_copy_of(weight) : detail::raw_contiguous(weight.detach());
    Tensor gx, gw;
    if (inputs[0].active()) {  // dx_e (rows, K) = dy_e (rows, N) W_e (N, K)
      gx = Tensor::empty({M, K}, DType::F32, g.device());
      grouped_gemm(g, w, /*transpose_w=*/false, sizes, gx);
    }
    if (inputs[1].active()) {  // dW_e (N, K) = dy_e^T (N, rows) x_e (rows, K); 0 for no rows
      // Summed over the group's pieces: the first written in place, the others added.
      gw = zeros({E, N, K}, DType::F32, g.device());
      Tensor part;
      Backend& be = backend_of(g);
      int64_t first = 0;
      for (int64_t e = 0; e < E; ++e) {
        const Tensor gw_e = gw.as_strided({1, N, K}, {0, K, 1}, e * N * K);
        bool written = false;
        for (auto [row, rows] : pieces_of(first, sizes[size_t(e)])) {
          if (written && !part.defined()) part = Tensor::empty({1, N, K}, DType::F32, g.device());
          be.matmul(rows_of(g, row, rows, /*transposed=*/true), rows_of(x, row, rows), Tensor(),
                    written ? part : gw_e);
          if (written) be.binary(BinaryOp::Add, gw_e, part, gw_e);
          written = true;
        }
        first += sizes[size_t(e)];
      }
    }
    return {gx, gw};
  }
  void release() override { x = weight = Tensor(); }
};

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& weight,
                      const std::vector<int64_t>& group_sizes) {
  const char* op = "grouped_linear";
  detail::check_floating(op, x, "input");
  detail::check_floating(op, weight, "weight");
  detail::check_same_device(op, x, weight);
  LOOM_CHECK(x.dim() == 2 && weight.dim() == 3 && x.size(1) == weight.size(2))
      << op << ": expected input (M, K) and weight (E, N, K), got " << x.shape() << " and "
      << weight.shape();
  LOOM_CHECK(int64_t(group_sizes.size()) == weight.size(0))
      << op << ": " << group_sizes.size() << " group sizes for " << weight.size(0)
      << " weight matrices";
  int64_t rows = 0;
  for (int64_t s : group_sizes) {
    LOOM_CHECK(s >= 0) << op << ": negative group size " << s;
    rows += s;
  }
  LOOM_CHECK(rows == x.size(0)) << op << ": group sizes sum to " << rows << " rows, input has "
                                << x.size(0);
  const bool mixed =
      autocast_dtype() == DType::BF16 && x.dtype() == DType::F32 && weight.dtype() == DType::F32;
  LOOM_CHECK(mixed || x.dtype() == weight.dtype())
      << op << ": input " << dtype_name(x.dtype()) << " and weight " << dtype_name(weight.dtype())
      << " differ";
  const Tensor a =
      mixed ? bf16_copy_of(detail::raw_contiguous(x)).detach() : detail::raw_contiguous(x).detach();
  const Tensor w = mixed ? bf16_copy_of(weight).detach() : detail::raw_contiguous(weight).detach();
  Tensor out = computed_or_kept([&] {
    Tensor o = Tensor::empty({x.size(0), weight.size(1)}, x.dtype(), x.device());  // (M, N)
    grouped_gemm(a, w, /*transpose_w=*/true, group_sizes, o);
    return std::vector<Tensor>{o};
  })[0];
  if (any_requires_grad({x, weight})) {
    auto node = std::make_shared<GroupedLinearBackward>();
    node->x = a;
    node->weight = weight;
    node->mixed = mixed;
    node->sizes = group_sizes;
    record(node, {x, weight}, {out});
  }
  return out;
}

}  // namespace loom
