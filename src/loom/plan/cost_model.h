// The analytic cost model of one training step: its FLOPs (for MFU) and a lower bound on the
// memory it needs (to refuse a run that cannot fit before anything is built), from a step's
// shape, and the machine's GEMM ceiling they are judged against. The planner builds on these.
#pragma once
#include <cstdint>
#include <string>

#include "loom/core/device.h"
#include "loom/core/dtype.h"

namespace loom::plan {

// What one block of a model keeps for backward, per token, in f32 values (the memory model's
// counts; each model kind's spec counts its own, see plan/memory_model.cpp): `whole` is
// replicated over tensor-parallel ranks (norms and their inputs, row-parallel outputs), `split`
// divides by tp (projections' outputs, attention's output and log-sum-exp, the MLP's hidden
// values). Also what the last stage holds after the blocks at its peak (the head's backward).
struct BlockValues {
  double whole = 0, split = 0;
  double qkv = 0;           // q, k and v per token (context parallelism copies them)
  double matmul_split = 0;  // of `split`, the projections' and attention's outputs
  double mlp_backward = 0;  // the MLP's largest transient in backward (split)
  double width = 0;
  double tokens = 0;                     // per sample (sequence or image)
  double head = 0, head_vocabulary = 0;  // the head's peak: whole, and split with the vocabulary
};

// A model and the shape of one training step of it (its global batch), in the terms the cost
// and memory models use: no model kind is known here, each kind's spec fills one in
// (train/model_spec.h).
struct StepShape {
  std::string name{};            // what reports call it: "gpt2_124m", a run's name
  const char* unit = "img";      // what the throughput counts: "tok" or "img"
  int64_t batch = 1;             // samples
  int64_t items_per_sample = 1;  // the unit per sample: a sequence's tokens, or 1 image
  // The forward pass's matmul FLOPs per sample (attention's two products included, causal
  // attention counting only the keys each query sees); the non-matmul ops are left out.
  double forward_flops = 0;
  double parameters = 0;          // about the model's parameters (the memory lower bound)
  double sample_bytes = 0;        // one sample's data on a process
  double split_sample_bytes = 0;  // per sample, what splits over tp (a vocabulary's logits)
  BlockValues values;
  std::string not_counted{};  // what the activation counts leave out ("": nothing)
  int64_t items_per_step() const { return batch * items_per_sample; }
};

// Forward FLOPs of a pre-norm transformer block per token: the projections (qkv of `qkv_out`
// features, the output projection, the MLP's two matrices of `mlp_hidden`) and attention's
// two products 2 * 2 * keys * C, keys being the keys one query sees (on average).
double block_flops_per_token(double C, double mlp_hidden, double qkv_out, double keys);

// FLOPs of one training step: forward + backward = 3x the forward's matmul FLOPs. See
// docs/performance.md for the per-layer terms.
double train_step_flops(const StepShape& shape);

// What one process needs at the least: its share of the model's state -- f32 weights,
// gradients and the two AdamW moments, split over tp x pp, and over dp_shard as far as the ZeRO
// stage shards them (stage 1 the moments, 2 also the gradients, 3 also the weights) -- and its
// share of one batch (its data and, for the GPT, its logits, split over tp). A lower bound (the
// pipeline's ends hold more than an even share), so a run refused by it could never fit.
struct MemoryBound {
  double parameters = 0;
  double state_bytes = 0;  // weights + gradients + moments on one process
  double local_batch = 0;  // samples on this process
  double batch_bytes = 0;
  double total_bytes() const { return state_bytes + batch_bytes; }
};
// tp, pp, dp_shard: the degrees; zero_stage 0 for DDP or one replica.
MemoryBound memory_lower_bound(const StepShape& shape, int processes, int64_t tp, int64_t pp,
                               int64_t dp_shard, int zero_stage);

// GFLOP/s of the best of a few square n x n x n GEMMs through Loom's matmul in `dtype`, at
// the calling thread's OpenMP thread count (or on `device`). `loom bench` uses n = 2048; the
// trainers' progress line a quicker 1024.
double measure_gemm_ceiling(DType dtype, int64_t n = 2048, Device device = cpu_device());

// What a training run's MFU is judged against, measured once at its start: the GEMM ceiling in
// its compute dtype (a quick n = 1024 on the host, 256 upwards on a GPU) and, on the host, the
// hardware peak (plan/hardware_peak.h; 0 on a GPU).
struct MfuYardsticks {
  double gemm_gflops = 0, peak_gflops = 0;
};
MfuYardsticks measure_mfu_yardsticks(DType dtype, Device device);

}  // namespace loom::plan
