#include "loom/data/sampler.h"

#include <numeric>
#include <string>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom {

Sampler::Sampler(int64_t dataset_size, int64_t batch_size, uint64_t seed, bool shuffle,
                 int64_t rank, int64_t world)
    : dataset_size_(dataset_size),
      batch_size_(batch_size),
      seed_(seed),
      shuffle_(shuffle),
      rank_(rank),
      world_(world) {
  LOOM_CHECK(dataset_size > 0) << "Sampler: dataset_size = " << dataset_size << ", expected > 0";
  LOOM_CHECK(batch_size > 0) << "Sampler: batch_size = " << batch_size << ", expected > 0";
  LOOM_CHECK(world > 0 && rank >= 0 && rank < world)
      << "Sampler: rank " << rank << " of world " << world << ", expected 0 <= rank < world";
  order_ = epoch_order(0);
}

std::vector<int64_t> Sampler::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!shuffle_) return order;
  const uint64_t key = RngKey{seed_, "sampler", "epoch " + std::to_string(epoch)}.hash();
  for (int64_t i = dataset_size_ - 1; i > 0; --i) {
    // 64 random bits from Philox counter i, mapped to [0, i] by a multiply-shift: unbiased to
    // within (i + 1) / 2^64 and exact for any dataset size (uniform_at's 24 bits are not).
    const auto r = philox4x32_10(uint64_t(i), 0, key);
    const uint64_t bits = uint64_t(r[0]) << 32 | r[1];
    const auto j = int64_t((unsigned __int128)bits * uint64_t(i + 1) >> 64);
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

std::vector<int64_t> Sampler::next_batch() {
  std::vector<int64_t> batch;
  batch.reserve(size_t(batch_size_));
  const int64_t global = batch_size_ * world_;
  for (int64_t k = 0; k < global; ++k) {
    if (k / batch_size_ == rank_) batch.push_back(order_[size_t(position_)]);
    if (++position_ == dataset_size_) {  // crossing into the next epoch mid-batch
      position_ = 0;
      order_ = epoch_order(++epoch_);
    }
  }
  return batch;
}

void Sampler::set_state(State state) {
  LOOM_CHECK(state.epoch >= 0 && state.position >= 0 && state.position < dataset_size_)
      << "Sampler::set_state: epoch " << state.epoch << ", position " << state.position
      << ", expected epoch >= 0 and 0 <= position < dataset_size = " << dataset_size_;
  if (state.epoch != epoch_) order_ = epoch_order(state.epoch);
  epoch_ = state.epoch;
  position_ = state.position;
}

}  // namespace loom
