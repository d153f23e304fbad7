// Text corpora: reading a file, producing the King James Bible corpus from Debian's `bible`
// program, and a deterministic train/validation split.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

// The whole file as bytes (no newline translation). Throws naming the path if unreadable.
std::string read_text_file(const std::string& path);

// Path of `cache_dir`/kjv.txt, producing it on first use by running `bible "Gen1:1-Rev22:21"`
// (packages bible-kjv + bible-kjv-text, about 4.3 MB). The file is written atomically, so
// concurrent first uses (one per rank) are safe. Throws if `bible` is missing or fails.
std::string kjv_corpus(const std::string& cache_dir);

struct TextSplit {
  std::vector<uint8_t> train;  // the first (1 - val_fraction) of the bytes
  std::vector<uint8_t> val;    // the last val_fraction of the bytes
};
// Validation is the tail of the text, not a random sample: it is a contiguous held-out region
// (no sentence straddles both sides except at the cut) and the split is the same on every run.
// val_fraction must lie in [0, 1).
TextSplit split_text(const std::string& text, double val_fraction);

}  // namespace loom
