// A model built under nn::DeferInit has shapes without memory, and the values parallelism fills
// into a part of a parameter equal that part of a one-process init: checked element by element
// against the whole tensors of the same model built and initialised normally, cut with plain
// narrow() -- for a tensor-parallel column split, a row split, a flat ZeRO range of a column
// split and an expert block of a column split (the run composition parallelize() uses), and
// for every initialiser kind the models use (normal, xavier, zeros, ones).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "loom/checkpoint/state_dict.h"
#include "loom/models/gpt/gpt.h"
#include "loom/ops/ops.h"
#include "loom/parallel/tensor_parallel.h"

namespace loom {
namespace {

models::GptConfig tiny() {
  models::GptConfig c = models::GptConfig::llama();  // untied head: xavier or normal, ones
  c.vocab_size = 40;
  c.context = 8;
  c.width = 16;
  c.depth = 2;
  c.heads = 2;
  return c;
}

std::vector<float> flat(const Tensor& t) {
  return to_vector(contiguous(t));
}

// The part's values from its runs, as parallelize() fills a ZeRO piece: elements [begin, end).
std::vector<float> filled(const nn::ParameterInit& init, const std::vector<nn::ElementRun>& runs,
                          int64_t begin, int64_t end) {
  Tensor dst = Tensor::empty({end - begin});
  nn::fill_initial(dst, init, runs, begin);
  return to_vector(dst);
}

TEST(DeferredInit, BuildsShapesWithoutMemory) {
  const int64_t live = host_allocator().stats().live_total;
  nn::DeferInit deferred;
  models::Gpt model(tiny());
  model.init_parameters(3);
  EXPECT_EQ(host_allocator().stats().live_total, live) << "a deferred build allocated";
  for (const auto& p : model.named_parameters()) EXPECT_FALSE(p.tensor.allocated()) << p.name;
  const auto inits = model.take_deferred_inits();
  EXPECT_EQ(inits.size(), model.named_parameters().size());
  EXPECT_TRUE(model.take_deferred_inits().empty()) << "handed over twice";
}

TEST(DeferredInit, PartsEqualTheWholeInitCutAlike) {
  models::Gpt whole(tiny());
  whole.init_parameters(3);
  std::map<std::string, nn::ParameterInit> inits;
  {
    nn::DeferInit deferred;
    models::Gpt shapes(tiny());
    shapes.init_parameters(3);
    inits = shapes.take_deferred_inits();
  }
  std::set<int> kinds;
  int64_t checked = 0;
  for (const auto& p : whole.named_parameters()) {
    const nn::ParameterInit& init = inits.at(p.name);
    kinds.insert(int(init.init.kind));
    const Tensor& w = p.tensor;
    const int64_t n = w.numel();
    // Whole, and a flat range (a ZeRO shard of an unsplit parameter).
    const std::vector<float> all = flat(w);
    EXPECT_EQ(filled(init, {{0, 0, n}}, 0, n), all) << p.name;
    EXPECT_EQ(filled(init, {{0, 0, n}}, n / 3, n / 2),
              std::vector<float>(all.begin() + n / 3, all.begin() + n / 2))
        << p.name;
    checked += n;
    if (w.dim() != 2 || w.size(0) % 2 || w.size(1) % 2) continue;
    const int64_t R = w.size(0), C = w.size(1);
    // Tensor parallel, rank 1 of 2: output rows, then input columns.
    parallel::TensorShard rows{w.shape(), 0, {{{0, R / 2}}, {{R / 2, R / 2}}}};
    parallel::TensorShard cols{w.shape(), 1, {{{0, C / 2}}, {{C / 2, C / 2}}}};
    const Tensor row_part = narrow(w, 0, R / 2, R / 2), col_part = narrow(w, 1, C / 2, C / 2);
    EXPECT_EQ(filled(init, rows.runs(1), 0, row_part.numel()), flat(row_part)) << p.name;
    EXPECT_EQ(filled(init, cols.runs(1), 0, col_part.numel()), flat(col_part)) << p.name;
    // ZeRO's flat range of the column part, across row boundaries.
    const std::vector<float> part = flat(col_part);
    const int64_t a = C / 2 - 1, b = int64_t(part.size()) - 1;
    EXPECT_EQ(filled(init, cols.runs(1), a, b),
              std::vector<float>(part.begin() + a, part.begin() + b))
        << p.name;
    // An expert block (rows) of the column part: the composition of the two splits.
    parallel::TensorShard experts{col_part.shape(), 0, {{{0, R / 2}}, {{R / 2, R / 2}}}};
    const auto composed = nn::compose_runs(experts.runs(1), cols.runs(1));
    EXPECT_EQ(filled(init, composed, 0, R / 2 * C / 2), flat(narrow(col_part, 0, R / 2, R / 2)))
        << p.name;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GE(kinds.size(), 2u) << "the model should use more than one initialiser";
}

TEST(DeferredInit, LoadingWeightsGivesThemMemory) {
  auto deferred_layer = [] {
    nn::DeferInit deferred;
    auto layer = std::make_shared<nn::Linear>(3, 2, true);
    layer->init_parameters(1);
    return layer;
  };
  const auto layer = deferred_layer();
  ASSERT_FALSE(layer->weight.allocated());
  const std::vector<float> w = {1, 2, 3, 4, 5, 6}, b = {7, 8};
  load_state_dict(*layer, {{"weight", from_vector(w, {2, 3})}, {"bias", from_vector(b, {2})}},
                  "test");
  EXPECT_EQ(to_vector(layer->weight), w);
  EXPECT_EQ(to_vector(layer->bias), b);
}

}  // namespace
}  // namespace loom
