#include "loom/train/moe_balance.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "loom/core/json_file.h"
#include "loom/train/recipe.h"

namespace loom::train {

namespace {

void load_selection_biases_into(const std::vector<std::pair<std::string, nn::MoE*>>& layers,
                                const Json& trainer_state) {
  LOOM_CHECK(trainer_state.contains("moe_selection_bias"))
      << "checkpoint: its trainer_state.json has no moe_selection_bias (it was not written by a "
         "run with "
      << "this mixture of experts)";
  const Json& biases = trainer_state.at("moe_selection_bias");
  for (const auto& [path, moe] : layers) {
    LOOM_CHECK(biases.contains(path)) << "checkpoint: no selection bias for " << path;
    const Json::Array& values = biases.at(path).as_array();
    LOOM_CHECK(int64_t(values.size()) == moe->config.experts)
        << "checkpoint: " << values.size() << " selection biases for the " << moe->config.experts
        << " experts of " << path;
    for (size_t e = 0; e < values.size(); ++e)
      moe->selection_bias[e] = float(values[e].as_double());
  }
}

}  // namespace

MoeBalance::MoeBalance(nn::Module& model, std::vector<dist::ProcessGroup*> token_groups,
                       double loss_scale, dist::ProcessGroup* workers)
    : layers_(nn::moe_layers(model)),
      whole_(whole_layers(model)),
      token_groups_(std::move(token_groups)),
      workers_(workers && workers->size() > 1 ? workers : nullptr) {
  for (auto& [path, moe] : layers_) moe->loss_scale = loss_scale;
}

MoeBalance::Layers MoeBalance::whole_layers(nn::Module& model) {
  Layers out;
  for (const auto& [path, moe] : nn::moe_layers(model)) out.emplace_back(path, moe->config.experts);
  return out;
}

namespace {

std::vector<dist::ProcessGroup*> token_groups_of(const dist::DeviceMesh& mesh,
                                                 bool sequence_parallel, bool diloco) {
  std::vector<dist::ProcessGroup*> groups = {mesh.group(diloco ? "dp_shard" : "dp").get()};
  if (sequence_parallel && mesh.degree("tp") > 1) groups.push_back(mesh.group("tp").get());
  if (mesh.degree("cp") > 1) groups.push_back(mesh.group("cp").get());
  return groups;
}

}  // namespace

MoeBalance::MoeBalance(nn::Module& model, const dist::DeviceMesh& mesh, bool sequence_parallel,
                       int64_t grad_accum, bool diloco, Layers whole)
    : MoeBalance(model, token_groups_of(mesh, sequence_parallel, diloco),
                 1.0 / double(grad_accum) /
                     double(sequence_parallel && mesh.degree("tp") > 1 ? mesh.degree("tp") : 1) /
                     double(mesh.degree("cp")),
                 diloco ? mesh.group("dp_replicate").get() : nullptr) {
  whole_ = std::move(whole);
  if (mesh.degree("pp") > 1) stages_ = mesh.group("pp").get();
}

void MoeBalance::begin_step() {
  for (auto& [path, moe] : layers_) moe->reset_stats();
}

void MoeBalance::end_step(bool updated) {
  if (layers_.empty()) return;  // (a pipeline stage of dense blocks only)
  // One exchange for every layer: its loads, then its loss and entropy sums and forwards.
  std::vector<double> local;
  for (auto& [path, moe] : layers_) {
    const nn::MoeStats& s = moe->stats();
    for (int64_t n : s.load) local.push_back(double(n));
    local.insert(local.end(), {s.aux_loss, s.z_loss, s.entropy, double(s.forwards)});
  }
  std::vector<double> all = local;
  for (dist::ProcessGroup* g : token_groups_) all = sum_over(*g, all);
  metrics_ = Json::object();
  Json layers = Json::object();
  size_t at = 0;
  double ratio_sum = 0, aux_sum = 0;
  for (auto& [path, moe] : layers_) {
    const int64_t E = moe->config.experts;
    const std::vector<double> load(all.begin() + long(at), all.begin() + long(at) + E);
    at += size_t(E);
    const double aux = all[at], z = all[at + 1], entropy = all[at + 2];
    const double forwards = std::max(all[at + 3], 1.0);
    at += 4;
    double total = 0, top = 0;
    Json::Array counts;
    for (double n : load) {
      total += n;
      top = std::max(top, n);
      counts.push_back(Json(int64_t(n)));
    }
    const double ratio = total > 0 ? top / (total / double(E)) : 0.0;
    ratio_sum += ratio;
    aux_sum += aux / forwards;
    layers.set(path, Json::object({{"load", Json::array(std::move(counts))},
                                   {"max_over_mean", ratio},
                                   {"aux_loss", aux / forwards},
                                   {"z_loss", z / forwards},
                                   {"entropy", entropy / forwards}}));
    if (updated && moe->config.bias_rate > 0) moe->update_selection_bias(load);
  }
  max_over_mean_ = ratio_sum / double(layers_.size());
  aux_ = aux_sum / double(layers_.size());
  metrics_.set("max_over_mean", max_over_mean_);
  metrics_.set("layers", layers);
}

std::string MoeBalance::summary() const {
  if (!active()) return "";
  char line[96];
  std::snprintf(line, sizeof line, "moe load max/mean %.2f, aux %.3f", max_over_mean_, aux_);
  return line;
}

void MoeBalance::average_over_workers() {
  const bool moving = std::any_of(layers_.begin(), layers_.end(), [](const auto& layer) {
    return layer.second->config.bias_rate > 0;
  });
  if (!workers_ || !moving || layers_.empty()) return;  // none here, or biases that never move
  std::vector<double> sums;
  for (auto& [path, moe] : layers_)
    for (float b : moe->selection_bias) sums.push_back(double(b));
  sums = sum_over(*workers_, sums);
  size_t at = 0;
  for (auto& [path, moe] : layers_)
    for (float& b : moe->selection_bias) b = float(sums[at++] / double(workers_->size()));
}

Json MoeBalance::state() const {
  if (!active()) return Json();
  // Every worker's biases of every layer of the whole model: gathered by sums in which each
  // rank fills its own slots (its worker's, under DiLoCo; its stage's layers, under a
  // pipeline).
  std::map<std::string, const nn::MoE*> here(layers_.begin(), layers_.end());
  size_t count = 0;
  for (const auto& [path, experts] : whole_) count += size_t(experts);
  const size_t workers = workers_ ? size_t(workers_->size()) : 1;
  std::vector<double> slots(workers * count, 0.0);
  size_t at = workers_ ? size_t(workers_->rank()) * count : 0;
  for (const auto& [path, experts] : whole_) {
    const auto it = here.find(path);
    if (it != here.end()) {
      const std::vector<float>& bias = it->second->selection_bias;
      for (size_t e = 0; e < bias.size(); ++e) slots[at + e] = double(bias[e]);
    }
    at += size_t(experts);
  }
  if (stages_) slots = sum_over(*stages_, slots);
  if (workers_) slots = sum_over(*workers_, slots);
  Json::Array per_worker;
  at = 0;
  for (size_t w = 0; w < workers; ++w) {
    Json biases = Json::object();
    for (const auto& [path, experts] : whole_) {
      Json::Array values;
      for (int64_t e = 0; e < experts; ++e) values.push_back(Json(slots[at++]));
      biases.set(path, Json::array(std::move(values)));
    }
    per_worker.push_back(biases);
  }
  Json state = Json::object({{"moe_selection_bias", per_worker[0]}});
  if (workers_) state.set("moe_selection_bias_workers", Json::array(std::move(per_worker)));
  return state;
}

void MoeBalance::resume(const Json& trainer_state) {
  if (!active()) return;
  const Json* all = trainer_state.find("moe_selection_bias_workers");
  if (!workers_ || all == nullptr) return load_selection_biases_into(layers_, trainer_state);
  // Another worker count: worker m continues the checkpoint's worker m mod its count.
  LOOM_CHECK(all->size() > 0) << "checkpoint: no DiLoCo worker's selection biases";
  load_selection_biases_into(
      layers_,
      Json::object({{"moe_selection_bias", all->at(size_t(workers_->rank()) % all->size())}}));
}

void load_selection_biases(nn::Module& model, const std::string& ckpt_dir) {
  const auto layers = nn::moe_layers(model);
  if (!layers.empty())
    load_selection_biases_into(layers, read_json_file(ckpt_dir + "/trainer_state.json"));
}

}  // namespace loom::train
