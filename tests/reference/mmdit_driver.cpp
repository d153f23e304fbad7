// Writes a small Loom MMDiT run for tests/reference/mmdit_reference.py to recompute in PyTorch:
// initial weights, a fixed flow-matching batch with captions, the step-0 loss and gradients, and
// the losses of 20 AdamW steps on that batch (see reference_driver.h for the files).
//
//   reference_mmdit_driver OUT_DIR    ->  OUT_DIR/cases.json, OUT_DIR/<case>/...
//
// Three cases, as the DiT's two: "init" (adaLN-Zero makes the model the zero function: the
// 20-step curve tests it) and "perturbed" (every all-zero parameter redrawn from N(0, 0.3^2), so
// both streams, the joint attention, QK-norm and the text encoder carry gradients at step 0);
// and "cross", perturbed, with PixArt's cross-attention blocks (model.conditioning "cross").
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "loom/models/mmdit/mmdit.h"
#include "reference_driver.h"

namespace {

using namespace loom;

constexpr uint64_t kSeed = 4321;

models::MmditConfig small_config() {
  models::MmditConfig c;
  c.image_size = 8;
  c.channels = 2;  // > 1 so the channel order of patchify and unpatchify is checked too
  c.patch = 2;
  c.width = 32;
  c.depth = 2;
  c.heads = 2;
  c.mlp_ratio = 2.0;
  c.vocab = 7;
  c.text_length = 5;
  c.text_depth = 1;
  return c;
}

void write_case(const std::string& dir, bool perturb, bool cross) {
  models::MmditConfig c = small_config();
  c.cross_attention = cross;
  models::Mmdit model(c);
  model.init_parameters(kSeed);
  if (perturb) reference::perturb_zero_parameters(model, kSeed);

  // The fixed batch: x0 in [-1, 1], eps ~ N(0, 1), t in (0.02, 0.98), captions of every token
  // (the null caption's among them).
  const int64_t B = 6;
  const Shape image{B, c.channels, c.image_size, c.image_size};
  Tensor x0 = Tensor::empty(image), eps = Tensor::empty(image), t = Tensor::empty({B});
  fill_uniform(x0, RngKey{kSeed, "reference.x0", ""}, 0, -1.0f, 1.0f);
  fill_normal(eps, RngKey{kSeed, "reference.eps", ""});
  fill_uniform(t, RngKey{kSeed, "reference.t", ""}, 0, 0.02f, 0.98f);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * c.text_length; ++i) ids.push_back((i * 3 + i / 4) % c.vocab);
  Tensor captions = from_vector(ids, {B, c.text_length});
  write_npy(dir + "/x0.npy", x0);
  write_npy(dir + "/eps.npy", eps);
  write_npy(dir + "/t.npy", t);
  write_npy(dir + "/captions.npy", captions);

  // Exactly flow_matching_loss with the draws given.
  auto loss = [&]() {
    Tensor target = sub(eps, x0);
    Tensor xt = add(x0, mul(reshape(t, {B, 1, 1, 1}), target));
    return mse(model.forward(xt, t, captions), target);
  };

  Json meta = Json::object({{"model", "mmdit"},
                            {"case", cross     ? "cross"
                                     : perturb ? "perturbed"
                                               : "init"},
                            {"seed", kSeed},
                            {"config", Json::object({{"image_size", c.image_size},
                                                     {"channels", c.channels},
                                                     {"patch", c.patch},
                                                     {"width", c.width},
                                                     {"depth", c.depth},
                                                     {"heads", c.heads},
                                                     {"mlp_ratio", c.mlp_ratio},
                                                     {"vocab", c.vocab},
                                                     {"text_length", c.text_length},
                                                     {"text_depth", c.text_depth},
                                                     {"conditioning", cross ? "cross" : "joint"}})},
                            {"batch", Json::object({{"x0", "x0.npy"},
                                                    {"eps", "eps.npy"},
                                                    {"t", "t.npy"},
                                                    {"captions", "captions.npy"}})}});
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
    for (const char* name : {"init", "perturbed", "cross"})
      std::filesystem::create_directories(out + "/" + name);
    write_case(out + "/init", false, false);
    write_case(out + "/perturbed", true, false);
    write_case(out + "/cross", true, true);
    write_json_file(
        out + "/cases.json",
        Json::object({{"model", "mmdit"}, {"cases", Json::array({"init", "perturbed", "cross"})}}));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reference_mmdit_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
