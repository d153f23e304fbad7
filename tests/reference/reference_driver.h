// Shared part of the reference drivers (tests/reference/*_driver.cpp): each driver builds a
// Loom model, fixes a batch and a loss closure, and hands them to write_reference_case(), which
// writes everything an independent PyTorch implementation needs to recompute the run:
//
//   <dir>/meta.json               model name + config, optimiser hyper-parameters, and every
//                                 parameter's name, shape and weight-decay flag (in
//                                 named_parameters() order)
//   <dir>/weights.safetensors     the initial weights
//   <dir>/grads.safetensors       d loss / d parameter at the initial weights (before clipping)
//   <dir>/step_grads.safetensors  "<name>@<step>": the gradient each of the `steps` AdamW
//                                 updates used, i.e. after clipping (absent where a parameter
//                                 had none), so the reference can replay the optimiser alone
//                                 on Loom's gradients
//   <dir>/losses.npy              (steps) f32: the loss before each of `steps` AdamW updates
//   <dir>/grad_norms.npy          (steps) f32: the global gradient L2 norm before each update,
//                                 as optim::clip_grad_norm measured it (before clipping)
//   <dir>/final_weights.safetensors  the weights after those updates
//
// Each step is the trainer's step (train/trainer.cpp): loss,
// backward, clip_grad_norm(model.parameters(), grad_clip), AdamW step at schedule.lr_at(step),
// zero_grad. The batch itself is the driver's business (it writes its own .npy files and names
// them in the "batch" entry of meta.json).
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/checkpoint/safetensors.h"
#include "loom/core/json_file.h"
#include "loom/data/npy.h"
#include "loom/nn/module.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"
#include "loom/optim/schedule.h"

namespace loom::reference {

struct TrainSpec {
  int64_t steps = 20;
  optim::AdamWConfig adamw{1e-3, 0.9, 0.999, 1e-8, 0.01};
  double grad_clip = 0.0;  // train.grad_clip: > 0 clips the global gradient norm to it
  // The learning rate of each step. As train/config.cpp does, its lr is adamw.lr and its
  // total_steps is `steps` (both set by write_reference_case); the rest is the driver's choice.
  optim::LrSchedule schedule{optim::LrSchedule::Kind::Constant};
};

// Every all-zero parameter (adaLN-Zero's modulations, zero-initialised output layers, biases)
// redrawn from N(0, 0.3^2), so every part of the model carries gradients at step 0.
inline void perturb_zero_parameters(const nn::Module& model, uint64_t seed) {
  NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) {
    bool all_zero = true;
    for (float v : to_vector(p.tensor)) all_zero = all_zero && v == 0.0f;
    if (all_zero) fill_normal(p.tensor, RngKey{seed, "reference.perturb", p.name}, 0, 0.0f, 0.3f);
  }
}

inline std::vector<std::pair<std::string, Tensor>> named_values(const nn::Module& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.name, p.tensor.detach());
  return out;
}

// `meta` is the driver's description (at least "model", "config" and "batch"); the training
// hyper-parameters and the parameter list are added here. `loss` computes the scalar training
// loss from the model's current weights, recording autograd.
inline void write_reference_case(const std::string& dir, const nn::Module& model, Json meta,
                                 const std::function<Tensor()>& loss, const TrainSpec& spec) {
  std::filesystem::create_directories(dir);
  const auto params = model.named_parameters();
  Json plist = Json::array();
  for (const auto& p : params) {
    Json shape = Json::array();
    for (int64_t s : p.tensor.shape()) shape.push_back(s);
    plist.push_back(
        Json::object({{"name", p.name}, {"shape", shape}, {"weight_decay", p.weight_decay}}));
  }
  const auto& a = spec.adamw;
  optim::LrSchedule schedule = spec.schedule;
  schedule.lr = a.lr;
  schedule.total_steps = spec.steps;
  schedule.validate();
  Json lrs = Json::array();
  for (int64_t step = 0; step < spec.steps; ++step) lrs.push_back(schedule.lr_at(step));
  meta.set("train",
           Json::object({{"steps", spec.steps},
                         {"optimizer", "adamw"},
                         {"lr", a.lr},
                         {"beta1", a.beta1},
                         {"beta2", a.beta2},
                         {"eps", a.eps},
                         {"weight_decay", a.weight_decay},
                         {"grad_clip", spec.grad_clip},
                         {"schedule", Json::object({{"kind", optim::name_of(schedule.kind)},
                                                    {"warmup_steps", schedule.warmup_steps},
                                                    {"min_lr_ratio", schedule.min_lr_ratio},
                                                    {"decay_fraction", schedule.decay_fraction}})},
                         {"lrs", lrs}}));
  meta.set("parameters", plist);
  save_safetensors(dir + "/weights.safetensors", named_values(model));

  optim::AdamW opt(params, spec.adamw);
  opt.zero_grad();
  std::vector<float> losses, grad_norms;
  std::vector<std::pair<std::string, Tensor>> step_grads;
  for (int64_t step = 0; step < spec.steps; ++step) {
    Tensor l = loss();
    losses.push_back(item(l));
    backward(l);
    if (step == 0) {
      std::vector<std::pair<std::string, Tensor>> grads;
      for (const auto& p : params) {
        Tensor g = p.tensor.grad();
        // A parameter the loss does not reach has no gradient: its reference gradient is 0.
        grads.emplace_back(p.name, g.defined() ? g.detach() : zeros(p.tensor.shape()));
      }
      save_safetensors(dir + "/grads.safetensors", grads);
    }
    grad_norms.push_back(float(optim::clip_grad_norm(model.parameters(), spec.grad_clip)));
    for (const auto& p : params) {
      Tensor g = p.tensor.grad();
      if (g.defined())  // a copy: the optimiser must not see (or change) what is recorded
        step_grads.emplace_back(p.name + "@" + std::to_string(step),
                                from_vector(to_vector(g), g.shape()));
    }
    opt.step(schedule.lr_at(step));
    opt.zero_grad();
  }
  save_safetensors(dir + "/step_grads.safetensors", step_grads);
  write_npy(dir + "/losses.npy", from_vector(losses, {int64_t(losses.size())}));
  write_npy(dir + "/grad_norms.npy", from_vector(grad_norms, {int64_t(grad_norms.size())}));
  save_safetensors(dir + "/final_weights.safetensors", named_values(model));
  write_json_file(dir + "/meta.json", meta);  // last: its presence marks a complete case
}

}  // namespace loom::reference
