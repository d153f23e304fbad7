// Low-precision recipes applied to linear layers (recipe.h).
#include "loom/precision/recipe.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>

#include "loom/backend/backend.h"
#include "loom/core/error.h"
#include "loom/core/json.h"
#include "loom/core/rng.h"
#include "loom/nn/layers.h"
#include "loom/ops/creation.h"
#include "loom/ops/shape.h"

namespace loom::precision {

namespace {

constexpr Recipe kRecipes[] = {Recipe::Fp8Tensorwise, Recipe::Fp8Delayed, Recipe::Fp8Blockwise,
                               Recipe::Mxfp8, Recipe::Nvfp4};
constexpr GemmOperand kRoles[] = {GemmOperand::Input, GemmOperand::Weight, GemmOperand::OutputGrad};

// "blocks.3.attn.qkv" -> 3; -1 outside the blocks.
int64_t block_of(const std::string& path) {
  if (path.rfind("blocks.", 0) != 0) return -1;
  return std::stoll(path.substr(7));
}

}  // namespace

const char* recipe_name(Recipe r) {
  switch (r) {
    case Recipe::Fp8Tensorwise:
      return "fp8_tensorwise";
    case Recipe::Fp8Delayed:
      return "fp8_delayed";
    case Recipe::Fp8Blockwise:
      return "fp8_blockwise";
    case Recipe::Mxfp8:
      return "mxfp8";
    case Recipe::Nvfp4:
      return "nvfp4";
  }
  return "?";
}

bool is_recipe_name(const std::string& name) {
  for (Recipe r : kRecipes)
    if (name == recipe_name(r)) return true;
  return false;
}

Recipe recipe_from_name(const std::string& name, const std::string& where) {
  for (Recipe r : kRecipes)
    if (name == recipe_name(r)) return r;
  std::string known;
  for (Recipe r : kRecipes) known += std::string(known.empty() ? "" : ", ") + recipe_name(r);
  LOOM_FAIL() << where << ": unknown low-precision recipe '" << name << "' (known: " << known
              << ")";
  return Recipe::Fp8Tensorwise;
}

RecipeConfig default_recipe_config(Recipe recipe) {
  RecipeConfig c;
  c.recipe = recipe;
  if (recipe == Recipe::Nvfp4) c.bf16_blocks = {0, -1};
  return c;
}

const char* role_name(GemmOperand role) {
  switch (role) {
    case GemmOperand::Input:
      return "input";
    case GemmOperand::Weight:
      return "weight";
    case GemmOperand::OutputGrad:
      return "grad";
  }
  return "?";
}

BlockQuantizeSpec block_quantize_spec(Element element, Scaling scaling,
                                      const QuantizeOptions& options) {
  BlockQuantizeSpec spec;
  spec.element = element == Element::E4M3   ? QuantElement::E4M3
                 : element == Element::E5M2 ? QuantElement::E5M2
                                            : QuantElement::E2M1;
  const int64_t tile = options.block;
  switch (scaling) {
    case Scaling::Tensor:
      spec.tile_rows = spec.tile_cols = 0;
      break;
    case Scaling::Tile1x128:
      spec.tile_rows = 1, spec.tile_cols = tile ? tile : 128;
      break;
    case Scaling::Block128:
      spec.tile_rows = spec.tile_cols = tile ? tile : 128;
      break;
    case Scaling::Mx:
      spec.scale = GroupScale::E8M0, spec.tile_rows = 1, spec.tile_cols = kMxBlock;
      break;
    case Scaling::Nvfp4:
      spec.scale = GroupScale::Nvfp4, spec.tile_rows = 1, spec.tile_cols = kNvfp4Block;
      break;
    case Scaling::Nvfp4Square:
      spec.scale = GroupScale::Nvfp4, spec.tile_rows = spec.tile_cols = kNvfp4Block;
      break;
  }
  spec.amax = options.amax;
  if (options.sr) {
    LOOM_CHECK(options.sr->offset == 0)
        << "precision: a kernel's stochastic rounding draws from offset 0, not "
        << options.sr->offset;
    spec.stochastic = true;
    spec.sr_key = options.sr->key;
  }
  return spec;
}

OperandFormat operand_format(const RecipeConfig& c, GemmOperand role) {
  const bool grad = role == GemmOperand::OutputGrad, weight = role == GemmOperand::Weight;
  switch (c.recipe) {
    case Recipe::Fp8Tensorwise:
    case Recipe::Fp8Delayed:  // the "hybrid" formats: range for gradients, precision forward
      return {grad ? Element::E5M2 : Element::E4M3, Scaling::Tensor};
    case Recipe::Fp8Blockwise:
      return {Element::E4M3, weight ? Scaling::Block128 : Scaling::Tile1x128};
    case Recipe::Mxfp8:
      return {Element::E4M3, Scaling::Mx};
    case Recipe::Nvfp4:
      return {Element::E2M1, weight ? Scaling::Nvfp4Square : Scaling::Nvfp4,
              grad && c.stochastic_rounding};
  }
  return {Element::E4M3, Scaling::Tensor};
}

// On a device: every layer's cast counts (Backend::fp8_quantize's stats), one (layers, 3 roles,
// 3) i64 buffer made by the first cast and read back in one copy when the host asks for the
// statistics (LowPrecision::collect), so the step never waits for them.
struct LowPrecision::DeviceCounts {
  std::mutex mutex;
  int64_t layers = 0;
  Tensor counts;

  // The 3 counts of (layer, role), the buffer made on `device` and zeroed first.
  Tensor slot(int64_t layer, size_t role, Device device) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!counts.defined()) {
      counts = Tensor::empty({layers * 9}, DType::I64, device);
      backend_for(device).fill(counts, 0.0);
    }
    return counts.as_strided({3}, {1}, (layer * 3 + int64_t(role)) * 3);
  }
  // The counts since the last take on the host (undefined before any cast); `keep` false
  // drops them. The device's start again from zero.
  Tensor take(bool keep) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!counts.defined()) return Tensor();
    Tensor host;
    if (keep) {
      host = Tensor::empty(counts.shape(), DType::I64);
      backend_for(counts.device()).copy(counts, host);
    }
    backend_for(counts.device()).fill(counts, 0.0);
    return host;
  }
};

// One quantised linear layer: its three roles' amax histories (fp8_delayed) and the step's
// statistics. The backward may run on another thread than the forward: counts take the lock.
struct LowPrecision::Layer : LinearQuantizer {
  std::string name;
  RecipeConfig config;          // a copy: the model's wrappers may outlive the LowPrecision
  int64_t step = 0, calls = 0;  // calls this step: each quantisation's own draws
  std::array<std::deque<float>, 3> history;
  std::array<float, 3> step_amax{};
  std::array<RoleStats, 3> stats;
  float signs[16];
  std::shared_ptr<DeviceCounts> device_counts;  // shared by the recipe's layers
  int64_t index = 0;                            // this layer's slots in it
  std::mutex mutex;

  bool tensorwise() const {
    return config.recipe == Recipe::Fp8Tensorwise || config.recipe == Recipe::Fp8Delayed;
  }

  // On the GPU the recipes with one scale per tensor run on fp8 tensor cores: both operands
  // cast on the device (K, and N, padded with zeros to the multiples of 16 the GEMM takes).
  Tensor gemm(GemmPass, const Tensor& a, GemmOperand a_role, const Tensor& b, GemmOperand b_role,
              const Tensor& bias) override {
    if (a.device().type == DeviceType::CPU || !tensorwise()) return Tensor();
    const Device device = a.device();
    Backend& backend = backend_for(device);
    const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
    const int64_t k16 = (k + 15) / 16 * 16, n16 = (n + 15) / 16 * 16;
    auto cast = [&](const Tensor& t, GemmOperand role, int64_t rows) {
      const size_t r = size_t(role);
      const OperandFormat f = operand_format(config, role);
      const Tensor q = Tensor::empty(
          {rows, k16}, f.element == Element::E4M3 ? DType::F8E4M3 : DType::F8E5M2, device);
      const Tensor inv_scale = Tensor::empty({1}, DType::F32, device);
      float amax = -1;  // measured
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (config.recipe == Recipe::Fp8Delayed && !history[r].empty())
          amax = *std::max_element(history[r].begin(), history[r].end());
        stats[r].values += t.numel();
      }
      backend.fp8_quantize(t, amax, q, inv_scale, device_counts->slot(index, r, device));
      return std::make_pair(q, inv_scale);
    };
    const auto [qa, a_inv] = cast(a, a_role, m);
    const auto [qb, b_inv] = cast(b, b_role, n16);
    if (n16 == n) {
      const Tensor out = Tensor::empty({m, n}, DType::F32, device);  // (M, N)
      backend.fp8_matmul(qa, a_inv, qb, b_inv, bias, out);
      return out;
    }
    const Tensor wide = Tensor::empty({m, n16}, DType::F32, device);  // (M, N16)
    backend.fp8_matmul(qa, a_inv, qb, b_inv, Tensor(), wide);
    const Tensor out = Tensor::empty({m, n}, DType::F32, device);
    backend.copy(wide.as_strided({m, n}, {n16, 1}, 0), out);
    if (bias.defined()) backend.binary(BinaryOp::Add, out, bias.as_strided({m, n}, {0, 1}, 0), out);
    return out;
  }

  // This layer's device counts (3 roles x 3) added to the host's (caller holds the lock).
  void add_device_counts(const int64_t* c) {
    for (size_t r = 0; r < 3; ++r, c += 3) {
      const float amax = f32_from_bits(uint32_t(c[0]));
      stats[r].saturated += c[1];
      stats[r].flushed += c[2];
      stats[r].amax = std::max(stats[r].amax, amax);
      step_amax[r] = std::max(step_amax[r], amax);
    }
  }

  void quantize(GemmPass pass, Tensor& a, GemmOperand a_role, Tensor& b,
                GemmOperand b_role) override {
    if (pass == GemmPass::WeightGrad && config.recipe == Recipe::Nvfp4 && config.hadamard) {
      a = rotated(a);
      b = rotated(b);
    }
    a = quantized(a, a_role);
    b = quantized(b, b_role);
  }

  // t (rows, K) padded with zeros to a multiple of 16 columns and rotated along them.
  Tensor rotated(const Tensor& t) const {
    const int64_t rows = t.size(0), cols = t.size(1), padded = (cols + 15) / 16 * 16;
    Tensor out = Tensor::empty({rows, padded}, DType::F32, t.device());
    if (t.device().type != DeviceType::CPU) {
      std::array<float, 16> s;
      std::copy(signs, signs + 16, s.begin());
      backend_for(t.device()).hadamard16(contiguous(t), s, out);
      return out;
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* row = out.data<float>() + r * padded;
      std::memcpy(row, t.data<float>() + r * cols, size_t(cols) * sizeof(float));
      std::fill(row + cols, row + padded, 0.0f);
    }
    hadamard16(out.data<float>(), rows, padded, signs);
    return out;
  }

  // t quantised as the role's format prescribes and dequantised: on the host by the recipes'
  // emulation, on a device by its kernel (the same values; the counts stay on the device until
  // the step's metrics read them).
  Tensor quantized(const Tensor& t, GemmOperand role) {
    const OperandFormat f = operand_format(config, role);
    const size_t k = size_t(role);
    QuantizeOptions options;
    if (config.recipe == Recipe::Fp8Blockwise) options.block = config.block_size;
    StochasticRounding sr;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (config.recipe == Recipe::Fp8Delayed && !history[k].empty())
        options.amax = *std::max_element(history[k].begin(), history[k].end());
      if (f.stochastic)  // keyed by (layer, step, call): the same draws when a run resumes
        sr.key = RngKey{config.seed, "stochastic_rounding",
                        name + "/" + std::to_string(step) + "/" + std::to_string(calls)}
                     .hash();
      ++calls;
    }
    if (f.stochastic) options.sr = &sr;
    const Device device = t.device();
    if (device.type != DeviceType::CPU) {
      const Tensor out = Tensor::empty(t.shape(), DType::F32, device);
      {
        std::lock_guard<std::mutex> lock(mutex);
        stats[k].values += t.numel();
      }
      backend_for(device).block_quantize(contiguous(t),
                                         block_quantize_spec(f.element, f.scaling, options), out,
                                         device_counts->slot(index, k, device));
      return out;
    }
    Tensor out = Tensor::empty(t.shape(), DType::F32);
    const QuantizeStats s = fake_quantize(t.data<float>(), t.size(0), t.size(1), f.element,
                                          f.scaling, out.data<float>(), options);
    std::lock_guard<std::mutex> lock(mutex);
    step_amax[k] = std::max(step_amax[k], s.amax);
    RoleStats& r = stats[k];
    r.values += s.values;
    r.saturated += s.saturated;
    r.flushed += s.flushed;
    r.amax = std::max(r.amax, s.amax);
    return out;
  }
};

LowPrecision::LowPrecision(nn::Module& model, const RecipeConfig& config)
    : config_(config), device_counts_(std::make_shared<DeviceCounts>()) {
  LOOM_CHECK(config.amax_history >= 1)
      << "precision.amax_history must be at least 1, got " << config.amax_history;
  // The block size is checked where it is used, and once here with the format's words.
  if (config.recipe == Recipe::Fp8Blockwise) {
    const int64_t b = config.block_size;
    LOOM_CHECK(b >= 16 && b <= 1024 && (b & (b - 1)) == 0)
        << "precision.block_size " << b << ": fp8_blockwise takes a power of two from 16 to 1024";
  }
  model.for_each_submodule(
      [&](const std::string& path, nn::Module&) { depth_ = std::max(depth_, block_of(path) + 1); });
  std::set<int64_t> kept;
  for (int64_t b : config.bf16_blocks) {
    LOOM_CHECK(b >= -depth_ && b < depth_)
        << "precision.bf16_blocks: block " << b << " does not exist (the model has " << depth_
        << " blocks; negative counts from the last)";
    kept.insert(b < 0 ? depth_ + b : b);
  }
  float signs[16];
  for (int i = 0; i < 16; ++i)
    signs[i] = uniform_at(RngKey{config.seed, "hadamard", "signs"}.hash(), uint64_t(i)) < 0.5f
                   ? -1.0f
                   : 1.0f;
  model.for_each_submodule([&](const std::string& path, nn::Module& m) {
    const bool linear = dynamic_cast<nn::Linear*>(&m) || dynamic_cast<nn::TiedProjection*>(&m);
    const int64_t block = block_of(path);
    if (!linear || block < 0 || kept.count(block)) return;
    auto layer = std::make_shared<Layer>();
    layer->name = path;
    layer->config = config_;
    layer->device_counts = device_counts_;
    layer->index = int64_t(layers_.size());
    std::memcpy(layer->signs, signs, sizeof(signs));
    // Innermost of the layer's wrappers (tensor parallelism's go around it): only the local
    // GEMM is quantised.
    m.add_forward_wrapper([layer](const nn::Module::ForwardFn& fn, const std::vector<Tensor>& in) {
      LinearQuantizerScope scope(layer);
      return fn(in);
    });
    layers_.push_back(layer);
  });
  device_counts_->layers = int64_t(layers_.size());
  LOOM_CHECK(!layers_.empty()) << "train.precision = \"" << recipe_name(config.recipe)
                               << "\": the model has no linear layers in its blocks to quantise"
                               << (kept.empty() ? ""
                                                : " (precision.bf16_blocks keeps them all: "
                                                  "set it to [] to quantise them)");
}

LowPrecision::~LowPrecision() = default;

int64_t LowPrecision::quantised_layers() const {
  return int64_t(layers_.size());
}

std::string LowPrecision::describe() const {
  std::string kept;
  for (int64_t b : config_.bf16_blocks)
    kept += (kept.empty() ? "" : ", ") + std::to_string(b < 0 ? depth_ + b : b);
  std::string s = std::string(recipe_name(config_.recipe)) + ": " + std::to_string(layers_.size()) +
                  " linear layers of " + std::to_string(depth_) + " blocks quantised";
  if (!kept.empty()) s += ", blocks " + kept + " in bf16";
  if (config_.recipe == Recipe::Nvfp4)
    s += std::string(", Hadamard ") + (config_.hadamard ? "on" : "off") + ", stochastic rounding " +
         (config_.stochastic_rounding ? "on" : "off");
  if (config_.recipe == Recipe::Fp8Delayed)
    s += ", amax history " + std::to_string(config_.amax_history);
  return s;
}

void LowPrecision::collect() const {
  const Tensor counts = device_counts_->take(/*keep=*/true);
  if (!counts.defined()) return;
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::lock_guard<std::mutex> lock(layers_[i]->mutex);
    layers_[i]->add_device_counts(counts.data<int64_t>() + i * 9);
  }
}

void LowPrecision::begin_step(int64_t step) {
  device_counts_->take(/*keep=*/false);
  for (auto& l : layers_) {
    std::lock_guard<std::mutex> lock(l->mutex);
    l->step = step;
    l->calls = 0;
    l->stats = {};
    l->step_amax = {};
  }
}

void LowPrecision::end_step(const std::function<void(std::vector<float>&)>& reduce_max) {
  if (config_.recipe != Recipe::Fp8Delayed) return;
  collect();
  std::vector<float> amax;
  for (auto& l : layers_) {
    std::lock_guard<std::mutex> lock(l->mutex);
    amax.insert(amax.end(), l->step_amax.begin(), l->step_amax.end());
  }
  reduce_max(amax);
  for (size_t i = 0; i < layers_.size(); ++i)
    for (size_t k = 0; k < 3; ++k) {
      std::deque<float>& h = layers_[i]->history[k];
      h.push_back(amax[i * 3 + k]);
      if (int64_t(h.size()) > config_.amax_history) h.pop_front();
    }
}

RoleStats LowPrecision::stats(GemmOperand role) const {
  collect();
  RoleStats out;
  for (const auto& l : layers_) {
    std::lock_guard<std::mutex> lock(l->mutex);
    const RoleStats& s = l->stats[size_t(role)];
    out.values += s.values;
    out.saturated += s.saturated;
    out.flushed += s.flushed;
    out.amax = std::max(out.amax, s.amax);
  }
  return out;
}

std::vector<std::pair<std::string, std::array<float, 3>>> LowPrecision::layer_amax() const {
  std::vector<std::pair<std::string, std::array<float, 3>>> out;
  collect();
  for (const auto& l : layers_) {
    std::lock_guard<std::mutex> lock(l->mutex);
    out.emplace_back(l->name, l->step_amax);
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<float>>> LowPrecision::histories() const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& l : layers_)
    for (GemmOperand role : kRoles) {
      const std::deque<float>& h = l->history[size_t(role)];
      out.emplace_back(l->name + "/" + role_name(role), std::vector<float>(h.begin(), h.end()));
    }
  return out;
}

void LowPrecision::set_histories(
    const std::vector<std::pair<std::string, std::vector<float>>>& histories) {
  for (const auto& [key, values] : histories) {
    bool found = false;
    for (auto& l : layers_)
      for (GemmOperand role : kRoles)
        if (key == l->name + "/" + role_name(role)) {
          l->history[size_t(role)].assign(values.begin(), values.end());
          found = true;
        }
    LOOM_CHECK(found) << "precision: the checkpoint's amax history of " << key
                      << " belongs to no quantised layer of this run";
  }
}

// A low-precision recipe's last step per operand role: the fractions of values saturated and
// flushed to zero, and the largest magnitude quantised (this rank's); with fp8_delayed also
// each layer's amaxes, the entries its histories took this step.
Json LowPrecision::metrics() const {
  Json out = Json::object();
  if (config_.recipe == Recipe::Fp8Delayed) {
    Json layers = Json::object();
    for (const auto& [name, amax] : layer_amax())
      layers.set(name, Json::object({{"input", double(amax[0])},
                                     {"weight", double(amax[1])},
                                     {"grad", double(amax[2])}}));
    out.set("amax", layers);
  }
  for (GemmOperand role : {GemmOperand::Input, GemmOperand::Weight, GemmOperand::OutputGrad}) {
    const RoleStats s = stats(role);
    const double n = double(std::max<int64_t>(s.values, 1));
    out.set(role_name(role), Json::object({{"saturated", double(s.saturated) / n},
                                           {"flushed", double(s.flushed) / n},
                                           {"amax", double(s.amax)}}));
  }
  return out;
}

Json LowPrecision::state() const {
  if (config_.recipe != Recipe::Fp8Delayed) return Json::object();
  Json histories = Json::object();
  for (const auto& [key, values] : this->histories()) {
    Json::Array a;
    for (float v : values) a.push_back(Json(double(v)));
    histories.set(key, Json::array(std::move(a)));
  }
  return Json::object({{"amax_history", histories}});
}

void LowPrecision::resume(const Json& trainer_state) {
  if (!trainer_state.contains("amax_history")) return;
  std::vector<std::pair<std::string, std::vector<float>>> h;
  for (const auto& [key, values] : trainer_state.at("amax_history").items()) {
    std::vector<float> history;
    for (const Json& v : values.as_array()) history.push_back(float(v.as_double()));
    h.emplace_back(key, std::move(history));
  }
  set_histories(h);
}

}  // namespace loom::precision
