#include "loom/ops/linear_quantizer.h"

#include <utility>

namespace loom {
namespace {
thread_local std::shared_ptr<LinearQuantizer> current;
}  // namespace

std::shared_ptr<LinearQuantizer> current_linear_quantizer() {
  return current;
}

LinearQuantizerScope::LinearQuantizerScope(std::shared_ptr<LinearQuantizer> quantizer)
    : saved_(std::exchange(current, std::move(quantizer))) {}

LinearQuantizerScope::~LinearQuantizerScope() {
  current = std::move(saved_);
}

}  // namespace loom
