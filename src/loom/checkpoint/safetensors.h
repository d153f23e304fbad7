// The safetensors file format (github.com/huggingface/safetensors), written and read
// independently: 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"key": "value"}, "name": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// then the data buffer. Offsets are relative to the buffer start; each tensor is contiguous,
// row-major and little-endian. Files Loom writes pad the header with spaces to a multiple of 8
// (as the reference writer does) so the buffer starts aligned.
//
// Loading is strict: the tensors must tile the buffer exactly (no gaps, no overlaps, nothing
// after the last one), every entry must have exactly the three keys above, and any mismatch
// throws loom::Error naming the file, the tensor and what was expected.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

// "F32", "BF16", "F16", "F8_E4M3", "F8_E5M2", "I32", "I64", "U8".
const char* safetensors_dtype_name(DType dtype);

// Atomic (see atomic_file.h): on any error the previous file at `path` is left untouched.
// Tensors may live on any device and have any strides; they are written contiguously.
// Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::string path;                                     // where it was read from, for messages
  std::vector<std::pair<std::string, Tensor>> tensors;  // header order; CPU, contiguous
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // Throws naming the file and the missing tensor.
  const Tensor& get(const std::string& name) const;
  // For many lookups (loading a model's state dict) without a linear search each.
  std::map<std::string, Tensor> by_name() const;
};

SafetensorsFile load_safetensors(const std::string& path);

}  // namespace loom
