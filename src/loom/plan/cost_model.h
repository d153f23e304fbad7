// The analytic cost model of one training step: its FLOPs (for MFU) and a lower bound on the
// memory it needs (to refuse a run that cannot fit before anything is built), per model kind,
// and the machine's GEMM ceiling they are judged against. The planner builds on these.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/dtype.h"
#include "loom/models/dit/dit.h"
#include "loom/models/gpt/gpt.h"
#include "loom/models/vit/vit.h"

namespace loom::plan {

// A model and the shape of one training step of it (its global batch).
struct StepShape {
  std::string name{};       // what reports call it: "gpt2_124m", a run's name
  std::string kind{};       // "gpt", "dit" or "vit"
  models::GptConfig gpt{};  // kind gpt
  models::DitConfig dit{};  // kind dit
  models::VitConfig vit{};  // kind vit (the classifier)
  int64_t batch = 1;
  int64_t seq = 0;  // gpt: tokens per sequence
  int64_t items_per_step() const { return kind == "gpt" ? batch * seq : batch; }
  const char* unit() const { return kind == "gpt" ? "tok" : "img"; }
};

// A GPT step of batch x seq tokens, or a DiT / ViT step of batch images.
StepShape gpt_step(std::string name, const models::GptConfig& config, int64_t batch, int64_t seq);
StepShape dit_step(std::string name, const models::DitConfig& config, int64_t batch);
StepShape vit_step(std::string name, const models::VitConfig& config, int64_t batch);

// FLOPs of one training step (forward + backward = 3x the forward's matmul FLOPs, attention's
// two products included, causal attention counting only the keys each query sees); the
// non-matmul ops are left out. See docs/performance.md for the per-layer terms.
double train_step_flops(const StepShape& shape);

// What one process needs at the least: the full model's f32 weights (every process builds it
// whole before sharding) and its share of one batch (its data and, for the GPT, its logits,
// split over `tp`). A lower bound, so a run refused by it could never fit.
struct MemoryBound {
  double parameters = 0;
  double weight_bytes = 0;
  double local_batch = 0;  // samples on this process
  double batch_bytes = 0;
  double total_bytes() const { return weight_bytes + batch_bytes; }
};
MemoryBound memory_lower_bound(const StepShape& shape, int processes, int64_t tp);

// GFLOP/s of the best of a few square n x n x n GEMMs through Loom's matmul in `dtype`, at
// the calling thread's OpenMP thread count (or on `device`). `loom bench` uses n = 2048; the
// trainers' progress line a quicker 1024.
double measure_gemm_ceiling(DType dtype, int64_t n = 2048, Device device = cpu_device());

}  // namespace loom::plan
