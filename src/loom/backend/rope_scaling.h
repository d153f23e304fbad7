// The rotary embedding's frequencies, as every backend computes them (Backend::rope): pair i of
// a head of D dims turns by theta^(-2i/D) per position, and Llama 3.x's scaling (rope_type
// "llama3") slows the low frequencies: those whose wavelength exceeds original_context /
// low_freq_factor turn factor times slower, those below original_context / high_freq_factor
// are kept, and the band between blends the two smoothly. Linear scaling (rope_type "linear",
// position interpolation) turns every pair factor times slower. Computed in f64.
#pragma once
#include <cmath>
#include <cstdint>

#include "loom/core/host_device.h"

namespace loom {

struct RopeScaling {
  double factor = 1;  // 1: no scaling
  double low_freq_factor = 1, high_freq_factor = 4;
  double original_context = 8192;  // the context the model was first trained at
  bool linear = false;             // every frequency divided by factor (the llama3 fields unused)
  bool operator==(const RopeScaling& o) const {
    return factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_context == o.original_context &&
           linear == o.linear;
  }
};

LOOM_HD inline double rope_frequency(double theta, const RopeScaling& s, int64_t i, int64_t D) {
  const double freq = pow(theta, -2.0 * double(i) / double(D));
  if (s.factor == 1) return freq;
  if (s.linear) return freq / s.factor;
  const double wavelength = 2 * 3.14159265358979323846 / freq;
  if (wavelength < s.original_context / s.high_freq_factor) return freq;
  if (wavelength > s.original_context / s.low_freq_factor) return freq / s.factor;
  const double smooth = (s.original_context / wavelength - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * freq / s.factor + smooth * freq;
}

}  // namespace loom
