// Image datasets of PNG files, decoded on demand (libspng) so a dataset of any size costs no
// memory: a folder with a labels file, or webdataset-style tar shards (libarchive). Samples are
// addressed by index, so the shuffled, resumable sampler of the in-memory datasets works
// unchanged.
//  - Folder: DIR/labels.txt, one line per image "relative/path.png LABEL" (LABEL an integer
//    in [0, classes)); blank lines and lines starting with '#' are skipped.
//  - Shards: uncompressed .tar files (or a directory of them, in name order); a sample is the
//    members sharing a key (the member path up to the first '.' of its file name):
//    KEY.png and KEY.cls (its label as decimal text), in one shard, as webdataset writes them.
//    Members are located once at open (libarchive), then read in place.
// Opening checks every sample: its label, that its PNG header is a PNG of the expected size
// and colour (grayscale for 1 channel; any for 3, converted to RGB); a bad entry is an error
// naming the file and member. Pixels p in 0..255 become p / 127.5 - 1, as Fashion-MNIST's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/tensor.h"

namespace loom {

class ImageFiles {
 public:
  // path: a folder with labels.txt, a .tar shard or a directory of .tar shards.
  ImageFiles(const std::string& path, int64_t channels, int64_t size, int64_t classes);

  int64_t size() const { return int64_t(samples_.size()); }
  int64_t num_classes() const { return classes_; }
  // Images (N, C, H, W) f32 and labels (N) i64 of the samples at `indices`.
  std::pair<Tensor, Tensor> read(const std::vector<int64_t>& indices) const;
  const std::string& source() const { return source_; }

 private:
  struct Sample {
    int32_t file;  // into files_
    int64_t offset, bytes;
    int64_t label;
    std::string name;  // for errors: the file, or shard:member
  };
  void open_folder(const std::string& dir);
  void open_shard(const std::string& path);
  void check_header(const Sample& s) const;

  std::vector<std::string> files_;
  std::vector<Sample> samples_;
  int64_t channels_, size_, classes_;
  std::string source_;
};

}  // namespace loom
