#include "loom/parallel/activation_checkpoint.h"

#include "loom/autograd/checkpoint.h"
#include "loom/core/error.h"

namespace loom::parallel {

void apply_activation_checkpointing(nn::Module& model, const std::vector<std::string>& block_names,
                                    Recompute policy) {
  if (policy == Recompute::None) return;
  const bool keep_expensive = policy == Recompute::Selective;
  for (const std::string& name : block_names)
    model.submodule(name).add_forward_wrapper([keep_expensive](const nn::Module::ForwardFn& fn,
                                                               const std::vector<Tensor>& inputs) {
      // fn is copied into the checkpoint: backward calls it again.
      return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; },
                        inputs, keep_expensive)[0];
    });
}

}  // namespace loom::parallel
