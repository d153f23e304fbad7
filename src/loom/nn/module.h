// Module: a tree of layers with fully qualified parameter names ("blocks.3.attn.qkv.weight").
//
// Parameters are registered with an initialiser and created empty; init_parameters(seed)
// fills each one from the Philox stream keyed by (seed, "init", its full name): element i of
// the whole tensor (row-major) is draw i, so a model gets the same initial weights however it
// is later sharded.
//
// Built under a DeferInit scope, parameters are shapes without memory and init_parameters
// only records the seed: parallelism (parallel/parallelize.h) then allocates and fills just
// the elements this process holds, so no process ever holds the whole model (as torchtitan's
// meta-device build, or DeepSpeed's zero.Init).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {
class OrderedWorker;
}

namespace loom::nn {

struct Init {
  enum Kind { Normal, Uniform, XavierUniform, Zeros, Ones } kind = Normal;
  float a = 0.0f;   // Normal: mean; Uniform: low
  float b = 0.02f;  // Normal: std; Uniform: high
  static Init normal(float std) { return {Normal, 0.0f, std}; }
  static Init uniform(float lo, float hi) { return {Uniform, lo, hi}; }
  static Init xavier_uniform() { return {XavierUniform, 0.0f, 0.0f}; }  // fan from a 2-D shape
  static Init zeros() { return {Zeros, 0.0f, 0.0f}; }
  static Init ones() { return {Ones, 0.0f, 0.0f}; }
};

// A stretch of a part's row-major elements and where it lies in the whole tensor: the part's
// elements [local, local + length) are the whole's [whole, whole + length).
struct ElementRun {
  int64_t local, whole, length;
};
// The runs of `outer` (a part of a part) through `inner` (that part's runs in the whole).
std::vector<ElementRun> compose_runs(const std::vector<ElementRun>& outer,
                                     const std::vector<ElementRun>& inner);

// What a deferred parameter's initial values are: its initialiser and seed, keyed by its
// full name, over its whole shape.
struct ParameterInit {
  std::string name;
  Shape whole_shape;
  Init init;
  uint64_t seed = 0;
};
// Fills dst (contiguous) with the initial values of elements [local_begin, local_begin +
// dst.numel()) of a part of the parameter whose elements lie in the whole as `runs` say --
// the same values as init_parameters gives those elements of the whole tensor.
void fill_initial(const Tensor& dst, const ParameterInit& init, const std::vector<ElementRun>& runs,
                  int64_t local_begin = 0);

// While one is alive on this thread, modules register their parameters without memory
// (Tensor::unallocated) and init_parameters defers their values (see take_deferred_inits).
class DeferInit {
 public:
  DeferInit();
  ~DeferInit();
  DeferInit(const DeferInit&) = delete;
  DeferInit& operator=(const DeferInit&) = delete;

 private:
  bool outer_;
};

struct NamedParameter {
  std::string name;
  Tensor tensor;
  bool weight_decay;  // false for norms, biases and embeddings by default
};

// The parameters an optimizer steps and, where their owner keeps the optimizer's moments in
// storage of its own (ZeRO's flat shards), views of them (else empty): what a parallelised
// model gives the optimizer (parallel::ParallelModel::optimizer_params, optim::make_adamw).
// With `deferred` (aligned with params, else empty), the owner waits before it uses a parameter
// again: the step may post params[i]'s update to deferred[i].worker under deferred[i].key and
// return (ZeRO-3's offloaded step, run while the next forward gathers what it has updated).
struct DeferredUpdate {
  std::shared_ptr<OrderedWorker> worker;
  size_t key = 0;
};
// Where a piece of a parameter (one of ZeRO's shards) lies in it.
struct PieceOfParameter {
  std::string name;            // the parameter's
  Shape shape;                 // the whole parameter's
  int64_t begin = 0, end = 0;  // the piece's row-major elements of it
};
// For pieces, a collective over the ranks that share the parameters: values[i] (piece i's
// shape, or undefined) -> the whole parameter's values for each defined values[i], assembled
// from every rank's values of its pieces of it. Every rank calls it alike; wanted(name, shape)
// says which parameters any rank may ask for (the same answer on every rank).
using GatherWholes = std::function<std::vector<Tensor>(
    const std::vector<Tensor>& values,
    const std::function<bool(const std::string&, const Shape&)>& wanted)>;
struct OptimizerParams {
  std::vector<NamedParameter> params;
  std::vector<Tensor> exp_avg, exp_avg_sq;
  std::vector<DeferredUpdate> deferred;
  // Pieces (ZeRO): where each lies in its parameter (aligned with params) and how to assemble
  // wholes from them (Muon orthogonalises whole matrices). Empty / unset: params are whole.
  std::vector<PieceOfParameter> pieces;
  GatherWholes gather_wholes;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of the tree, depth first in registration order, with full names.
  std::vector<NamedParameter> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;
  // Fills every parameter from its initialiser, keyed by (seed, "init", full name); a
  // parameter without memory (built under DeferInit) keeps the seed for later instead.
  void init_parameters(uint64_t seed);
  // The deferred parameters' initial values, by full name, handed over to whoever allocates
  // their pieces (parallelism): they are no longer deferred here.
  std::map<std::string, ParameterInit> take_deferred_inits();

  // Moves every parameter (in place: same tensors, new storage) and every buffer of the tree
  // to `device`: the model is built on the host, then trained where it is put (a parameter
  // without memory, built under DeferInit, only changes its device).
  void to(Device device);
  // Where the parameters live (the first one's device; the host for a module without any).
  Device device() const;

  void set_training(bool training);  // recursively
  // Names every module of the tree for the profiler by its path ("blocks.3.attn"; this one
  // gets `root`): their forward calls become trace events of that name.
  void name_for_trace(const std::string& root = "model");
  bool training() const { return training_; }

  // fn(path, module) for every module below this one, depth first in registration order
  // ("blocks.3.attn.qkv").
  void for_each_submodule(const std::function<void(const std::string&, Module&)>& fn,
                          const std::string& prefix = "");
  // The submodule at a dotted path ("blocks.3"); throws naming the path if there is none.
  Module& submodule(const std::string& path) const;
  // Takes the direct child `name` ("blocks.3") out of the tree: its parameters leave
  // named_parameters(). How a pipeline stage drops the blocks other stages hold.
  std::shared_ptr<Module> remove_submodule(const std::string& name);

  // Forward wrappers let parallelism act around a module from outside (ZeRO-3 gathers its
  // parameters before and frees them after; activation checkpointing recomputes it). Models
  // call the modules that may be wrapped -- their blocks -- with the tensor inputs explicit
  // and everything else captured by value, since a wrapper may run fn again during backward:
  //   h = block->call({h, c}, [&block](const auto& in) { return block->forward(in[0], in[1]); });
  // A wrapper must return fn(inputs) (or that value routed through identity ops), calling fn
  // once now; it may keep a copy of fn to call later.
  using ForwardFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;
  using ForwardWrapper =
      std::function<Tensor(const ForwardFn& fn, const std::vector<Tensor>& inputs)>;
  void add_forward_wrapper(ForwardWrapper wrapper) { wrappers_.push_back(std::move(wrapper)); }
  // fn(inputs) inside the wrappers; the wrappers added last run outermost.
  Tensor call(const std::vector<Tensor>& inputs, const ForwardFn& fn) const;

 protected:
  // A tensor member that is state but not a parameter (a fixed embedding table): to() moves it.
  void register_buffer(Tensor* member) { buffers_.push_back(member); }
  Tensor register_parameter(const std::string& name, const Shape& shape, Init init,
                            bool weight_decay = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    Init init;
    bool weight_decay;
    bool deferred = false;  // init_parameters ran while it had no memory: seed is its seed
    uint64_t seed = 0;
  };
  void collect(const std::string& prefix, std::vector<NamedParameter>& out) const;
  void for_each_param(const std::function<void(const std::string&, Param&)>& fn,
                      const std::string& prefix = "");
  std::vector<Param> params_;
  std::vector<Tensor*> buffers_;  // members of the derived module
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<ForwardWrapper> wrappers_;
  bool training_ = true;
  std::string trace_name_;  // empty: not traced
};

}  // namespace loom::nn
