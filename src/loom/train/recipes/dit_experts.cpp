#include "loom/train/recipes/dit_experts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/checkpoint/safetensors.h"
#include "loom/checkpoint/sharded.h"
#include "loom/checkpoint/state_dict.h"
#include "loom/core/json_file.h"
#include "loom/data/idx.h"
#include "loom/data/npy.h"
#include "loom/data/sampler.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/moe_balance.h"
#include "loom/train/recipes/vit_classifier.h"

namespace loom::train {

namespace {

// The cluster of each of the first N training images (N = the assignments' length).
Tensor read_assignments(const std::string& path, int64_t dataset_size, int64_t& clusters) {
  const Tensor t = read_npy(path);
  LOOM_CHECK(t.dtype() == DType::I64 && t.dim() == 1 && t.size(0) <= dataset_size)
      << "data.clusters " << path << ": expected one int64 cluster per training image (at most "
      << dataset_size << "), got " << dtype_name(t.dtype()) << " " << t.shape();
  clusters = 0;
  for (int64_t a : to_vector_i64(t)) clusters = std::max(clusters, a + 1);
  return t;
}

class DitRouterRecipe : public Recipe {
 public:
  explicit DitRouterRecipe(const Config& cfg) : cfg_(cfg), model_(cfg.vit()) {
    const ImageDataset all = fashion_mnist(cfg.data.path, /*train=*/true);
    int64_t clusters = 0;
    clusters_ = read_assignments(cfg.data.clusters, all.images.size(0), clusters);
    LOOM_CHECK(clusters == cfg.vit().num_classes)
        << "dit_router: model.num_classes " << cfg.vit().num_classes << " must be the number of "
        << "clusters in " << cfg.data.clusters << " (" << clusters << ")";
    images_ = narrow(all.images, 0, 0, clusters_.size(0));
    labels_ = narrow(all.labels, 0, 0, clusters_.size(0));
    K_ = clusters;
    LOOM_CHECK(cfg.vit().label_classes == 0 || cfg.vit().label_classes == all.num_classes)
        << "dit_router: model.labels " << cfg.vit().label_classes << " (the data has "
        << all.num_classes << " classes)";
    // A batch carries both targets in one index: cluster + K x class label.
    std::vector<int64_t> both = to_vector_i64(clusters_);
    const std::vector<int64_t> label = to_vector_i64(labels_);
    for (size_t i = 0; i < both.size(); ++i) both[i] += K_ * label[i];
    targets_ = from_vector(both, {int64_t(both.size())});
    model_.init_parameters(cfg.run.seed);
  }

  nn::Module& model() override { return model_; }
  nn::ParallelPlan parallel_plan() const override { return vit_plan(model_); }
  std::string describe() const override {
    return "dit_router: " + std::to_string(model_.num_parameters()) + " parameters, " +
           std::to_string(cfg_.vit().num_classes) + " clusters";
  }
  std::string describe_data() const override {
    return "data: " + std::to_string(images_.size(0)) + " training images, their clusters from " +
           cfg_.data.clusters;
  }
  void start(RunContext& run) override {
    run_ = &run;
    sampler_ = shuffled_sampler(images_.size(0), cfg_, run);
  }
  void resume(const Json& state) override { resume_sampler(*sampler_, state); }
  Batch make_batch(const Slot&) override { return sampled_batch(*sampler_, images_, targets_); }
  // The clean image noised to x_t at a time t drawn as the experts draw theirs (logit-normal),
  // keyed by (seed, step, sample): the cluster it came from is the target.
  Tensor loss(const Batch& b, const Slot& s) override {
    const std::vector<int64_t> both = to_vector_i64(b.y);
    std::vector<int64_t> cluster, label;
    for (int64_t v : both) {
      cluster.push_back(v % K_);
      label.push_back(v / K_);
    }
    const int64_t B = int64_t(both.size());
    // x_t and t as the experts draw theirs (and the label dropped as theirs are).
    const Device on = b.x.device();
    const diffusion::FlowMatchingBatch fm = diffusion::flow_matching_batch(
        b.x, from_vector(label, {B}, DType::I64, on), cfg_.flow, cfg_.run.seed, s.step, s.first);
    const Tensor told = cfg_.vit().label_classes > 0 ? fm.labels : Tensor();
    return cross_entropy(model_.forward(fm.xt, fm.t, told),
                         from_vector(cluster, {B}, DType::I64, on));
  }
  // Its accuracy at a few times t on the first 2000 training images, noised afresh.
  Json finish(const RunSummary& summary) override {
    const parallel::NamedTensors weights = trained_weights(run_->model);  // collective
    if (!run_->main) return Json();
    models::Vit trained(cfg_.vit());
    load_state_dict(trained, as_map(weights), "the trained weights");
    const int64_t n = std::min<int64_t>(2000, images_.size(0));
    const Tensor x0 = narrow(images_, 0, 0, n), y = narrow(clusters_, 0, 0, n);
    Json by_t = Json::object();
    std::printf("router: accuracy on %lld training images at t =", (long long)n);
    for (double t : {0.1, 0.3, 0.5, 0.7, 0.9}) {
      NoGradGuard no_grad;
      const Tensor eps = randn(x0.shape(), RngKey{cfg_.run.seed, "router.eval", std::to_string(t)});
      const Tensor xt = add(mul_scalar(x0, 1 - t), mul_scalar(eps, t));  // (n, C, H, W)
      const double acc = classifier_accuracy(
          trained, xt, y, t, cfg_.vit().label_classes > 0 ? narrow(labels_, 0, 0, n) : Tensor());
      by_t.set(std::to_string(t).substr(0, 3), acc);
      std::printf(" %.1f: %.1f%%", t, 100 * acc);
    }
    std::printf("\n");
    const Json result = Json::object({{"accuracy_by_t", by_t}, {"steps", summary.step}});
    write_json_file(cfg_.run_dir() + "/eval.json", result);
    return result;
  }

 private:
  const Config& cfg_;
  Tensor images_, clusters_, labels_, targets_;
  int64_t K_ = 0;
  models::Vit model_;
  RunContext* run_ = nullptr;
  std::unique_ptr<Sampler> sampler_;
};

}  // namespace

std::unique_ptr<Recipe> make_dit_router_recipe(const Config& config) {
  return std::make_unique<DitRouterRecipe>(config);
}

Routing routing_from_name(const std::string& name) {
  if (name == "full") return Routing::Full;
  if (name == "top1") return Routing::Top1;
  if (name == "top2") return Routing::Top2;
  LOOM_FAIL() << "routing '" << name << "' (expected full, top1 or top2)";
  return Routing::Full;
}

const char* name_of(Routing routing) {
  return routing == Routing::Full ? "full" : routing == Routing::Top1 ? "top1" : "top2";
}

Experts load_experts(const std::string& router_ckpt, const std::vector<std::string>& expert_ckpts) {
  Experts e;
  const Config rc = run_config_of(router_ckpt, ModelKind::DitRouter, "experts");
  const int64_t K = rc.vit().num_classes;
  LOOM_CHECK(int64_t(expert_ckpts.size()) == K)
      << "experts: the router " << router_ckpt << " routes between " << K << " clusters, but "
      << expert_ckpts.size() << " experts were given";
  e.router = std::make_unique<models::Vit>(rc.vit());
  load_state_dict(*e.router, as_map(CheckpointReader(router_ckpt).read_all("model")),
                  router_ckpt + " (model)");
  e.experts.resize(size_t(K));
  for (const std::string& ckpt : expert_ckpts) {
    const Config c = run_config_of(ckpt, ModelKind::Dit, "experts");
    LOOM_CHECK(c.data.clusters == rc.data.clusters)
        << "experts: " << ckpt << " was trained on clusters '" << c.data.clusters
        << "', the router on '" << rc.data.clusters << "'";
    const int64_t k = c.data.cluster;
    LOOM_CHECK(k >= 0 && k < K && !e.experts[size_t(k)])
        << "experts: " << ckpt << " is the expert of cluster " << k << ", which "
        << (k >= 0 && k < K ? "another expert given is too" : "the router does not have");
    if (&ckpt == &expert_ckpts.front()) e.dit = c.dit();
    const models::DitConfig& d = c.dit();
    LOOM_CHECK(d.image_size == e.dit.image_size && d.channels == e.dit.channels &&
               d.num_classes == e.dit.num_classes)
        << "experts: " << ckpt << " makes other images or classes than the other experts";
    LOOM_CHECK(d.image_size == rc.vit().image_size && d.channels == rc.vit().channels)
        << "experts: " << ckpt << "'s images are not the router's";
    LOOM_CHECK(rc.vit().label_classes == 0 || rc.vit().label_classes == d.num_classes)
        << "experts: the router is told labels of " << rc.vit().label_classes << " classes, "
        << ckpt << " samples " << d.num_classes;
    e.experts[size_t(k)] = std::make_unique<models::Dit>(c.dit());
    load_state_dict(*e.experts[size_t(k)], as_map(CheckpointReader(ckpt).read_all("ema")),
                    ckpt + " (ema)");
    load_selection_biases(*e.experts[size_t(k)], ckpt);
  }
  return e;
}

Tensor routing_weights(const models::Vit& router, const Tensor& xt, const Tensor& t,
                       const Tensor& labels, Routing routing) {
  NoGradGuard no_grad;
  const Tensor told = router.config.label_classes > 0 ? labels : Tensor();
  const Tensor logits = router.forward(xt, t, told);  // (B, K)
  const int64_t B = logits.size(0), K = logits.size(1);
  std::vector<float> w = to_vector(softmax(logits));
  if (routing != Routing::Full) {
    const int64_t keep = routing == Routing::Top1 ? 1 : std::min<int64_t>(2, K);
    for (int64_t b = 0; b < B; ++b) {
      float* row = w.data() + b * K;
      std::vector<int64_t> order(static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k) order[size_t(k)] = k;
      std::stable_sort(order.begin(), order.end(),
                       [row](int64_t a, int64_t c) { return row[a] > row[c]; });
      float kept = 0;
      for (int64_t j = 0; j < keep; ++j) kept += row[order[size_t(j)]];
      for (int64_t j = 0; j < K; ++j)
        row[order[size_t(j)]] = j < keep ? row[order[size_t(j)]] / kept : 0.0f;
    }
  }
  return from_vector(w, {B, K});
}

diffusion::VelocityFn mixture_velocity(const Experts& e, Routing routing) {
  return [&e, routing](const Tensor& x, const Tensor& t, const Tensor& y) {
    NoGradGuard no_grad;
    const std::vector<float> w = to_vector(routing_weights(*e.router, x, t, y, routing));
    const int64_t B = x.size(0), K = int64_t(e.experts.size()), per = x.numel() / B;
    std::vector<float> v(static_cast<size_t>(x.numel()), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      bool used = false;  // top-1 / top-2 need only the experts some sample routes to
      for (int64_t b = 0; b < B; ++b) used = used || w[size_t(b * K + k)] > 0;
      if (!used) continue;
      const std::vector<float> vk = to_vector(e.experts[size_t(k)]->forward(x, t, y));
      for (int64_t b = 0; b < B; ++b) {
        const float wk = w[size_t(b * K + k)];
        for (int64_t i = 0; i < per; ++i) v[size_t(b * per + i)] += wk * vk[size_t(b * per + i)];
      }
    }
    return from_vector(v, x.shape());
  };
}

}  // namespace loom::train
