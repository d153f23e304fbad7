// What several recipes do alike (declared in train/recipe.h).
#include "loom/data/sampler.h"
#include "loom/ops/ops.h"
#include "loom/train/recipe.h"

namespace loom::train {

std::unique_ptr<Sampler> shuffled_sampler(int64_t n, const Config& cfg, const RunContext& run) {
  return std::make_unique<Sampler>(n, cfg.train.batch_size / run.dp.size(), cfg.run.seed,
                                   /*shuffle=*/true, run.dp.rank(), run.dp.size());
}

Batch sampled_batch(Sampler& sampler, const Tensor& images, const Tensor& labels) {
  const std::vector<int64_t> idx = sampler.next_batch();
  const Tensor index = from_vector(idx, {int64_t(idx.size())});
  const Sampler::State next = sampler.state();  // where the data resumes after this batch
  NoGradGuard no_grad;
  return {index_select(images, 0, index),  // (B, C, H, W)
          index_select(labels, 0, index),  // (B)
          Json::object({{"sampler_epoch", next.epoch}, {"sampler_position", next.position}})};
}

void resume_sampler(Sampler& sampler, const Json& state) {
  sampler.set_state({state.at("sampler_epoch").as_int(), state.at("sampler_position").as_int()});
}

std::string parameter_count(int64_t total, int64_t active, const nn::MoeConfig& moe) {
  std::string out = std::to_string(total) + " parameters";
  if (moe.enabled())
    out += " (" + std::to_string(active) + " active per token: " + std::to_string(moe.experts) +
           " experts, top " + std::to_string(moe.top_k) + ")";
  return out;
}

parallel::NamedTensors trained_weights(parallel::ParallelModel& model) {
  std::vector<Tensor> values;
  for (const auto& p : model.pieces()) values.push_back(p.value);
  return model.gather_full(values);
}

}  // namespace loom::train
