// TensorBoard event files: what `tensorboard --logdir RUN_DIR/tensorboard` shows. A file is a
// sequence of TFRecords (length, its masked CRC-32C, the data, its masked CRC-32C), each the
// bytes of one `Event` protocol buffer: the first names the file version, the others carry a
// step and a `Summary` of scalar values. metrics.jsonl stays the run's source of truth; this
// is a view of the same numbers for the tool researchers already watch.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "loom/core/json.h"

namespace loom::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it.
uint32_t crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates dir and a new events.out.tfevents.<seconds>.<host>.<pid> file in it.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` with every finite number of `metrics` as a scalar, tagged by its key
  // ("loss"; nested objects as "time_s/compute"); strings and non-finite values are left out.
  void add_scalars(const Json& metrics, int64_t step);
  // One event at `step` with a PNG image (TensorBoard's Summary.Image) tagged `tag`.
  void add_image(const std::string& tag, const std::string& png, int width, int height,
                 int channels, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_summary(const std::string& summary, int64_t step);  // as one Event
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace loom::train
