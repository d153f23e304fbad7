// Deterministic, shuffled, resumable sampler of dataset indices.
//
// The sample stream is the concatenation of epoch permutations: epoch e's order is a
// Fisher-Yates shuffle driven by Philox keyed by (seed, "sampler", e), so it depends only on
// (seed, epoch) and never on what was drawn before (DESIGN rule 2). Batches are consecutive
// slices of that stream; a batch that reaches the end of an epoch continues with the next
// epoch's permutation, so no sample is dropped or repeated within an epoch.
//
// Data parallelism: with (rank, world), each step consumes one global batch of
// batch_size * world consecutive stream entries, and rank r takes the r-th slice of it,
// entries r * batch_size .. (r + 1) * batch_size - 1 (so global sample index = r * batch_size
// + local index, the index per-sample randomness is keyed by). The ranks together cover the global
// batch exactly once, the state (epoch, position) is the same on every rank, and the global batch
// equals what a single rank with batch_size * world would draw -- so a run can resume on a
// different world size with the same global batch and see the same data.
#pragma once
#include <cstdint>
#include <vector>

namespace loom {

class Sampler {
 public:
  // shuffle = false gives the identity order 0..N-1 every epoch (evaluation).
  Sampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle = true,
          int64_t rank = 0, int64_t world = 1);

  // The next batch_size indices for this rank.
  std::vector<int64_t> next_batch();

  // Where the next global batch starts: index `position` of epoch `epoch`'s permutation.
  struct State {
    int64_t epoch = 0;
    int64_t position = 0;
    bool operator==(const State&) const = default;
  };
  State state() const { return {epoch_, position_}; }
  void set_state(State state);

  int64_t dataset_size() const { return dataset_size_; }
  int64_t batch_size() const { return batch_size_; }

  // The order of epoch `epoch` (exposed for tests and tools; next_batch() uses it).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  int64_t dataset_size_, batch_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t rank_, world_;
  int64_t epoch_ = 0, position_ = 0;
  std::vector<int64_t> order_;  // epoch_order(epoch_), cached
};

}  // namespace loom
