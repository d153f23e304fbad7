// Decentralized diffusion experts (McAllister et al. 2025), steps two and three: a router, a
// time-conditioned ViT trained to tell from a noisy image x_t (and t) which cluster of `loom
// cluster` it comes from (model.kind dit_router), and sampling from the experts -- K DiTs, each
// trained in isolation on one cluster -- as one model: the velocity at (x_t, t) is the
// router's mixture of the experts' velocities, over all of them (full), the likeliest one
// (top1) or the likeliest two, renormalised (top2).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/diffusion/flow_matching.h"
#include "loom/models/dit/dit.h"
#include "loom/models/vit/vit.h"
#include "loom/train/recipe.h"

namespace loom::train {

std::unique_ptr<Recipe> make_dit_router_recipe(const Config& config);

enum class Routing { Full, Top1, Top2 };
Routing routing_from_name(const std::string& name);  // full, top1, top2
const char* name_of(Routing routing);

struct Experts {
  std::unique_ptr<models::Vit> router;
  std::vector<std::unique_ptr<models::Dit>> experts;  // experts[k]: trained on cluster k
  models::DitConfig dit;                              // what they share
};

// The router's checkpoint and one expert checkpoint per cluster (any order): each expert's
// data.clusters must be the router's, their data.cluster values 0..K-1 once each, their
// models alike. Each one clear error otherwise.
Experts load_experts(const std::string& router_ckpt, const std::vector<std::string>& expert_ckpts);

// Router weights (B, K) at (x_t, t) -- and the class labels being sampled, for a router told
// them (model.labels) -- for the routing: softmax, or its top 1 / 2 renormalised.
Tensor routing_weights(const models::Vit& router, const Tensor& xt, const Tensor& t,
                       const Tensor& labels, Routing routing);
diffusion::VelocityFn mixture_velocity(const Experts& experts, Routing routing);

}  // namespace loom::train
