// Continuing a sequence of tokens with a GPT: each next token greedily (temperature 0) or
// drawn from softmax(logits / temperature) at a Philox uniform keyed by `seed`.
#pragma once
#include <cstdint>
#include <vector>

#include "loom/models/gpt/gpt.h"

namespace loom::models {

// ids (non-empty) followed by `tokens` more; the model sees the last model.context of them.
std::vector<int32_t> generate(const Gpt& model, std::vector<int32_t> ids, int64_t tokens,
                              double temperature, uint64_t seed);

}  // namespace loom::models
