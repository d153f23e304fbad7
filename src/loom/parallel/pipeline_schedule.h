// Pipeline schedules as data: for each pipeline rank, the ordered list of forward and backward
// passes it runs (micro-batch, model chunk). Where activations and gradients travel follows
// from the stage layout: stage s = chunk c on rank p is s = c * P + p (with V chunks per rank,
// "virtual stages", rank p holds stages p, p + P, ...); a forward of stage s > 0 needs the
// forward output of stage s - 1, a backward of stage s < S - 1 the backward output of s + 1.
//
//   GPipe:            all forwards, then all backwards (holds M micro-batches' activations).
//   1F1B:             P - p - 1 warm-up forwards, then one forward and one backward in turn,
//                     then the remaining backwards (holds at most P - p).
//   Interleaved 1F1B: 1F1B over V chunks per rank (Narayanan et al. 2021): forwards visit the
//                     chunks in groups of P micro-batches, backwards the chunks in reverse;
//                     needs M to be a multiple of P. Shrinks the pipeline bubble by V.
//   ZB-H1:            zero-bubble (Qi et al. 2024): each backward split into B (the input's
//                     gradient, which the rank before waits for) and W (the weights'
//                     gradients, which nobody waits for), in 1F1B's order of F and B with rank
//                     p's W passes p micro-batches behind its B passes: they fill the time 1F1B
//                     waits, and the bubble shrinks from (P - 1) / M of the work to a third
//                     of it (M >= P), each rank holding at most P micro-batches' activations
//                     (from F to W: the peak of 1F1B's first rank).
//
// simulate() runs a schedule with sends that never block (as nonblocking MPI sends are), every
// pass timed -- F, B and W one unit each, a backward not split two -- and reports a deadlock or
// any pass missing, repeated or out of order, the time and the bubble.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/parallel/topology.h"  // ScheduleKind

namespace loom::parallel {

struct PipePass {
  bool forward = true;
  int64_t micro = 0;    // micro-batch
  int64_t chunk = 0;    // model chunk on this rank (0 unless interleaved)
  bool weight = false;  // (not forward) a W pass: the weight gradients of a split backward
};

struct PipeSchedule {
  ScheduleKind kind;
  int64_t ranks = 1, chunks = 1, micro_batches = 1;
  std::vector<std::vector<PipePass>> passes;  // per rank, in order

  int64_t stages() const { return ranks * chunks; }
  // Backward passes are split into B (input gradients) and W (weight gradients).
  bool split_backward() const { return kind == ScheduleKind::ZeroBubbleH1; }
  int64_t stage_of(int64_t rank, int64_t chunk) const { return chunk * ranks + rank; }
  // One line per rank: "rank 0: F0 F1 B0 W0 ..." (interleaved: "F3.1" = micro-batch 3, chunk 1).
  std::string str() const;
};

// ranks P >= 1, micro_batches M >= 1, chunks V >= 1 (> 1 only for interleaved, which also
// needs M % P == 0); invalid combinations are an error naming the rule.
PipeSchedule make_pipe_schedule(ScheduleKind kind, int64_t ranks, int64_t micro_batches,
                                int64_t chunks = 1);

struct PipeSimulation {
  bool ok = false;
  std::string error;  // what went wrong (a deadlock names each rank's next pass)
  int64_t steps = 0;  // time units until the last pass ends (F, B, W: 1; a whole backward: 2)
  // Idle time over busy time, summed over the ranks: 1F1B's is (P - 1) / M.
  double bubble = 0;
  std::vector<int64_t> peak_in_flight;  // per rank: most micro-batch chunks forwarded but not
                                        // yet backwarded (activations held: until W if split)
};

PipeSimulation simulate(const PipeSchedule& schedule);

}  // namespace loom::parallel
