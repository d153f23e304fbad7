// Sharded checkpoints: every rank writes the tensor pieces it holds to its own safetensors file,
// and one JSON manifest describes every global tensor:
//
//   manifest.json   {"format": "loom-sharded-checkpoint", "version": 1, "world_size": 4,
//                    "files": {"trainer_state.json": {"xxh64": "..."}},
//                    "tensors": {"model/blocks.0.attn.qkv.weight": {
//                        "dtype": "F32", "shape": [384, 128],
//                        "pieces": [{"file": "rank-00000.safetensors",
//                                    "key": "model/blocks.0.attn.qkv.weight:0",
//                                    "begin": 0, "end": 12288, "xxh64": "..."}, ...]}}}
//   rank-00000.safetensors ...   one 1-D entry per piece: elements [begin, end) of the tensor
//                                in row-major order
//
// A reader takes any element range of any tensor, from whichever files hold it, so a
// checkpoint written under one layout (4 ranks, ZeRO-3) loads under any other (1 rank, DDP on
// 2, HSDP on 8). Every piece's bytes are checked against the manifest's xxhash64 when read;
// a missing file, a wrong checksum, a wrong size or shape, or pieces that do not tile a tensor
// exactly are errors naming the file and the tensor.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/checkpoint/safetensors.h"
#include "loom/core/hash.h"
#include "loom/core/json.h"
#include "loom/core/tensor.h"

namespace loom {

// Elements [begin, end) of the row-major global tensor `name` (of `shape`): what one rank
// writes or reads. data: end - begin contiguous elements (any dtype the tensor has).
struct TensorPiece {
  std::string name;
  Shape shape;
  int64_t begin = 0, end = 0;
  Tensor data;
};

// The two halves of writing (the caller synchronises the ranks between them):
// 1. every rank writes dir/rank-RRRRR.safetensors with its pieces and dir/rank-RRRRR.json
//    indexing them (with checksums);
void write_rank_shard(const std::string& dir, int rank, const std::vector<TensorPiece>& pieces);
// 2. one rank merges the world_size indexes into dir/manifest.json (checking that the pieces
//    tile every tensor exactly once), checksums `files` (small files it writes alongside, e.g.
//    trainer_state.json) and removes the indexes.
void write_manifest(const std::string& dir, int world_size,
                    const std::map<std::string, std::string>& files);

class CheckpointReader {
 public:
  // Reads and validates dir/manifest.json. A directory without one is read in the older
  // single-process layout (<part>.safetensors with whole tensors, trainer_state.json).
  explicit CheckpointReader(std::string dir);
  ~CheckpointReader();

  const std::string& dir() const { return dir_; }
  bool has_checksums() const { return !legacy_; }  // false for the older layout
  // manifest.json itself checked against manifest.xxh64 (false: written before that existed).
  bool manifest_checksummed() const { return manifest_checksummed_; }
  bool contains(const std::string& name) const;
  Shape shape(const std::string& name) const;
  std::vector<std::string> names(const std::string& prefix) const;  // "model/" -> its tensors
  // Copies elements [begin, end) of tensor `name` into dest (end - begin contiguous elements of
  // the tensor's dtype); shape: what the caller expects the global tensor to be.
  void read(const std::string& name, const Shape& shape, int64_t begin, int64_t end,
            const Tensor& dest) const;
  Tensor read_full(const std::string& name) const;
  // Every tensor under "<prefix>/", named without the prefix.
  std::vector<std::pair<std::string, Tensor>> read_all(const std::string& prefix) const;
  // A small file of the checkpoint (trainer_state.json), checked against the manifest.
  std::string read_text(const std::string& file) const;

 private:
  struct Piece {
    std::string file, key, xxh64;
    int64_t begin, end;
  };
  struct Entry {
    DType dtype;
    Shape shape;
    std::vector<Piece> pieces;  // sorted by begin, tiling [0, numel)
  };
  const SafetensorsFile& file(const std::string& name, const std::string& tensor) const;

  std::string dir_;
  bool legacy_ = false;
  bool manifest_checksummed_ = false;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> file_sums_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> loaded_;
  mutable std::map<std::string, bool> verified_;  // "file|key" of pieces whose checksum matched
};

}  // namespace loom
