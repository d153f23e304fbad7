// A node of the backward graph: the backward function of one op application.
//
// Tensors own the node that produced them (Tensor::grad_fn), and nodes own the edges to the
// nodes of their inputs, so a graph lives exactly as long as some output of it does and
// several independent graphs (micro-batches) coexist without any global tape.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

// Where the gradient of one op input flows: into output `input_nr`... of `node`, or, when the
// input was a leaf that requires grad, into that leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;        // the producer of the input (null for leaves / no-grad inputs)
  uint32_t output_nr = 0;            // which output of that producer the input was
  std::shared_ptr<TensorImpl> leaf;  // set when the input is a leaf requiring grad
  bool active() const { return node != nullptr || leaf != nullptr; }
};

struct Node {
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  // grad_outputs[i] is the gradient of output i (undefined if no gradient reached it).
  // Returns one gradient per input edge (undefined where not needed).
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;
  // A node whose input 0 is a leaf, and whose other inputs take no gradient, may add its
  // gradient straight into that leaf's existing .grad (contiguous, the leaf's dtype) and return
  // true; the engine then skips backward(). An embedding's backward touches only the rows it
  // looked up, where backward() would return a dense (V, C) tensor for the engine to add.
  virtual bool backward_into(const std::vector<Tensor>& grad_outputs, const Tensor& grad) {
    (void)grad_outputs, (void)grad;
    return false;
  }
  // Drops saved tensors after backward so activations are freed as early as possible.
  virtual void release() {}

  std::vector<Edge> inputs;
  uint32_t num_outputs = 1;
  // Creation order; the engine runs ready nodes latest-first, i.e. close to reverse forward
  // order, which is the order DDP/FSDP hooks expect gradients to become ready in.
  uint64_t sequence_nr = 0;
  // The profiler's name of the module whose forward recorded the node (null unless a profile
  // window was recording then): its backward event says which module it belongs to.
  const char* trace_module = nullptr;
};

// The module whose forward runs on this thread, as the profiler names it (null: none known).
const char* current_trace_module();
// Sets it for a scope (Module::call, while the profiler records).
class TraceModuleScope {
 public:
  explicit TraceModuleScope(const char* module);
  ~TraceModuleScope();
  TraceModuleScope(const TraceModuleScope&) = delete;
  TraceModuleScope& operator=(const TraceModuleScope&) = delete;

 private:
  const char* previous_;
};

// True when gradients should be recorded on this thread (see NoGradGuard).
bool grad_mode_enabled();

// Disables graph recording for its scope (optimizer steps, evaluation, recompute forwards).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Mixed precision: while an AutocastGuard(BF16) is active on this thread, linear, matmul and
// attention compute on bf16 copies of their f32 operands (GEMMs accumulate in f32 and return
// f32); every other op, the parameters (f32 master weights), the gradients and the optimizer
// state stay f32. One exception keeps bf16 between two bf16 kernels: a linear asked for its
// compute dtype (AutocastOutput::Compute: attention's q, k, v) returns bf16, attention given
// bf16 returns bf16, and a linear takes a bf16 input as its operand; their gradients are bf16.
// Backward follows the dtypes its forward chose, whatever the mode is then (the engine turns
// autocast off for the backward pass; a recompute restores the forward's).
DType autocast_dtype();  // F32: off
class AutocastGuard {
 public:
  explicit AutocastGuard(DType compute);  // F32 or BF16
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType previous_;
  bool opens_region_;  // a BF16 guard: see bf16_copy_of
};

// The bf16 copy of an f32 tensor for autocast's GEMMs. A parameter (a leaf that requires grad)
// is copied once per bf16 region, the outermost BF16 AutocastGuard's lifetime (a training
// step's forward and backward over all its micro-batches), and the copy reused by the forward
// and the backward of every use: weights do not change inside a region (the optimizer steps
// outside it). The copies are dropped when the region ends, or earlier by forget_bf16_copy
// (ZeRO-3, when it frees a gathered parameter). Anything else is copied on every call.
Tensor bf16_copy_of(const Tensor& t);
void forget_bf16_copy(const Tensor& param);

// Turns recording back on inside a NoGradGuard (the recompute of activation checkpointing).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Whether an op with these inputs must record a node.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// The edge gradients of `t` flow along.
Edge edge_of(const Tensor& t);

// Connects `node` to `inputs` and makes it the grad_fn of `outputs` (output i = node output i).
// Does nothing when recording is off or (unless `always`) no input requires grad. Every op:
//   auto node = std::make_shared<MulBackward>(a, b);
//   record(node, {a, b}, {out});
void record(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, bool always = false);

}  // namespace loom
