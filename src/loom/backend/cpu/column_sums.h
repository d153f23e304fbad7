// A pass over a (rows, n) matrix that stores each element's value and sums the columns in the
// same pass, while the rows are in cache: a bias gradient beside the tensor it comes from.
// The sums go through f64 partials over chunks of a fixed number of rows, added in chunk order
// afterwards, so the bits do not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "loom/backend/cpu/parallel.h"
#include "loom/backend/cpu/scratch.h"
#include "loom/core/dtype.h"

namespace loom::cpu {

// out[r * out_stride + c] = O(value(r, c)) for r < rows, c < n (out an O*, or nullptr: nothing
// stored); with sums, also sums[c] = S(sum over r of term(value(r, c))) (term: the f64
// summand, e.g. the value as stored). cost: rough cycles per element, for the threading
// decision.
template <typename Out, typename S, typename Value, typename Term>
void store_with_column_sums(int64_t rows, int64_t n, int64_t cost, const Value& value, Out out,
                            int64_t out_stride, const Term& term, S* sums) {
  // Whether to store, decided at compile time so that the loops stay vectorised.
  constexpr bool kStore = !std::is_same_v<Out, std::nullptr_t>;
  using O = std::remove_pointer_t<Out>;
  constexpr int64_t kChunk = 512;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  // Work items are (chunk of rows, block of columns): a matrix of a few hundred rows is still
  // shared out over the threads (GPT-2 at 4 x 64 tokens: one chunk). Each partial is the same
  // rows summed in the same order however the items fall, so the bits stay put.
  constexpr int64_t kColumns = 128;
  const int64_t blocks = chunks >= 4 * omp_get_max_threads() ? 1 : (n + kColumns - 1) / kColumns;
  const int64_t block_width = (n + blocks - 1) / blocks;
  // f64 partials (chunks, n), in a float scratch buffer of twice the count.
  ScratchBuffer partial_storage(sums ? size_t(2 * chunks * n) : 0);
  double* partial = reinterpret_cast<double*>(partial_storage.data());
  parallel_for(chunks * blocks, kChunk * block_width * cost, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t chunk = item / blocks, c0 = item % blocks * block_width;
      const int64_t r0 = chunk * kChunk, r1 = std::min(rows, r0 + kChunk);
      const int64_t c1 = std::min(n, c0 + block_width);
      if (!sums) {
        if constexpr (kStore) {
          for (int64_t r = r0; r < r1; ++r) {
            O* o = out + r * out_stride;
#pragma omp simd
            for (int64_t c = c0; c < c1; ++c) o[c] = from_f32<O>(value(r, c));
          }
        }
        continue;
      }
      // Four rows per pass over acc, for a quarter of the accumulator loads and stores.
      double* acc = partial + chunk * n;
      std::fill(acc + c0, acc + c1, 0.0);
      int64_t r = r0;
      for (; r + 4 <= r1; r += 4) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          const float v0 = value(r, c), v1 = value(r + 1, c), v2 = value(r + 2, c),
                      v3 = value(r + 3, c);
          if constexpr (kStore) {
            O* o = out + r * out_stride;
            o[c] = from_f32<O>(v0);
            o[c + out_stride] = from_f32<O>(v1);
            o[c + 2 * out_stride] = from_f32<O>(v2);
            o[c + 3 * out_stride] = from_f32<O>(v3);
          }
          acc[c] += (term(v0) + term(v1)) + (term(v2) + term(v3));
        }
      }
      for (; r < r1; ++r) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) {
          const float v = value(r, c);
          if constexpr (kStore) out[r * out_stride + c] = from_f32<O>(v);
          acc[c] += term(v);
        }
      }
    }
  });
  if (!sums) return;
  for (int64_t c = 0; c < n; ++c) {
    double total = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * n + c];
    sums[c] = from_f32<S>(float(total));
  }
}

}  // namespace loom::cpu
