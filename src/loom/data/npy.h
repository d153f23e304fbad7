// NumPy .npy files (format version 1.0) for f32, i64 and u8 tensors: tools and tests exchange
// arrays with Python through them (np.load / np.save).
#pragma once
#include <string>

#include "loom/core/tensor.h"

namespace loom {

// Writes t (any layout or device) as a little-endian, C-order array ('<f4', '<i8' or '|u1'), header
// padded with spaces to a multiple of 64 bytes, atomically. Other dtypes throw.
void write_npy(const std::string& path, const Tensor& t);

// Reads a version 1.x, 2.x or 3.x file holding '<f4', '<i8' or '|u1' in C order into a CPU tensor.
// Throws naming the file on a bad magic, an unsupported dtype or Fortran order, or a data size
// that does not match the shape.
Tensor read_npy(const std::string& path);

}  // namespace loom
