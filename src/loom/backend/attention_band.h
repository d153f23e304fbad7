// Which keys each query row of an attention problem sees, apart from the additive mask: the
// causal diagonal and, for sliding-window attention, a band below it.
#pragma once
#include <cstdint>

#include "loom/core/host_device.h"

namespace loom {

// Query row i stands at key position i + offset. Causal: it sees keys j <= i + offset; with a
// window W > 0 only the last W of those, j > i + offset - W (Mistral's sliding window: itself
// and the W - 1 keys before it). Not causal: every key, and no window.
// scaled_dot_product_attention puts the queries at the keys' last rows (offset Skv - Sq, see
// last_rows); ring attention's blocks hold other positions of the sequence and set their own.
struct AttentionBand {
  bool causal = false;
  int64_t window = 0;  // 0: no window
  int64_t offset = 0;

  static AttentionBand last_rows(bool causal, int64_t seq_q, int64_t seq_kv, int64_t window = 0) {
    return {causal, causal ? window : 0, seq_kv - seq_q};
  }
  // The keys [first(i), end(i)) of seq_kv that query i sees; empty when first >= end.
  LOOM_HD int64_t first(int64_t i, int64_t seq_kv) const {
    if (!causal || window <= 0) return 0;
    const int64_t j = i + offset - window + 1;
    return j < 0 ? 0 : j > seq_kv ? seq_kv : j;
  }
  LOOM_HD int64_t end(int64_t i, int64_t seq_kv) const {
    if (!causal) return seq_kv;
    const int64_t j = i + offset + 1;
    return j < 0 ? 0 : j > seq_kv ? seq_kv : j;
  }
  LOOM_HD bool sees(int64_t i, int64_t j, int64_t seq_kv) const {
    return j >= first(i, seq_kv) && j < end(i, seq_kv);
  }
  // Causal with the queries at the keys' last rows and no window: cuDNN's bottom-right mask.
  bool plain(int64_t seq_q, int64_t seq_kv) const {
    return !causal || (window <= 0 && offset == seq_kv - seq_q);
  }
};

}  // namespace loom
