// One process trains the same model from the same weights on the CPU and on CUDA: the GPT
// (both styles) and the DiT, 50 AdamW steps each, f32 and bf16 autocast, and the loss curves
// must agree step for step. Inputs are made on the host and moved, as a data loader does.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "loom/autograd/node.h"
#include "loom/bench/step_bench.h"
#include "loom/diffusion/flow_matching.h"
#include "loom/models/dit/dit.h"
#include "loom/models/gpt/gpt.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"
#include "loom/plan/cost_model.h"

namespace {

using loom::Tensor;

const loom::Device kCuda{loom::DeviceType::CUDA, 0};
constexpr int kSteps = 50;

Tensor on(const Tensor& t, loom::Device device) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  loom::backend_for(device.type == loom::DeviceType::CPU ? t.device() : device).copy(t, out);
  return out;
}

// Relative agreement of two loss curves: f32 differs only by summation order and libm;
// bf16 rounds activations at different points (the GEMMs' accumulation order), so the
// curves stay within bf16's tolerance, not f32's.
void expect_same_curve(const std::vector<double>& cpu, const std::vector<double>& cuda, double tol,
                       const std::string& what) {
  ASSERT_EQ(cpu.size(), cuda.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_TRUE(std::isfinite(cuda[i])) << what << " step " << i;
    worst = std::max(worst, std::fabs(cuda[i] - cpu[i]) / std::fabs(cpu[i]));
  }
  EXPECT_LE(worst, tol) << what << ": losses differ by up to " << worst << " (relative)";
  EXPECT_LT(cuda.back(), cuda.front()) << what << ": CUDA training did not reduce the loss";
  std::printf("[cuda parity] %s: loss %.4f -> %.4f, worst relative difference %.2e\n", what.c_str(),
              cuda.front(), cuda.back(), worst);
}

loom::models::GptConfig gpt(const std::string& style) {
  loom::models::GptConfig c =
      style == "llama" ? loom::models::GptConfig::llama() : loom::models::GptConfig::gpt2();
  c.vocab_size = 64;
  c.context = 32;
  c.width = 64;
  c.depth = 2;
  c.heads = 4;
  if (c.is_llama()) c.kv_heads = 2;
  return c;
}

std::vector<double> train_gpt(const std::string& style, loom::Device device, bool bf16) {
  loom::models::Gpt model(gpt(style));
  model.init_parameters(3);
  model.to(device);
  loom::optim::AdamW opt(model.named_parameters(), {.lr = 3e-3});
  std::mt19937 gen(11);
  std::uniform_int_distribution<int64_t> token(0, 63);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    // A repeating pattern with noise: learnable, not trivial.
    std::vector<int64_t> ids(4 * 33);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 7 == 0 ? token(gen) : int64_t(i % 13);
    const Tensor all = loom::from_vector(ids, {4, 33});
    const Tensor x = on(loom::contiguous(loom::narrow(all, 1, 0, 32)), device);
    const Tensor y = on(loom::contiguous(loom::narrow(all, 1, 1, 32)), device);
    Tensor loss;
    {
      loom::AutocastGuard autocast(bf16 ? loom::DType::BF16 : loom::DType::F32);
      loss = model.loss(x, y);
      loom::backward(loss);
    }
    opt.step(3e-3);
    opt.zero_grad();
    losses.push_back(loom::item(loss));
  }
  return losses;
}

std::vector<double> train_dit(loom::Device device, bool bf16) {
  loom::models::DitConfig c;
  c.image_size = 8;
  c.channels = 1;
  c.patch = 2;
  c.width = 64;
  c.depth = 2;
  c.heads = 4;
  c.num_classes = 3;
  loom::models::Dit model(c);
  model.init_parameters(5);
  model.to(device);
  loom::optim::AdamW opt(model.named_parameters(), {.lr = 3e-3});
  const Tensor x0 = on(loom::tanh(loom::randn({8, 1, 8, 8}, loom::RngKey{2, "x", ""})), device);
  const Tensor y = on(loom::from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}, {8}), device);
  loom::diffusion::FlowMatchingConfig fm{.label_dropout = 0.1, .null_class = 3};
  auto velocity = [&](const Tensor& xt, const Tensor& t, const Tensor& labels) {
    return model.forward(xt, t, labels);
  };
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    Tensor loss;
    {
      loom::AutocastGuard autocast(bf16 ? loom::DType::BF16 : loom::DType::F32);
      loss = loom::diffusion::flow_matching_loss(velocity, x0, y, fm, 7, step);
      loom::backward(loss);
    }
    opt.step(3e-3);
    opt.zero_grad();
    losses.push_back(loom::item(loss));
  }
  return losses;
}

TEST(CudaTraining, GptMatchesTheCpu) {
  for (const char* style : {"gpt2", "llama"}) {
    expect_same_curve(train_gpt(style, loom::cpu_device(), false), train_gpt(style, kCuda, false),
                      2e-3, std::string("gpt ") + style + " f32");
    expect_same_curve(train_gpt(style, loom::cpu_device(), true), train_gpt(style, kCuda, true),
                      3e-2, std::string("gpt ") + style + " bf16");
  }
}

TEST(CudaTraining, DitMatchesTheCpu) {
  expect_same_curve(train_dit(loom::cpu_device(), false), train_dit(kCuda, false), 2e-3, "dit f32");
  expect_same_curve(train_dit(loom::cpu_device(), true), train_dit(kCuda, true), 3e-2, "dit bf16");
}

// `loom bench`'s step on the device: the same final loss as on the CPU after the same steps.
TEST(CudaTraining, BenchStepsOnTheDevice) {
  loom::train::Config gpt_config, dit_config;
  gpt_config.run.name = "tiny_gpt";
  gpt_config.model_kind = loom::train::ModelKind::Gpt;
  gpt_config.model = gpt("llama");
  loom::models::DitConfig dit;
  dit.image_size = 8;
  dit.patch = 2;
  dit.width = 32;
  dit.depth = 1;
  dit.heads = 2;
  dit_config.run.name = "tiny_dit";
  dit_config.model = dit;
  const loom::bench::BenchModel gpt_spec = loom::bench::bench_model(gpt_config, 2, 16);
  const loom::bench::BenchModel dit_spec = loom::bench::bench_model(dit_config, 4);
  for (const auto& spec : {gpt_spec, dit_spec})
    for (const char* precision : {"f32", "fp8_tensorwise"}) {  // the device check's, but bf16
      loom::bench::BenchOptions options;
      options.precision = precision;
      options.warmup = 1;
      options.steps = 2;
      const double cpu = loom::bench::run_bench(spec, options, 0).final_loss;
      options.device = kCuda;
      const double cuda = loom::bench::run_bench(spec, options, 0).final_loss;
      EXPECT_NEAR(cuda, cpu, 1e-4 * std::fabs(cpu)) << spec.shape.name << " " << precision;
    }
}

}  // namespace
