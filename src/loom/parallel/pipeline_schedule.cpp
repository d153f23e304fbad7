#include "loom/parallel/pipeline_schedule.h"

#include <algorithm>
#include <climits>
#include <map>
#include <sstream>
#include <tuple>

#include "loom/core/error.h"

namespace loom::parallel {

std::string PipeSchedule::str() const {
  std::ostringstream s;
  for (int64_t p = 0; p < ranks; ++p) {
    s << "rank " << p << ":";
    for (const PipePass& pass : passes[size_t(p)]) {
      s << ' ' << (pass.forward ? 'F' : pass.weight ? 'W' : 'B') << pass.micro;
      if (chunks > 1) s << '.' << pass.chunk;
    }
    s << '\n';
  }
  return s.str();
}

namespace {

// Interleaved order of a rank's k-th forward (or backward) pass: micro-batches go in groups of
// P through chunk 0, then the same group through chunk 1, ...; backwards visit chunks in
// reverse.
PipePass interleaved_pass(int64_t k, int64_t P, int64_t V, bool forward) {
  const int64_t group = k / (P * V), in_group = k % (P * V);
  int64_t chunk = in_group / P;
  if (!forward) chunk = V - 1 - chunk;
  return {forward, group * P + in_group % P, chunk};
}

// A pass's time: F, B and W one unit each; a backward not split into B and W two.
int64_t duration(const PipePass& pass, bool split) {
  return pass.forward || pass.weight || split ? 1 : 2;
}

}  // namespace

PipeSchedule make_pipe_schedule(ScheduleKind kind, int64_t P, int64_t M, int64_t V) {
  LOOM_CHECK(P >= 1 && M >= 1 && V >= 1) << "pipeline schedule: ranks " << P << ", micro-batches "
                                         << M << " and chunks " << V << " must all be at least 1";
  LOOM_CHECK(V == 1 || kind == ScheduleKind::Interleaved1F1B)
      << "pipeline schedule: " << V << " chunks per rank need the interleaved schedule";
  LOOM_CHECK(kind != ScheduleKind::Interleaved1F1B || M % P == 0)
      << "pipeline schedule: interleaved 1F1B needs the micro-batches (" << M
      << ") to be a multiple of the pipeline ranks (" << P << ")";
  PipeSchedule s{kind, P, V, M, std::vector<std::vector<PipePass>>(size_t(P))};
  for (int64_t p = 0; p < P; ++p) {
    auto& out = s.passes[size_t(p)];
    if (kind == ScheduleKind::GPipe) {
      for (int64_t m = 0; m < M; ++m) out.push_back({true, m, 0});
      for (int64_t m = 0; m < M; ++m) out.push_back({false, m, 0});
      continue;
    }
    const int64_t total = M * V;  // forward passes (and backward passes) on this rank
    const int64_t warmup = kind != ScheduleKind::Interleaved1F1B
                               ? std::min(P - p - 1, M)
                               : std::min((P - p - 1) * 2 + (V - 1) * P, total);
    auto fwd = [&](int64_t k) {
      return V == 1 ? PipePass{true, k, 0} : interleaved_pass(k, P, V, true);
    };
    auto bwd = [&](int64_t k) {
      return V == 1 ? PipePass{false, k, 0} : interleaved_pass(k, P, V, false);
    };
    // ZB-H1: rank p's W passes follow its B passes p micro-batches late (the first p B
    // passes have none after them, the last p W passes come at the end), so its W passes fill
    // the time it would wait in 1F1B; it holds at most P micro-batches' activations.
    const bool zb = kind == ScheduleKind::ZeroBubbleH1;
    int64_t f = 0, b = 0, w = 0;
    auto backward = [&] {
      out.push_back(bwd(b++));
      if (zb && b > p) out.push_back({false, w++, 0, true});
    };
    for (; f < warmup; ++f) out.push_back(fwd(f));
    for (; f < total; ++f) {
      out.push_back(fwd(f));
      backward();
    }
    while (b < total) backward();
    while (zb && w < total) out.push_back({false, w++, 0, true});
  }
  return s;
}

PipeSimulation simulate(const PipeSchedule& s) {
  PipeSimulation sim;
  const int64_t P = s.ranks, S = s.stages();
  const bool split = s.split_backward();
  // When each pass ended: (kind 0 F / 1 B / 2 W, micro, stage).
  std::map<std::tuple<int, int64_t, int64_t>, int64_t> ended;
  auto end_of = [&](int kind, int64_t micro, int64_t stage) {
    const auto it = ended.find({kind, micro, stage});
    return it == ended.end() ? INT64_MAX : it->second;
  };
  std::vector<size_t> next(size_t(P), 0);
  std::vector<int64_t> free_at(size_t(P), 0), busy(size_t(P), 0), in_flight(size_t(P), 0);
  sim.peak_in_flight.assign(size_t(P), 0);
  size_t remaining = 0;
  for (const auto& r : s.passes) remaining += r.size();
  for (int64_t t = 0; remaining > 0; ++t) {
    bool started = false, running = false;
    for (int64_t p = 0; p < P; ++p) {
      if (free_at[size_t(p)] > t) {
        running = true;
        continue;
      }
      if (next[size_t(p)] == s.passes[size_t(p)].size()) continue;
      const PipePass& pass = s.passes[size_t(p)][next[size_t(p)]];
      LOOM_CHECK(pass.micro >= 0 && pass.micro < s.micro_batches && pass.chunk >= 0 &&
                 pass.chunk < s.chunks && (!pass.weight || split))
          << "pipeline schedule: rank " << p << " has a pass outside the micro-batches/chunks";
      const int64_t stage = s.stage_of(p, pass.chunk);
      const int kind = pass.forward ? 0 : pass.weight ? 2 : 1;
      bool ready;
      if (pass.forward)
        ready = stage == 0 || end_of(0, pass.micro, stage - 1) <= t;
      else if (pass.weight)
        ready = end_of(1, pass.micro, stage) <= t;
      else
        ready = end_of(0, pass.micro, stage) <= t &&
                (stage == S - 1 || end_of(1, pass.micro, stage + 1) <= t);
      if (!ready) continue;
      const int64_t d = duration(pass, split);
      if (!ended.emplace(std::make_tuple(kind, pass.micro, stage), t + d).second) {
        sim.error = "rank " + std::to_string(p) + " runs " + "FBW"[kind] +
                    std::to_string(pass.micro) + " of stage " + std::to_string(stage) + " twice";
        return sim;
      }
      // Activations are held from the forward until the weights' gradients are made.
      if (pass.forward) ++in_flight[size_t(p)];
      if (pass.weight || (!pass.forward && !split)) --in_flight[size_t(p)];
      sim.peak_in_flight[size_t(p)] = std::max(sim.peak_in_flight[size_t(p)], in_flight[size_t(p)]);
      free_at[size_t(p)] = t + d;
      busy[size_t(p)] += d;
      ++next[size_t(p)];
      --remaining;
      started = true;
    }
    if (!started && !running) {
      std::ostringstream e;
      e << "deadlock after " << t << " time units; waiting:";
      for (int64_t p = 0; p < P; ++p)
        if (next[size_t(p)] < s.passes[size_t(p)].size()) {
          const PipePass& pass = s.passes[size_t(p)][next[size_t(p)]];
          e << " rank " << p << " "
            << (pass.forward  ? 'F'
                : pass.weight ? 'W'
                              : 'B')
            << pass.micro << "." << pass.chunk;
        }
      sim.error = e.str();
      return sim;
    }
  }
  const int64_t expected = (split ? 3 : 2) * s.micro_batches * S;
  if (int64_t(ended.size()) != expected) {
    sim.error = "the schedule runs " + std::to_string(ended.size()) + " passes, expected " +
                std::to_string(expected);
    return sim;
  }
  sim.steps = *std::max_element(free_at.begin(), free_at.end());
  int64_t idle = 0, work = 0;
  for (int64_t p = 0; p < P; ++p) {
    idle += sim.steps - busy[size_t(p)];
    work += busy[size_t(p)];
  }
  sim.bubble = double(idle) / double(work);
  sim.ok = true;
  return sim;
}

}  // namespace loom::parallel
