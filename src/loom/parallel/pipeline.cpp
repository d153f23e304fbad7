#include "loom/parallel/pipeline.h"

#include <chrono>
#include <map>
#include <optional>

#include "loom/autograd/engine.h"
#include "loom/ops/ops.h"

namespace loom::parallel {

std::vector<std::pair<int64_t, int64_t>> split_into_stages(int64_t blocks, int64_t stages) {
  LOOM_CHECK(stages >= 1 && stages <= blocks) << "pipeline: " << stages << " stages for " << blocks
                                              << " blocks (each stage needs at least one)";
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (int64_t s = 0; s < stages; ++s) {
    const int64_t n = blocks / stages + (s < blocks % stages ? 1 : 0);
    out.emplace_back(at, at + n);
    at += n;
  }
  return out;
}

double run_pipeline(const PipeSchedule& s, const PipelineStages& stages, const GroupPtr& group,
                    PipelineTimes* times) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double waiting = 0;
  const int64_t P = s.ranks, S = s.stages(), p = group->rank(), M = s.micro_batches;
  LOOM_CHECK(group->size() == P && int64_t(stages.forward.size()) == s.chunks)
      << "run_pipeline: a schedule of " << P << " ranks x " << s.chunks << " chunks on a group of "
      << group->size() << " with " << stages.forward.size() << " chunk functions";
  // Stage s lives on rank s % P as chunk s / P.
  auto rank_of = [&](int64_t stage) { return int(stage % P); };
  // Tags keep micro-batches, chunks and directions apart.
  auto tag = [&](int64_t m, int64_t stage, bool grad) { return int((m * S + stage) * 2 + grad); };
  struct Held {
    Tensor input, output;  // input: a leaf when it came from another stage
  };
  std::map<std::pair<int64_t, int64_t>, Held> held;                            // (micro, chunk)
  std::map<std::pair<int64_t, int64_t>, DeferredWeightGradients> weight_work;  // B's, for W
  std::vector<dist::WorkPtr> sends;
  std::vector<Tensor> sent;       // kept alive until their sends finish
  std::map<int, Tensor> mailbox;  // between two chunks of this rank (one rank, interleaved)
  auto send = [&](const Tensor& t, int dst, int tg) {
    Tensor payload = contiguous(t.detach());
    if (dst == p) {
      mailbox[tg] = payload;
      return;
    }
    sends.push_back(group->send(payload, dst, tg));
    sent.push_back(payload);
  };
  auto recv = [&](int src, int tg) {
    if (src == p) {
      auto it = mailbox.find(tg);
      LOOM_CHECK(it != mailbox.end()) << "run_pipeline: the schedule uses a tensor of this rank "
                                      << "before producing it (tag " << tg << ")";
      Tensor t = it->second;
      mailbox.erase(it);
      return t;
    }
    Tensor t = Tensor::empty(stages.activation_shape, DType::F32, stages.device);
    const auto asked = clock::now();
    group->recv(t, src, tg)->wait();
    waiting += std::chrono::duration<double>(clock::now() - asked).count();
    return t;
  };
  double loss_sum = 0;
  for (const PipePass& pass : s.passes[size_t(p)]) {
    const int64_t stage = s.stage_of(p, pass.chunk);
    if (pass.forward) {
      Tensor in;
      if (stage == 0) {
        in = stages.input(pass.micro);
      } else {
        in = recv(rank_of(stage - 1), tag(pass.micro, stage, false)).detach();
        in.set_requires_grad(true);
      }
      Tensor out = stages.forward[size_t(pass.chunk)](in);
      if (stage == S - 1) {
        Tensor loss = stages.loss(out, pass.micro);
        loss_sum += double(item(loss));
        out = mul_scalar(loss, 1.0 / double(M));
      } else {
        send(out, rank_of(stage + 1), tag(pass.micro, stage + 1, false));
      }
      held[{pass.micro, pass.chunk}] = {in, out};
    } else if (pass.weight) {  // the weights' gradients the B pass left for later
      weight_work.at({pass.micro, pass.chunk}).run();
      weight_work.erase({pass.micro, pass.chunk});
    } else {
      Held h = held.at({pass.micro, pass.chunk});
      held.erase({pass.micro, pass.chunk});
      // A split backward (B) makes what the input needs now, the weights' gradients in W.
      std::optional<DeferredWeightGradients::Scope> split;
      if (s.split_backward()) split.emplace(weight_work[{pass.micro, pass.chunk}]);
      if (stage == S - 1) {
        backward(h.output);
      } else {
        backward({h.output}, {recv(rank_of(stage + 1), tag(pass.micro, stage, true))});
      }
      split.reset();
      if (stage > 0) send(h.input.grad(), rank_of(stage - 1), tag(pass.micro, stage - 1, true));
    }
  }
  for (auto& w : sends) w->wait();
  if (times) {
    times->total += std::chrono::duration<double>(clock::now() - start).count();
    times->waiting += waiting;
  }
  return loss_sum;
}

double run_pipeline_forward(const PipelineStages& stages, int64_t chunks, const GroupPtr& group) {
  NoGradGuard no_grad;
  const int64_t P = group->size(), p = group->rank(), S = P * chunks;
  Tensor carried;  // the previous stage's output when this rank ran it too
  float loss = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (s % P != p) continue;
    Tensor in;
    if (s == 0) {
      in = stages.input(0);
    } else if ((s - 1) % P == p) {
      in = carried;
    } else {
      in = Tensor::empty(stages.activation_shape, DType::F32, stages.device);
      group->recv(in, int((s - 1) % P), int(s))->wait();
    }
    Tensor out = stages.forward[size_t(s / P)](in);
    if (s == S - 1) {
      loss = float(item(stages.loss(out, 0)));
    } else if ((s + 1) % P == p) {
      carried = out;
    } else {
      group->send(contiguous(out), int((s + 1) % P), int(s + 1))->wait();
    }
  }
  Tensor t = from_vector(std::vector<float>{loss}, {1});
  group->all_reduce(t, dist::ReduceOp::Sum)->wait();  // only the last stage's rank adds a loss
  return double(t.data<float>()[0]);
}

}  // namespace loom::parallel
