// Running a pipeline schedule (pipeline_schedule.h) on this rank of `group`: each pass is a
// forward or backward of one of this rank's model chunks on one micro-batch; activations go
// to the next stage and gradients to the previous one by send/recv. Sends are not waited for
// until the end (they never block a pass, as in the schedules' simulation); receives block.
#pragma once
#include <functional>
#include <vector>

#include "loom/parallel/functional.h"
#include "loom/parallel/pipeline_schedule.h"

namespace loom::parallel {

struct PipelineStages {
  // chunk -> its forward (the stage's blocks; parameters captured), for this rank's chunks.
  std::vector<std::function<Tensor(const Tensor&)>> forward;
  // The first stage's input of micro-batch m (called on the rank holding stage 0).
  std::function<Tensor(int64_t m)> input;
  // The last stage's loss of micro-batch m from its output (on the rank holding the last
  // stage); backward starts from loss / micro_batches, so gradients accumulate to the mean.
  std::function<Tensor(const Tensor& out, int64_t m)> loss;
  Shape activation_shape;  // what travels between stages (every micro-batch the same)
  Device device;           // where it lives: the model's device
};

// The blocks [begin, end) of each of `stages` stages over `blocks` blocks, in order: as even
// as possible, the first blocks % stages stages one block more. More stages than blocks is an
// error.
std::vector<std::pair<int64_t, int64_t>> split_into_stages(int64_t blocks, int64_t stages);

// Wall seconds of pipeline steps on one rank, and of them those spent waiting for another
// rank's activations or gradients (the bubble, as this rank lived it).
struct PipelineTimes {
  double total = 0, waiting = 0;
};

// Runs every pass of this rank; returns the sum of the micro-batches' losses on the rank that
// holds the last stage (0 elsewhere). Gradients accumulate in the chunks' parameters. times:
// where to add this step's seconds, or nullptr.
double run_pipeline(const PipeSchedule& schedule, const PipelineStages& stages,
                    const GroupPtr& group, PipelineTimes* times = nullptr);

// Forward only (evaluation, no gradients): micro-batch 0 through every stage in order, a
// schedule's layout of P ranks x `chunks`. Returns the last stage's loss on every rank.
double run_pipeline_forward(const PipelineStages& stages, int64_t chunks, const GroupPtr& group);

}  // namespace loom::parallel
