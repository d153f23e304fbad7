// Writes a small Loom DiT run for tests/reference/dit_reference.py to recompute in PyTorch:
// initial weights, a fixed flow-matching batch, the step-0 loss and gradients, and the losses
// of 20 AdamW steps on that batch (see reference_driver.h for the files).
//
//   reference_dit_driver OUT_DIR    ->  OUT_DIR/cases.json, OUT_DIR/<case>/...
//
// Two cases:
//   init       the weights exactly as init_parameters() leaves them. adaLN-Zero makes the
//              model the zero function there, so most step-0 gradients are exactly zero;
//              the 20-step curve is what tests this case.
//   perturbed  the same, with every all-zero parameter (the adaLN modulations, the final
//              layer, all biases) redrawn from N(0, 0.3^2), so every block, the attention and
//              the MLP carry non-zero gradients at step 0.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "loom/models/dit/dit.h"
#include "reference_driver.h"

namespace {

using namespace loom;

constexpr uint64_t kSeed = 1234;

models::DitConfig small_config() {
  models::DitConfig c;
  c.image_size = 8;
  c.channels = 2;  // > 1 so the channel order of patchify and unpatchify is checked too
  c.patch = 2;
  c.width = 32;
  c.depth = 2;
  c.heads = 2;
  c.mlp_ratio = 4.0;
  c.num_classes = 3;  // label 3 is the null class
  return c;
}

void write_case(const std::string& dir, bool perturb) {
  const models::DitConfig c = small_config();
  models::Dit model(c);
  model.init_parameters(kSeed);
  if (perturb) reference::perturb_zero_parameters(model, kSeed);

  // The fixed batch: x0 in [-1, 1], eps ~ N(0, 1), t in (0.02, 0.98), labels with the null class.
  const int64_t B = 8;
  const Shape image{B, c.channels, c.image_size, c.image_size};
  Tensor x0 = Tensor::empty(image), eps = Tensor::empty(image), u = Tensor::empty({B});
  fill_uniform(x0, RngKey{kSeed, "reference.x0", ""}, 0, -1.0f, 1.0f);
  fill_normal(eps, RngKey{kSeed, "reference.eps", ""});
  fill_uniform(u, RngKey{kSeed, "reference.t", ""}, 0, 0.02f, 0.98f);
  std::vector<int64_t> y_values;
  for (int64_t i = 0; i < B; ++i) y_values.push_back(i % (c.num_classes + 1));
  Tensor t = u, y = from_vector(y_values, {B});
  write_npy(dir + "/x0.npy", x0);
  write_npy(dir + "/eps.npy", eps);
  write_npy(dir + "/t.npy", t);
  write_npy(dir + "/labels.npy", y);

  // Exactly flow_matching_loss (diffusion/flow_matching.cpp) with the draws given:
  // x_t = x0 + t (eps - x0), loss = mse(velocity(x_t, t, y), eps - x0).
  auto loss = [&]() {
    Tensor target = sub(eps, x0);
    Tensor xt = add(x0, mul(reshape(t, {B, 1, 1, 1}), target));
    return mse(model.forward(xt, t, y), target);
  };

  Json meta = Json::object(
      {{"model", "dit"},
       {"case", perturb ? "perturbed" : "init"},
       {"seed", kSeed},
       {"config", Json::object({{"image_size", c.image_size},
                                {"channels", c.channels},
                                {"patch", c.patch},
                                {"width", c.width},
                                {"depth", c.depth},
                                {"heads", c.heads},
                                {"mlp_ratio", c.mlp_ratio},
                                {"num_classes", c.num_classes}})},
       {"batch",
        Json::object(
            {{"x0", "x0.npy"}, {"eps", "eps.npy"}, {"t", "t.npy"}, {"labels", "labels.npy"}})}});
  reference::write_reference_case(dir, model, meta, loss, reference::TrainSpec{});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::string out = argv[1];
    std::filesystem::create_directories(out + "/init");
    std::filesystem::create_directories(out + "/perturbed");
    write_case(out + "/init", false);
    write_case(out + "/perturbed", true);
    write_json_file(
        out + "/cases.json",
        Json::object({{"model", "dit"}, {"cases", Json::array({"init", "perturbed"})}}));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reference_dit_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
