// Pipeline bubble: how much of a step each rank of a P-stage pipeline spends idle under GPipe,
// 1F1B, interleaved 1F1B and ZB-H1, measured by running the real executor (run_pipeline:
// send/recv between ranks, autograd backward, ZB-H1's weight gradients deferred to its W
// passes) next to the analytic fraction (P-1)/(M+P-1), interleaved (P-1)/(V M+P-1), ZB-H1
// (P-1)/(3M+P-1).
//
// Every stage's forward takes a fixed time and its backward twice that (sleeps: this machine
// has 2 cores for 4 ranks, so real compute would measure the cores' sharing, not the
// schedule); split (ZB-H1), half of the backward is its input gradient (B) and half its weight
// gradient (W). Bubble = 1 - busy / step time, averaged over the ranks, median of 3 steps.
// Run: mpirun -np 4 pipeline_bubble [forward_ms]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "loom/autograd/backward_hook.h"
#include "loom/autograd/engine.h"
#include "loom/dist/world.h"
#include "loom/ops/ops.h"
#include "loom/parallel/pipeline.h"

using namespace loom;

namespace {

using Clock = std::chrono::steady_clock;

double run_step(const parallel::PipeSchedule& schedule, double forward_ms,
                const std::shared_ptr<dist::ProcessGroup>& group,
                const std::vector<Tensor>& weights) {
  double busy_ms = 0;
  auto work = [&busy_ms](double ms) {
    std::this_thread::sleep_for(std::chrono::microseconds(int64_t(ms * 1000)));
    busy_ms += ms;
  };
  parallel::PipelineStages st;
  for (int64_t c = 0; c < schedule.chunks; ++c)
    st.forward.push_back([&, c](const Tensor& x) {
      work(forward_ms);
      return with_backward_hook(mul(x, weights[size_t(c)]), [&] {
        work(forward_ms);  // the input's gradient
        if (DeferredWeightGradients* later = DeferredWeightGradients::current())
          later->add([&] { work(forward_ms); });  // the weights', in the W pass
        else
          work(forward_ms);
      });
    });
  st.input = [](int64_t) { return ones({4, 8}); };
  st.loss = [](const Tensor& out, int64_t) { return mean(out); };
  st.activation_shape = {4, 8};
  group->barrier()->wait();
  const auto t0 = Clock::now();
  parallel::run_pipeline(schedule, st, group);
  group->barrier()->wait();
  const double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  for (const Tensor& w : weights) w.set_grad(Tensor());
  // The mean over ranks of this rank's idle fraction.
  Tensor t = from_vector(std::vector<float>{float(1.0 - busy_ms / total_ms)}, {1});
  group->all_reduce(t, dist::ReduceOp::Sum)->wait();
  return double(t.data<float>()[0]) / double(group->size());
}

}  // namespace

int main(int argc, char** argv) {
  const double forward_ms = argc > 1 ? std::atof(argv[1]) : 10.0;
  auto world = dist::init_world();
  const int64_t P = world->size();
  if (world->rank() == 0)
    std::printf(
        "pipeline bubble, %lld ranks, stage forward %.0f ms, backward %.0f ms\n"
        "schedule        M  V   measured  analytic  measured/analytic\n",
        (long long)P, forward_ms, 2 * forward_ms);
  for (int64_t M : {8, 16})
    for (auto [kind, V, name] :
         {std::tuple{parallel::ScheduleKind::GPipe, 1, "gpipe"},
          std::tuple{parallel::ScheduleKind::OneFOneB, 1, "1f1b"},
          std::tuple{parallel::ScheduleKind::Interleaved1F1B, 2, "interleaved"},
          std::tuple{parallel::ScheduleKind::ZeroBubbleH1, 1, "zb-h1"}}) {
      const auto schedule = parallel::make_pipe_schedule(kind, P, M, V);
      std::vector<Tensor> weights;
      for (int64_t c = 0; c < V; ++c) {
        weights.push_back(full({4, 8}, 1.0));
        weights.back().set_requires_grad(true);
      }
      // A scaled step time keeps the chunks' total work equal across V.
      std::vector<double> bubbles;
      for (int rep = 0; rep < 3; ++rep)
        bubbles.push_back(run_step(schedule, forward_ms / double(V), world, weights));
      std::sort(bubbles.begin(), bubbles.end());
      const bool zb = kind == parallel::ScheduleKind::ZeroBubbleH1;
      const double analytic = double(P - 1) / double((zb ? 3 : V) * M + P - 1);
      if (world->rank() == 0)
        std::printf("%-12s %4lld %2lld   %7.1f%%  %7.1f%%  %6.2f\n", name, (long long)M,
                    (long long)V, 100 * bubbles[1], 100 * analytic, bubbles[1] / analytic);
    }
  world.reset();
  dist::shutdown_world();
  return 0;
}
