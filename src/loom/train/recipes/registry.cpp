// The model kinds `loom train` knows, by model.kind. Adding one: its network in a folder under
// models/, its recipe and spec in a file here (train/model_spec.h says what a spec holds), and
// one line below (docs/architecture.md, "How to add a model kind").
#include <array>

#include "loom/core/rng.h"
#include "loom/ops/creation.h"
#include "loom/train/config.h"
#include "loom/train/recipe.h"
#include "loom/train/recipes/specs.h"

namespace loom::train {

namespace {

const std::array<const ModelSpec*, 6> kSpecs = {&kDitSpec,       &kGptSpec,   &kVitClassifierSpec,
                                                &kDitRouterSpec, &kMmditSpec, &kAutoencoderSpec};

}  // namespace

const ModelSpec& model_spec(ModelKind kind) {
  for (const ModelSpec* s : kSpecs)
    if (s->kind == kind) return *s;
  LOOM_FAIL() << "model kind " << int(kind) << " has no spec in the registry";
  return *kSpecs[0];
}

const ModelSpec& model_spec(const std::string& name, const std::string& what) {
  for (const ModelSpec* s : kSpecs)
    if (name == s->name) return *s;
  LOOM_FAIL() << what << ": model.kind '" << name << "' is not known (expected "
              << model_kind_names() << ")";
  return *kSpecs[0];
}

std::vector<const ModelSpec*> model_specs() {
  return {kSpecs.begin(), kSpecs.end()};
}

std::string model_kind_names() {
  std::string names;
  for (size_t i = 0; i < kSpecs.size(); ++i)
    names += (i == 0 ? "" : i + 1 == kSpecs.size() ? " or " : ", ") + std::string(kSpecs[i]->name);
  return names;
}

std::unique_ptr<Recipe> make_recipe(const Config& config) {
  return config.spec().make_recipe(config);
}

std::unique_ptr<nn::Module> make_bare_model(const Config& config) {
  return config.spec().bare_model(config);
}

nn::ParallelPlan bare_model_plan(const Config& config, const nn::Module& bare_model) {
  return config.spec().plan_of(bare_model);
}

plan::StepShape step_shape(const Config& config, int64_t samples) {
  return config.spec().step_shape(config, samples, 0);
}

Tensor synthetic_ids(const Shape& shape, int64_t n, const std::string& name) {
  const uint64_t key = RngKey{1, "bench.data", name}.hash();
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    ids[size_t(i)] = std::min(n - 1, int64_t(uniform_at(key, uint64_t(i)) * float(n)));
  return from_vector(ids, shape);
}

}  // namespace loom::train
