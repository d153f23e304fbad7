#include "loom/nn/ssd.h"

#include <algorithm>
#include <vector>

#include "loom/ops/ops.h"

namespace loom::nn {

namespace {

// (L, L) ones on and below the diagonal (lower) or on and above it (upper).
Tensor triangle(int64_t L, bool lower, Device device) {
  std::vector<float> v(size_t(L * L), 0.0f);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j)
      if (lower ? j <= i : j >= i) v[size_t(i * L + j)] = 1.0f;
  return from_vector(v, {L, L}, DType::F32, device);
}

// (B, Tp, ...) zero-padded at the end of dim 1 to Tp rows.
Tensor pad_steps(const Tensor& t, int64_t Tp) {
  const int64_t T = t.size(1);
  if (Tp == T) return t;
  Shape s = t.shape();
  s[1] = Tp - T;
  return cat({t, zeros(s, t.dtype(), t.device())}, 1);
}

}  // namespace

SsdResult ssd_scan(const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                   const Tensor& Cm, int64_t chunk, const Tensor& initial_state) {
  LOOM_CHECK(x.dim() == 4) << "ssd_scan: x must be (B, T, H, P), got " << x.shape();
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3);
  LOOM_CHECK(dt.shape() == (Shape{B, T, H}))
      << "ssd_scan: dt must be (" << B << ", " << T << ", " << H << "), got " << dt.shape();
  LOOM_CHECK(A.shape() == Shape{H}) << "ssd_scan: A must be (" << H << "), got " << A.shape();
  LOOM_CHECK(Bm.dim() == 4 && Bm.size(0) == B && Bm.size(1) == T && Bm.shape() == Cm.shape() &&
             H % Bm.size(2) == 0)
      << "ssd_scan: B and C must both be (" << B << ", " << T << ", G, N) with G dividing " << H
      << " heads, got " << Bm.shape() << " and " << Cm.shape();
  LOOM_CHECK(chunk > 0) << "ssd_scan: chunk must be positive, got " << chunk;
  const int64_t G = Bm.size(2), N = Bm.size(3), R = H / G;
  LOOM_CHECK(!initial_state.defined() || initial_state.shape() == (Shape{B, H, P, N}))
      << "ssd_scan: initial_state must be (" << B << ", " << H << ", " << P << ", " << N
      << "), got " << initial_state.shape();
  AutocastGuard full_precision(DType::F32);
  const Device dev = x.device();
  const int64_t L = std::min(chunk, T), nc = (T + L - 1) / L, Tp = nc * L, BHc = B * H * nc;

  // Padding steps have dt = 0: no decay and no input, so the final state is unchanged.
  const Tensor xp = pad_steps(x, Tp), dtp = pad_steps(dt, Tp);
  auto per_head = [&](const Tensor& m) {  // (B, Tp, G, N) -> (B, Tp, H, N)
    const Tensor p = pad_steps(m, Tp);
    if (G == H) return p;
    return reshape(expand(unsqueeze(p, 3), {B, Tp, G, R, N}), {B, Tp, H, N});
  };
  auto chunks = [&](const Tensor& m) {  // (B, Tp, H, X) -> (B H nc, L, X)
    const int64_t X = m.size(3);
    return reshape(permute(reshape(m, {B, nc, L, H, X}), {0, 3, 1, 2, 4}), {BHc, L, X});
  };

  // Decay exponents summed from the chunk's start: cum[l] = sum_{s <= l} dt_s A.
  const Tensor a = chunks(unsqueeze(mul(dtp, A), 3));  // (BHc, L, 1)
  const Tensor cum = transpose(matmul(transpose(a, 1, 2), triangle(L, false, dev)), 1, 2);
  // Within a chunk, row l reads step s <= l decayed by exp(cum[l] - cum[s]); the entries
  // above the diagonal are zeroed before exp (they would overflow) and after.
  const Tensor lower = triangle(L, true, dev);
  const Tensor decay = mul(exp(mul(sub(cum, transpose(cum, 1, 2)), lower)), lower);  // (BHc,L,L)
  const Tensor Bc = chunks(per_head(Bm)), Cc = chunks(per_head(Cm));                 // (BHc, L, N)
  const Tensor xdt = chunks(mul(xp, unsqueeze(dtp, 3)));                             // (BHc, L, P)
  Tensor y = matmul(mul(matmul(Cc, transpose(Bc, 1, 2)), decay), xdt);               // (BHc, L, P)

  // Each chunk's own contribution to the state at its end, and its total decay.
  const Tensor last = narrow(cum, 1, L - 1, 1);                                   // (BHc, 1, 1)
  const Tensor own = matmul(transpose(mul(xdt, exp(sub(last, cum))), 1, 2), Bc);  // (BHc, P, N)
  const Tensor own_c = reshape(own, {B * H, nc, P * N});
  const Tensor chunk_decay = exp(reshape(last, {B * H, nc, 1}));
  // The state entering each chunk: a sequential pass over the nc chunks.
  Tensor state = initial_state.defined() ? reshape(initial_state, {B * H, 1, P * N})
                                         : zeros({B * H, 1, P * N}, DType::F32, dev);
  // (split: one backward node for all the chunks; nc narrows would each write a gradient of
  // the whole tensor, quadratic in the length.)
  const std::vector<Tensor> own_parts = split(own_c, 1, 1), decay_parts = split(chunk_decay, 1, 1);
  std::vector<Tensor> entering;
  entering.reserve(size_t(nc));
  for (int64_t c = 0; c < nc; ++c) {
    entering.push_back(state);
    state = add(mul(state, decay_parts[size_t(c)]), own_parts[size_t(c)]);
  }
  const Tensor start = reshape(cat(entering, 1), {BHc, P, N});
  // Row l also reads the entering state, decayed by exp(cum[l]).
  y = add(y, mul(matmul(Cc, transpose(start, 1, 2)), exp(cum)));  // (BHc, L, P)

  y = reshape(permute(reshape(y, {B, H, nc, L, P}), {0, 2, 3, 1, 4}), {B, Tp, H, P});
  if (Tp != T) y = narrow(y, 1, 0, T);
  return {y, reshape(state, {B, H, P, N})};
}

}  // namespace loom::nn
