// Low-precision training recipes (train.precision): the element format and scaling of every
// operand of a linear layer's three GEMMs, applied to an unchanged model from outside, the way
// parallelize() is. On the CPU each product is emulated: its operands quantised as the
// recipe prescribes and multiplied dequantised with f32 accumulation (precision/quantize.h).
//
// clang-format off
//   recipe          inputs, weights            output gradients        scales
//   fp8_tensorwise  e4m3                       e5m2                    per tensor, amax now
//   fp8_delayed     e4m3                       e5m2                    per tensor, amax history
//   fp8_blockwise   e4m3 (1x128), e4m3 (128^2) e4m3 (1x128)            DeepSeek-V3's tiles, blocks
//   mxfp8           e4m3                       e4m3                    E8M0 per 32
//   nvfp4           e2m1 (1x16), e2m1 (16x16)  e2m1 (1x16), stochastic E4M3 per 16, f32 per tensor
// clang-format on
//
// nvfp4 also rotates both weight-gradient operands by a 16-point random Hadamard transform
// along the reduction, and keeps the first and last blocks in bf16 (each can be turned off).
// Layers outside the model's blocks (embeddings, the timestep MLP, the final layer, the head)
// stay in bf16 with every recipe: they are small and the most sensitive.
//
// On a GPU the tensorwise recipes multiply on fp8 tensor cores; the block-scaled ones quantise
// each operand on the device (Backend::block_quantize, the host's values bit for bit) and
// multiply the dequantised operands in f32.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/backend/block_scaling.h"
#include "loom/core/json.h"
#include "loom/nn/module.h"
#include "loom/ops/linear_quantizer.h"
#include "loom/precision/quantize.h"

namespace loom::precision {

enum class Recipe : uint8_t { Fp8Tensorwise, Fp8Delayed, Fp8Blockwise, Mxfp8, Nvfp4 };
const char* recipe_name(Recipe r);
// The recipe named `name`; anything else is an error naming `where` and every recipe.
Recipe recipe_from_name(const std::string& name, const std::string& where);
bool is_recipe_name(const std::string& name);

struct RecipeConfig {
  Recipe recipe = Recipe::Fp8Tensorwise;
  int64_t amax_history = 16;         // fp8_delayed: the scale maps the max of the last N amaxes
  int64_t block_size = 128;          // fp8_blockwise: tile length and block edge
  bool hadamard = true;              // nvfp4: the random Hadamard transform of the dW operands
  bool stochastic_rounding = true;   // nvfp4: output gradients rounded stochastically
  std::vector<int64_t> bf16_blocks;  // blocks kept in bf16 (negative: counted from the last)
  uint64_t seed = 0;                 // stochastic rounding draws and the Hadamard signs
};
// The defaults of `recipe` (nvfp4: bf16_blocks {0, -1}).
RecipeConfig default_recipe_config(Recipe recipe);

struct OperandFormat {
  Element element;
  Scaling scaling;
  bool stochastic = false;
};
OperandFormat operand_format(const RecipeConfig& config, GemmOperand role);

// fake_quantize's quantisation as a backend's kernel takes it (Backend::block_quantize): the
// same values bit for bit. Stochastic rounding must start at offset 0.
BlockQuantizeSpec block_quantize_spec(Element element, Scaling scaling,
                                      const QuantizeOptions& options);

// What the quantised operands of one role (input, weight, output gradient) saw this step.
struct RoleStats {
  int64_t values = 0, saturated = 0, flushed = 0;
  float amax = 0;  // the largest finite magnitude quantised
};
const char* role_name(GemmOperand role);  // "input", "weight", "grad"

// A recipe applied to a model: the constructor wraps the forward of every linear layer inside
// "blocks.N." (but bf16_blocks) so that its three products run quantised.
class LowPrecision {
 public:
  LowPrecision(nn::Module& model, const RecipeConfig& config);
  ~LowPrecision();
  const RecipeConfig& config() const { return config_; }
  int64_t quantised_layers() const;
  std::string describe() const;  // "mxfp8: 24 linear layers of blocks 0-5 quantised"

  // Around each optimizer step: stochastic rounding draws are keyed by the step; at the end the
  // step's amaxes -- taken over `reduce_max` (the ranks holding the same layers) -- enter
  // fp8_delayed's histories.
  void begin_step(int64_t step);
  void end_step(const std::function<void(std::vector<float>&)>& reduce_max);
  RoleStats stats(GemmOperand role) const;  // of the last step, over all layers
  // Each quantised layer's amax per role (input, weight, grad) in the last step: what entered
  // fp8_delayed's histories (before the max over ranks).
  std::vector<std::pair<std::string, std::array<float, 3>>> layer_amax() const;

  // fp8_delayed's amax histories by layer name (oldest first): what a checkpoint keeps.
  std::vector<std::pair<std::string, std::vector<float>>> histories() const;
  void set_histories(const std::vector<std::pair<std::string, std::vector<float>>>& h);

  // The last step per operand role: the fractions of values saturated and flushed to zero and
  // the largest magnitude quantised (this rank's); with fp8_delayed also each layer's amaxes,
  // the entries its histories took this step. The progress line's "precision" metrics.
  Json metrics() const;
  // What a checkpoint's trainer_state.json keeps (fp8_delayed: "amax_history", by
  // "<layer>/<role>"; else nothing), and resuming from it.
  Json state() const;
  void resume(const Json& trainer_state);

  struct Layer;
  struct DeviceCounts;

 private:
  void collect() const;  // the device's cast counts into the layers' statistics

  RecipeConfig config_;
  std::shared_ptr<DeviceCounts> device_counts_;
  std::vector<std::shared_ptr<Layer>> layers_;
  int64_t depth_ = 0;
};

}  // namespace loom::precision
