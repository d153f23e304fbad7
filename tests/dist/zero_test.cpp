// ZeRO-3 keeps a block's full parameters only while the block runs: checked inside the block's
// wrapped forward (where the gathered values must equal the original weights -- exactly in f32,
// rounded to nearest-even bf16 when gathered in bf16) and outside it (released, and reading
// them is an error). The ranks' shards differ; the gathered blocks must not.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>

#include "loom/core/ordered_worker.h"
#include "loom/dist/world.h"
#include "loom/models/gpt/gpt.h"
#include "loom/ops/ops.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/zero.h"

namespace loom::parallel {
namespace {

// Round-to-nearest-even to bf16 and back, written from the format's definition (the top 16
// bits of an f32), independent of Loom's conversion.
float round_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

models::GptConfig tiny() {
  models::GptConfig c;
  c.vocab_size = 40;
  c.context = 8;
  c.width = 12;
  c.depth = 3;
  c.heads = 2;
  return c;
}

class Zero3Gather : public testing::TestWithParam<DType> {};

TEST_P(Zero3Gather, BlocksExistOnlyInsideTheirForward) {
  const DType gather = GetParam();
  models::Gpt model(tiny());
  model.init_parameters(11);
  std::map<std::string, std::vector<float>> original;
  for (const auto& p : model.named_parameters()) original[p.name] = to_vector(p.tensor);

  auto world = dist::world();
  // The blocks and the final norm are units; the embeddings are left as parameters of no unit.
  std::vector<std::string> units = model.block_names();
  units.push_back("norm_f");
  ZeroOptions options;
  options.stage = 3;
  options.gather_dtype = gather;
  ZeroDataParallel zero(model, units, options, world,
                        std::make_shared<dist::SingleProcessGroup>("replicate", world->rank()));
  zero.broadcast_parameters();

  int64_t held = 0, total = 0;
  for (const auto& piece : zero.pieces()) held += piece.end - piece.begin;
  for (const auto& p : model.named_parameters()) total += p.tensor.numel();
  EXPECT_LE(held, total / world->size() + 3 * world->size()) << "a rank holds more than its shard";

  auto block_params = [&](size_t b) {
    const std::string prefix = "blocks." + std::to_string(b) + ".";
    std::vector<nn::NamedParameter> out;
    for (const auto& p : model.named_parameters())
      if (p.name.rfind(prefix, 0) == 0) out.push_back(p);
    return out;
  };
  // Before any forward: no block is held, and reading one is an error.
  for (size_t b = 0; b < model.blocks.size(); ++b)
    for (const auto& p : block_params(b)) {
      ASSERT_TRUE(p.tensor.storage()->released()) << p.name << " is held outside its forward";
      try {
        to_vector(p.tensor);
        ADD_FAILURE() << "reading released " << p.name << " did not fail";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("use of released storage"), std::string::npos);
      }
    }
  for (size_t b = 0; b < model.blocks.size(); ++b) {
    int64_t checked = 0, wrong = 0;
    model.blocks[b]->call({}, [&](const std::vector<Tensor>&) {
      for (const auto& p : block_params(b)) {
        const std::vector<float> got = to_vector(p.tensor);
        const std::vector<float>& want = original.at(p.name);
        for (size_t i = 0; i < got.size(); ++i, ++checked) {
          const float expect = gather == DType::BF16 ? round_to_bf16(want[i]) : want[i];
          if (got[i] != expect && wrong++ < 5)
            ADD_FAILURE() << p.name << "[" << i << "] = " << got[i] << ", expected " << expect;
        }
      }
      return Tensor::empty({1});
    });
    EXPECT_GT(checked, 0);
    EXPECT_EQ(wrong, 0) << "of " << checked << " gathered values in block " << b;
    // After its forward (no backward follows) the block is freed; the next one is being
    // gathered (prefetch); the others stay freed.
    for (size_t o = 0; o < model.blocks.size(); ++o)
      for (const auto& p : block_params(o))
        EXPECT_EQ(p.tensor.storage()->released(), o != b + 1)
            << p.name << " after the forward of block " << b;
  }
  // The final norm, a unit at the end: prefetched by the last block's forward, freed after its
  // own.
  ASSERT_FALSE(model.norm_f->named_parameters()[0].tensor.storage()->released());
  model.norm_f->call({}, [&](const std::vector<Tensor>&) {
    for (const auto& p : model.norm_f->named_parameters())
      EXPECT_EQ(to_vector(p.tensor), original.at("norm_f." + p.name)) << p.name;  // ones, zeros
    return Tensor::empty({1});
  });
  EXPECT_TRUE(model.norm_f->named_parameters()[0].tensor.storage()->released());
  // The parameters of no unit stay gathered, as gathered (the embeddings at both ends).
  const std::vector<float> embed = to_vector(model.tok_embed->weight);
  const std::vector<float>& want = original.at("tok_embed.weight");
  ASSERT_EQ(embed.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(embed[i], gather == DType::BF16 ? round_to_bf16(want[i]) : want[i]) << i;
}

// optim.offload under ZeRO-3: the step posts each piece's update to a host thread and returns;
// the next forward's gathers wait for their own pieces' updates and nothing posted after them.
// A job posted behind the step's updates stays blocked through a whole forward, and that
// forward's loss equals the one after an ordinary (synchronous) step, exactly.
TEST(Zero3Offload, NextForwardWaitsOnlyForItsOwnPiecesUpdates) {
  auto world = dist::world();
  std::vector<int64_t> x(16), y(16);
  for (int64_t i = 0; i < 16; ++i) {
    x[size_t(i)] = (i * 7 + 3 * world->rank()) % 40;
    y[size_t(i)] = (i * 5 + 1) % 40;
  }
  const Tensor ids = from_vector(x, {2, 8}), targets = from_vector(y, {2, 8});
  struct Run {
    models::Gpt model{tiny()};
    std::unique_ptr<ZeroDataParallel> zero;
    std::unique_ptr<optim::AdamW> adamw;
  };
  auto make = [&](bool offload) {
    auto r = std::make_unique<Run>();
    r->model.init_parameters(11);
    std::vector<std::string> units = r->model.block_names();
    units.push_back("norm_f");
    ZeroOptions options;
    options.stage = 3;
    options.offload_optimizer = offload;
    r->zero = std::make_unique<ZeroDataParallel>(
        r->model, units, options, world,
        std::make_shared<dist::SingleProcessGroup>("replicate", world->rank()));
    r->zero->broadcast_parameters();
    optim::AdamWConfig config;
    config.lr = 1e-2;
    config.weight_decay = 0.1;
    r->adamw = optim::make_adamw(r->zero->optimizer_params(), config);
    // One step: forward, backward, update.
    r->zero->begin_micro_step(0, 1);
    backward(r->model.loss(ids, targets));
    r->zero->after_backward(0, 1);
    r->adamw->step(1e-2);
    return r;
  };
  std::unique_ptr<Run> sync = make(false), offloaded = make(true);
  ASSERT_FALSE(offloaded->zero->optimizer_params().deferred.empty());
  const std::shared_ptr<OrderedWorker> worker =
      offloaded->zero->optimizer_params().deferred.front().worker;
  ASSERT_TRUE(worker);
  // Behind the updates: a job under a key of its own, held until the forward below is over
  // (or 10 s, should the forward wait for it).
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  worker->post(offloaded->zero->pieces().size(),
               [released] { released.wait_for(std::chrono::seconds(10)); });
  sync->zero->sync_parameters();
  offloaded->zero->sync_parameters();
  const float want = item(sync->model.loss(ids, targets));
  const float got = item(offloaded->model.loss(ids, targets));
  const int64_t pending = worker->pending();
  release.set_value();
  EXPECT_EQ(pending, 1) << "the forward waited for work posted after its pieces' updates";
  EXPECT_EQ(got, want) << "the forward after the offloaded step used other weights";
  offloaded->zero->settle();
  EXPECT_EQ(worker->pending(), 0);
  // The masters agree piece by piece once settled.
  ASSERT_EQ(sync->zero->pieces().size(), offloaded->zero->pieces().size());
  for (size_t k = 0; k < sync->zero->pieces().size(); ++k)
    EXPECT_EQ(to_vector(sync->zero->pieces()[k].value),
              to_vector(offloaded->zero->pieces()[k].value))
        << sync->zero->pieces()[k].name;
}

INSTANTIATE_TEST_SUITE_P(GatherDtypes, Zero3Gather, testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The gathered copies' check (resilience.consistency_every): every rank of the shard group holds
// the same copies of the parameters. Under stage 2 a bit flipped in one rank's copy of an element
// another rank owns makes that rank's hash, alone, differ; under stage 3 (the copies gathered
// again from the shards) the ranks agree, and a bit flipped in a shard reaches every copy alike:
// without a replica of the shard it cannot be seen (docs/resilience.md).
std::vector<int64_t> gathered(dist::ProcessGroup& group, uint64_t h) {
  Tensor all = Tensor::empty({group.size()}, DType::I64);
  group.all_gather(from_vector(std::vector<int64_t>{int64_t(h)}, {1}), all)->wait();
  return to_vector_i64(all);
}

void flip_first_bit(const Tensor& t) {
  *static_cast<uint32_t*>(t.as_strided({1}, {1}, t.offset()).data_ptr()) ^= 1u;
}

TEST(ZeroCopies, ARankWhoseCopyDiffersIsTheOneApart) {
  auto world = dist::world();
  const int last = world->size() - 1;  // one process: its own copy, its hash before and after
  for (int stage : {2, 3}) {
    models::Gpt model(tiny());
    model.init_parameters(11);
    ZeroOptions options;
    options.stage = stage;
    ZeroDataParallel zero(model, model.block_names(), options, world,
                          std::make_shared<dist::SingleProcessGroup>("replicate", world->rank()));
    zero.broadcast_parameters();
    const std::vector<int64_t> before = gathered(*world, zero.copies_hash());
    EXPECT_EQ(std::count(before.begin(), before.end(), before[0]), world->size())
        << "stage " << stage;
    if (stage == 2) {
      // The token embedding's first element: rank 0's to own; the last rank's copy flipped.
      if (world->rank() == last) flip_first_bit(model.tok_embed->weight);
      const std::vector<int64_t> h = gathered(*world, zero.copies_hash());
      for (int r = 0; r < last; ++r) EXPECT_EQ(h[size_t(r)], before[0]) << "rank " << r;
      EXPECT_NE(h[size_t(last)], before[0]) << "the flipped copy was not seen";
    } else {
      // A flipped shard element: every rank gathers it, so every copy is alike (and changed).
      if (world->rank() == 0) flip_first_bit(zero.pieces()[0].value);
      const std::vector<int64_t> h = gathered(*world, zero.copies_hash());
      EXPECT_EQ(std::count(h.begin(), h.end(), h[0]), world->size());
      EXPECT_NE(h[0], before[0]);
    }
  }
}

}  // namespace
}  // namespace loom::parallel
