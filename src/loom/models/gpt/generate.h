// Continuing token sequences with a GPT. Each next token is greedy (temperature 0) or drawn
// from softmax(logits / temperature), cut to the top_k most likely tokens and then to the
// smallest set of them whose probability reaches top_p (nucleus sampling), by the inverse CDF
// at a Philox uniform keyed by (seed, row, index).
//
// With the KV cache (the default) a prompt is prefilled in one forward and each further token
// costs one row's forward, attending to the cached keys and values (Gpt::forward_cached: one
// contiguous cache a block, model.context rows). Without it every token runs the whole window
// again. Prompts of different lengths decode together as one batch: the rows move in step, a row
// still inside its prompt taking its prompt's next token instead of a drawn one, so no row ever
// needs padding or a mask. When the sequences reach model.context, the cache is rebuilt from
// their last context / 2 tokens (the uncached path slides its window by one token instead, so the
// two part ways there).
#pragma once
#include <cstdint>
#include <vector>

#include "loom/models/gpt/gpt.h"

namespace loom::models {

struct SampleOptions {
  int64_t tokens = 200;      // added to each prompt
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: no nucleus cut
  uint64_t seed = 0;
  bool kv_cache = true;
};

// Each prompt (non-empty) followed by o.tokens more.
std::vector<std::vector<int32_t>> generate(const Gpt& model,
                                           std::vector<std::vector<int32_t>> prompts,
                                           const SampleOptions& o);
std::vector<int32_t> generate(const Gpt& model, std::vector<int32_t> ids, const SampleOptions& o);

// The bytes one sequence's KV cache holds per position, measured: the key/value tensors a
// cache allocates (one token's forward_cached) over the positions they have room for. A Mamba-2
// block's fixed-size state is not per position and is left out.
int64_t cache_bytes_per_position(const Gpt& model);

// The token drawn from `logits` (V values) with o's temperature, top_k and top_p at the uniform
// u in [0, 1) (greedy: the first largest).
int32_t pick_token(const float* logits, int64_t V, const SampleOptions& o, float u);

}  // namespace loom::models
