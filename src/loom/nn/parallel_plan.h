// What a model tells parallelism applied from outside about its structure: which Linear layers
// may be split column- or row-wise, which attention modules may split their heads, which
// blocks form the region that may run on sequence shards, and what a pipeline's first and
// last stages hold besides blocks. The model only names its modules;
// parallel/tensor_parallel.h does the splitting.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

namespace loom::nn {

struct ParallelPlan {
  std::vector<std::string> attention;  // nn::Attention: heads split (qkv column-, proj row-wise)
  // nn::Mamba2: heads and their groups split (in_proj's parts and the convolution by channel,
  // the per-head parameters by head, out_proj row-wise).
  std::vector<std::string> ssm;
  // nn::LatentAttention: heads split (q's and kv_up's rows by head, proj row-wise); the latents'
  // projections and norms whole on every rank, their gradients from its own heads (summed).
  std::vector<std::string> latent_attention;
  std::vector<std::string> column;  // nn::Linear: output features split, input replicated
  std::vector<std::string> row;     // nn::Linear: input features split, output summed
  // Parameters applied to every head alike inside an attention whose heads split (QK-norm's
  // weights): whole on every rank, each rank's gradient from its own heads only (summed).
  std::vector<std::string> per_head;
  // The blocks, in order: with sequence parallelism the residual stream (each block's first
  // input) is split along sequence_dim from the first block's input to the last one's output;
  // the blocks' other inputs (conditioning) stay whole.
  std::vector<std::string> blocks;
  int64_t sequence_dim = 1;
  // Set by parallelism, not by models: where `blocks` falls into separately run stretches (a
  // pipeline rank's chunks) -- the index of each stretch's first block after the first. Each
  // stretch is a sequence-split region of its own.
  std::vector<size_t> stretch_starts;
  bool stretch_starts_at(size_t i) const {
    return i == 0 ||
           std::find(stretch_starts.begin(), stretch_starts.end(), i) != stretch_starts.end();
  }
  // Vocabulary parallelism (with tensor parallelism): the token embedding (nn::Embedding) whose
  // rows split over the vocabulary and the output head with the same split (an nn::Linear, or
  // an nn::TiedProjection of that embedding); the loss then takes the split logits without
  // gathering them. Empty: embeddings and head stay whole.
  std::string vocab_embedding, vocab_head;
  // The loss module (nn::CrossEntropy), or empty.
  std::string loss;
  // The model's forward takes any of the sequence's rows with their global positions and its
  // loss averages over the rows it gets (GPT): context parallelism gives each rank its rows from
  // the input on and averages the ranks' losses. Otherwise (DiT) it splits the sequence from
  // the first block's input to the last block's output only.
  bool sequence_shards = false;
  // A stream of segments (MMDiT: the caption's rows, then the image's), position-free and
  // attended bidirectionally: context parallelism gives each rank chunk r of every segment, in
  // segment order, so each rank's rows hold the segments in the same proportion as the whole.
  // Empty: one sequence.
  std::vector<int64_t> sequence_segments;
  // Modules inside the blocks whose input is another segment's rows, needed whole
  // (cross-attention's keys and values from the caption): context parallelism gathers it.
  std::vector<std::string> context_inputs;
  // Pipeline parallelism: the direct children the first stage uses before the blocks
  // (embeddings) and the last stage after them (final norm, head). A module in both (a tied
  // embedding) is held by both ends, its gradient summed between them. Every parameter must
  // lie in a block or in one of these.
  std::vector<std::string> first_stage, last_stage;
};

}  // namespace loom::nn
