// The model kinds `loom train` knows, by model.kind: adding one is a model folder, a recipe
// file and a row here.
#include <array>

#include "loom/models/dit/dit.h"
#include "loom/models/gpt/gpt.h"
#include "loom/models/vit/vit.h"
#include "loom/train/recipes/dit.h"
#include "loom/train/recipes/dit_experts.h"
#include "loom/train/recipes/gpt.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

namespace {

struct Registered {
  const char* kind;
  std::unique_ptr<Recipe> (*make)(const Config&);
  std::unique_ptr<nn::Module> (*bare_model)(const Config&);
  nn::ParallelPlan (*plan_of)(const nn::Module& bare_model);
  std::vector<std::string> piece_states;
  plan::StepShape (*step_shape)(const Config&, int64_t samples);
};

const std::array<Registered, 4> kRecipes = {{
    {"dit",
     make_dit_recipe,
     [](const Config& c) -> std::unique_ptr<nn::Module> {
       return std::make_unique<models::Dit>(c.dit);
     },
     [](const nn::Module& m) { return static_cast<const models::Dit&>(m).parallel_plan(); },
     {"ema"},
     [](const Config& c, int64_t images) { return plan::dit_step(c.run.name, c.dit, images); }},
    {"gpt",
     make_gpt_recipe,
     [](const Config& c) -> std::unique_ptr<nn::Module> {
       return std::make_unique<models::Gpt>(c.gpt);
     },
     [](const nn::Module& m) { return static_cast<const models::Gpt&>(m).parallel_plan(); },
     {},
     [](const Config& c, int64_t windows) {
       return plan::gpt_step(c.run.name, c.gpt, windows, c.gpt.context);
     }},
    {"vit_classifier",
     make_vit_classifier_recipe,
     [](const Config& c) -> std::unique_ptr<nn::Module> {
       return std::make_unique<models::Vit>(c.vit);
     },
     [](const nn::Module& m) { return vit_plan(static_cast<const models::Vit&>(m)); },
     {},
     [](const Config& c, int64_t images) { return plan::vit_step(c.run.name, c.vit, images); }},
    {"dit_router",
     make_dit_router_recipe,
     [](const Config& c) -> std::unique_ptr<nn::Module> {
       return std::make_unique<models::Vit>(c.vit);
     },
     [](const nn::Module& m) { return vit_plan(static_cast<const models::Vit&>(m)); },
     {},
     [](const Config& c, int64_t images) { return plan::vit_step(c.run.name, c.vit, images); }},
}};

const Registered& registered(const std::string& kind) {
  std::string known;
  for (const Registered& r : kRecipes) {
    if (kind == r.kind) return r;
    known += (known.empty() ? "" : ", ") + std::string(r.kind);
  }
  LOOM_FAIL() << "model.kind '" << kind << "' has no recipe (known: " << known << ")";
  return kRecipes[0];
}

}  // namespace

std::unique_ptr<Recipe> make_recipe(const Config& config) {
  return registered(config.model_kind).make(config);
}

std::unique_ptr<nn::Module> make_bare_model(const Config& config) {
  return registered(config.model_kind).bare_model(config);
}

nn::ParallelPlan bare_model_plan(const Config& config, const nn::Module& bare_model) {
  return registered(config.model_kind).plan_of(bare_model);
}

std::vector<std::string> recipe_piece_states(const std::string& model_kind) {
  return registered(model_kind).piece_states;
}

plan::StepShape step_shape(const Config& config, int64_t samples) {
  return registered(config.model_kind).step_shape(config, samples);
}

}  // namespace loom::train
