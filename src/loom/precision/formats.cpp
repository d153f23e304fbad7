// Element and scale codecs (formats.h). Rounding is done on the magnitude in double, where
// every step is exact: an f32 divided by a power of two, an integer part taken, multiplied back.
#include "loom/precision/formats.h"

#include <cmath>

#include "loom/core/error.h"

namespace loom::precision {
namespace {

struct Layout {
  int ebits, mbits, bias;
  bool ieee;         // the top exponent holds infinity and NaNs (E5M2)
  uint8_t nan_code;  // without sign; 0 where the format has no NaN
  double max;
};

const Layout& layout(Element e) {
  static const Layout e4m3{4, 3, 7, false, 0x7F, 448.0};
  static const Layout e5m2{5, 2, 15, true, 0x7E, 57344.0};
  static const Layout e2m1{2, 1, 1, false, 0x00, 6.0};
  switch (e) {
    case Element::E4M3:
      return e4m3;
    case Element::E5M2:
      return e5m2;
    case Element::E2M1:
      return e2m1;
  }
  LOOM_CHECK(false) << "precision: unknown element format " << int(e);
  return e4m3;
}

// The magnitude of a finite, exactly representable value as the format's bits (no sign).
uint8_t magnitude_code(const Layout& f, double v) {
  if (v == 0) return 0;
  const int emin = 1 - f.bias;
  const int e = std::max(std::ilogb(v), emin);
  const double steps = std::ldexp(v, f.mbits - e);  // an integer: the significand in spacings
  if (std::ilogb(v) < emin) return uint8_t(steps);  // subnormal: exponent field 0
  return uint8_t(((e + f.bias) << f.mbits) | (int(steps) - (1 << f.mbits)));
}

}  // namespace

const char* element_name(Element e) {
  switch (e) {
    case Element::E4M3:
      return "e4m3";
    case Element::E5M2:
      return "e5m2";
    case Element::E2M1:
      return "e2m1";
  }
  return "?";
}

double element_max(Element e) {
  return layout(e).max;
}

int element_emax(Element e) {
  return std::ilogb(layout(e).max);
}

double element_overflow(Element e) {
  const Layout& f = layout(e);
  return f.max + std::ldexp(0.5, element_emax(e) - f.mbits);
}

uint8_t encode(Element e, float x, float u) {
  const Layout& f = layout(e);
  const uint8_t sign = std::signbit(x) ? uint8_t(0x80u >> (7 - f.ebits - f.mbits)) : 0;
  if (std::isnan(x)) return f.nan_code ? uint8_t(sign | f.nan_code) : 0;
  if (std::isinf(x) && f.ieee) return uint8_t(sign | ((1 << f.ebits) - 1) << f.mbits);
  double a = std::fabs(double(x));
  if (a >= f.max) return uint8_t(sign | magnitude_code(f, f.max));  // saturate (and infinity)
  // The spacing of representable values around a: 2^(exponent - mbits), constant below the
  // smallest normal (the subnormals).
  const int e_a = a == 0 ? 1 - f.bias : std::max(std::ilogb(a), 1 - f.bias);
  const double spacing = std::ldexp(1.0, e_a - f.mbits);
  const double steps = a / spacing;  // exact: a power-of-two division
  double whole = std::floor(steps);
  const double above = steps - whole;
  if (u < 0) {
    if (above > 0.5 || (above == 0.5 && std::fmod(whole, 2.0) == 1.0)) whole += 1;
  } else if (double(u) < above) {
    whole += 1;
  }
  a = std::min(whole * spacing, f.max);
  return uint8_t(sign | magnitude_code(f, a));
}

float decode(Element e, uint8_t code) {
  const Layout& f = layout(e);
  const int bits = f.ebits + f.mbits;
  const bool negative = (code >> bits) & 1;
  const int exp = (code >> f.mbits) & ((1 << f.ebits) - 1);
  const int man = code & ((1 << f.mbits) - 1);
  const uint8_t magnitude = code & uint8_t((1 << bits) - 1);
  double v;
  if (f.nan_code && magnitude == f.nan_code && !f.ieee) {
    v = NAN;
  } else if (f.ieee && exp == (1 << f.ebits) - 1) {
    v = man == 0 ? INFINITY : NAN;
  } else if (exp == 0) {
    v = std::ldexp(double(man), 1 - f.bias - f.mbits);
  } else {
    v = std::ldexp(double(man + (1 << f.mbits)), exp - f.bias - f.mbits);
  }
  return float(negative ? -v : v);
}

uint8_t encode_e8m0(int exponent) {
  LOOM_CHECK(exponent >= -127 && exponent <= 127)
      << "precision: an E8M0 scale holds 2^-127 .. 2^127, not 2^" << exponent;
  return uint8_t(exponent + 127);
}

float decode_e8m0(uint8_t code) {
  return code == 0xFF ? NAN : std::ldexp(1.0f, int(code) - 127);
}

}  // namespace loom::precision
