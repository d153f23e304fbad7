// The GPT language model on a text corpus (the King James Bible by default, or any UTF-8
// file), with byte-level or BPE tokens: its recipe, and evaluation and sampling from its
// checkpoints.
//
// Data: the text is split into a training head and a held-out tail (split_text), each
// tokenized on its own. A training step draws B * grad_accum random windows of T + 1 tokens
// (T = model.context) from the training tokens; window g of step s (g = micro * B + b, the
// global sample index within the step) starts at
//     philox(key = RngKey{seed, "lm.windows", "step <s>"}, counter = g) mod (N - T)
// where N is the number of training tokens. The windows depend only on (seed, step, g), so a
// resumed run draws exactly the windows the uninterrupted one would: no sampler state is kept.
//
// Evaluation: the held-out tokens are cut into non-overlapping windows of T + 1 tokens
// (window i starts at i * T, so every held-out token but the first is predicted exactly once).
// Periodic evaluations use eval.windows of them, spread evenly and fixed for the run; the
// final one (and `loom eval`) uses all of them. Loss is reported in nats per token and, over
// the bytes of the predicted tokens, in nats and bits per byte (the same numbers for
// byte-level tokens; for BPE: total nats / total bytes of the evaluated text).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "loom/data/token_windows.h"
#include "loom/models/gpt/gpt.h"
#include "loom/train/recipe.h"

namespace loom::train {

// Writes checkpoints, metrics.jsonl and, at the end, eval.json with the held-out loss.
std::unique_ptr<Recipe> make_gpt_recipe(const Config& config);
// A step of `batch` sequences of `seq` tokens of `config`'s GPT, for the cost and memory models
// (gpt_spec.cpp).
plan::StepShape gpt_step_shape(std::string name, const models::GptConfig& config, int64_t batch,
                               int64_t seq);

struct LmEvalResult {
  int64_t windows = 0;
  int64_t tokens = 0;  // predicted tokens
  int64_t bytes = 0;   // bytes of the predicted tokens
  double nats = 0;     // summed cross-entropy
  double nats_per_token() const { return tokens > 0 ? nats / double(tokens) : 0.0; }
  double nats_per_byte() const { return bytes > 0 ? nats / double(bytes) : 0.0; }
  double bits_per_byte() const;
};

// The held-out loss of a GPT checkpoint directory (config.toml is read beside it);
// windows = 0: the whole held-out split, else that many evenly spread windows.
LmEvalResult eval_gpt(const std::string& ckpt_dir, int64_t windows = 0);

struct GptSampleOptions {
  std::string prompt;  // "": start after a newline (which is not part of the returned text)
  int64_t tokens = 200;
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 0;         // models::SampleOptions
  double top_p = 1.0;
  bool kv_cache = true;
  uint64_t seed = 0;
  std::string logits_npy;  // also write the prompt's logits (T, vocab) f32 here ("": no)
};

// A GPT checkpoint's weights with its run's config and tokenizer.
struct LoadedGpt {
  Config cfg;
  Tokenizer tok;
  std::unique_ptr<models::Gpt> model;
};
LoadedGpt load_gpt_checkpoint(const std::string& ckpt_dir, const char* what);

// Continues `prompt` with options.tokens tokens from a GPT checkpoint directory; returns the
// prompt and its continuation as text.
std::string sample_gpt(const std::string& ckpt_dir, const GptSampleOptions& options);

}  // namespace loom::train
