// `loom data prepare`: text tokenized once into token files. `loom data canvas`: a look at the
// captioned canvases (data/canvas.h). `loom data clips`: the moving-item clips' shards
// (data/clips.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include "commands.h"
#include "loom/data/canvas.h"
#include "loom/data/clips.h"
#include "loom/data/npy.h"
#include "loom/data/text.h"
#include "loom/data/token_prepare.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer_files.h"
#include "loom/diffusion/png.h"
#include "loom/ops/ops.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/config.h"
#include "loom/train/recipes/canvas_judge.h"
#include "loom/train/recipes/vit_classifier.h"
#include "numbers.h"

namespace loom::cli {

namespace {

struct DataPrepareArgs {
  std::vector<std::string> inputs;
  std::string tokenizer = "bytes", pattern = "gpt2", out, cache_dir;
  bool kjv = false;
  double val_fraction = 0.05;
  double chunk_mb = 64;
};

void add_data_prepare(CLI::App& cmd, DataPrepareArgs& a) {
  cmd.description(
      "tokenize text once into token files (train.bin, val.bin) that data.dataset = \"tokens\" "
      "trains from");
  cmd.add_option("--input", a.inputs, "text files, each a document")->type_name("FILE...");
  cmd.add_flag("--kjv", a.kjv, "the King James Bible (Debian's bible-kjv)");
  cmd.add_option("--cache-dir", a.cache_dir, "where --kjv keeps kjv.txt")->type_name("DIR");
  cmd.add_option("--tokenizer", a.tokenizer,
                 "bytes, a Loom BPE file, a tokenizer.json, a .tiktoken file or a directory "
                 "with one");
  cmd.add_option("--pattern", a.pattern,
                 "a .tiktoken file's pre-tokenisation: gpt2, cl100k, o200k");
  add_number(cmd, "--val-fraction", a.val_fraction, "each document's held-out tail", true);
  add_number(cmd, "--chunk-mb", a.chunk_mb, "text tokenized at a time, in MB", true);
  cmd.add_option("--out", a.out, "the directory to create")->required()->type_name("DIR");
}

int data_prepare_command(DataPrepareArgs a) {
  LOOM_CHECK(a.kjv != !a.inputs.empty()) << "data prepare: give --input FILE... or --kjv";
  train::check_output_path(a.out, "data prepare --out");
  if (a.kjv)
    a.inputs = {kjv_corpus(a.cache_dir.empty() ? train::default_cache_dir(".") : a.cache_dir)};
  const Tokenizer tok = read_tokenizer(a.tokenizer, a.pattern);
  const auto t0 = std::chrono::steady_clock::now();
  const PreparedTokens r =
      prepare_tokens(a.inputs, tok, a.tokenizer, a.val_fraction, a.out, size_t(a.chunk_mb * 1e6));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string keys = "data.dataset = \"tokens\", data.path = \"" + a.out +
                     "\", data.tokenizer = \"" + (tok.bytes ? std::string("bytes") : a.out) + "\"";
  if (!tok.bytes && tok.files[0].size() > 9 &&
      tok.files[0].compare(tok.files[0].size() - 9, 9, ".tiktoken") == 0)
    keys += ", data.tokenizer_pattern = \"" + a.pattern + "\"";
  std::printf(
      "data: %lld document%s, %lld bytes -> %lld train + %lld held-out tokens of %s (%d tokens) "
      "in %s [%.1fs, %.1f MB/s]\nset %s, model.vocab_size = %d\n",
      (long long)r.documents, r.documents == 1 ? "" : "s", (long long)r.bytes,
      (long long)r.train_tokens, (long long)r.val_tokens, a.tokenizer.c_str(), tok.bpe.vocab_size(),
      a.out.c_str(), s, double(r.bytes) / 1e6 / std::max(s, 1e-9), keys.c_str(),
      tok.bpe.vocab_size());
  return 0;
}

struct DataCanvasArgs {
  std::string out, split = "train", fmnist = "/usr/share/datasets/fashion-mnist";
  std::string classifier = "assets/fmnist_classifier";
  int64_t count = 16, first = 0, seed = 0;
  bool judge = false;
};

void add_data_canvas(CLI::App& cmd, DataCanvasArgs& a) {
  cmd.description(
      "draw captioned canvases (Fashion-MNIST items in quadrants, a caption naming each): a "
      "grid PNG, and the captions printed in its order");
  cmd.add_option("--out", a.out, "the grid")->type_name("PNG")->required();
  cmd.add_option("--split", a.split,
                 "train, or test (each caption holds a held-out class "
                 "and place)")
      ->check(CLI::IsMember({"train", "test"}));
  add_int(cmd, "--count", a.count, "canvases", 1, 1024);
  add_int(cmd, "--first", a.first, "index of the first canvas", 0);
  add_int(cmd, "--seed", a.seed, "the canvases' seed", 0);
  cmd.add_option("--fashion-mnist", a.fmnist, "the Fashion-MNIST directory")->type_name("DIR");
  cmd.add_flag("--judge", a.judge,
               "score the canvases against their own captions (the ceiling a model can reach)");
  cmd.add_option("--classifier", a.classifier, "the judge's classifier")->type_name("DIR");
}

int data_canvas_command(const DataCanvasArgs& a) {
  const bool test = a.split == "test";
  const ImageDataset source = fashion_mnist(a.fmnist, /*train=*/!test);
  std::vector<Tensor> images;
  std::vector<std::vector<CanvasItem>> asked;
  for (int64_t i = 0; i < a.count; ++i) {
    const Canvas c = make_canvas(source, uint64_t(a.seed), test, a.first + i);
    images.push_back(c.image);
    asked.push_back(c.items);
    std::printf("%lld: %s\n", (long long)(a.first + i), c.caption.c_str());
  }
  if (a.judge) {
    const auto classifier = train::load_classifier(a.classifier);
    const train::CanvasScores s =
        train::score_canvases(train::read_canvases(*classifier, stack(images, 0)), asked);
    std::printf(
        "judge: captions all right %.3f, places %.3f, sizes %.3f, classes %.3f (%lld canvases, "
        "%lld items)\n",
        s.caption, s.place, s.size, s.cls, (long long)s.canvases, (long long)s.items);
  }
  const int cols = int(std::min<int64_t>(a.count, 8)), rows = int((a.count + cols - 1) / cols);
  const ImageGrid grid = image_grid(stack(images, 0), rows, cols);
  write_png(a.out, grid.pixels, grid.width, grid.height, grid.channels);
  std::printf("%lld %s canvases -> %s\n", (long long)a.count, a.split.c_str(), a.out.c_str());
  return 0;
}

struct DataClipsArgs {
  std::string out, split = "train", fmnist = "/usr/share/datasets/fashion-mnist";
  int64_t count = 1000, shard = 500, seed = 0;
};

void add_data_clips(CLI::App& cmd, DataClipsArgs& a) {
  cmd.description(
      "write moving-item clips as shards: clips-NNNNN.npy (n, 16, 64, 64) u8 frames, "
      "labels-NNNNN.npy (n, 2, 3) class, direction, speed per item (-1: no second item), and "
      "filmstrip.png (the first 8 clips, a row of frames each)");
  cmd.add_option("--out", a.out, "the shards' directory")->type_name("DIR")->required();
  cmd.add_option("--split", a.split, "train, or test (Fashion-MNIST's held-out images)")
      ->check(CLI::IsMember({"train", "test"}));
  add_int(cmd, "--count", a.count, "clips", 1, 10000000);
  add_int(cmd, "--shard", a.shard, "clips per shard", 1, 100000);
  add_int(cmd, "--seed", a.seed, "the clips' seed", 0);
  cmd.add_option("--fashion-mnist", a.fmnist, "the Fashion-MNIST directory")->type_name("DIR");
}

int data_clips_command(const DataClipsArgs& a) {
  const bool test = a.split == "test";
  const ImageDataset source = fashion_mnist(a.fmnist, /*train=*/!test);
  std::filesystem::create_directories(a.out);
  std::vector<Tensor> strip;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t first = 0, s = 0; first < a.count; first += a.shard, ++s) {
    const int64_t n = std::min(a.shard, a.count - first);
    Tensor frames = Tensor::empty({n, kClipFrames, kClipSize, kClipSize}, DType::U8);
    std::vector<int64_t> labels;
    auto* bytes = static_cast<uint8_t*>(frames.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      const Clip c = make_clip(source, uint64_t(a.seed), test, first + i);
      const float* px = static_cast<const float*>(c.frames.data_ptr());
      for (int64_t p = 0; p < c.frames.numel(); ++p)  // [-1, 1] -> 0..255
        *bytes++ = uint8_t(std::lround(std::clamp((px[p] + 1.0f) * 127.5f, 0.0f, 255.0f)));
      for (int64_t k = 0; k < kClipMaxItems; ++k) {
        const bool has = k < int64_t(c.items.size());
        labels.insert(labels.end(),
                      {has ? c.items[size_t(k)].cls : -1, has ? c.items[size_t(k)].direction : -1,
                       has ? c.items[size_t(k)].speed : -1});
      }
      if (first + i < 8) strip.push_back(c.frames);
    }
    char name[64];
    std::snprintf(name, sizeof name, "/clips-%05lld.npy", (long long)s);
    write_npy(a.out + name, frames);
    std::snprintf(name, sizeof name, "/labels-%05lld.npy", (long long)s);
    write_npy(a.out + name, from_vector(labels, {n, kClipMaxItems, 3}));
  }
  const ImageGrid grid = image_grid(cat(strip, 0), int(strip.size()), int(kClipFrames));
  write_png(a.out + "/filmstrip.png", grid.pixels, grid.width, grid.height, grid.channels);
  std::printf("%lld %s clips in %lld shards -> %s (%.1f s)\n", (long long)a.count, a.split.c_str(),
              (long long)((a.count + a.shard - 1) / a.shard), a.out.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace

void add_data_commands(CLI::App& loom, int& code) {
  CLI::App* data = loom.add_subcommand("data")->require_subcommand(1);
  auto a = std::make_shared<DataPrepareArgs>();
  CLI::App* prepare = data->add_subcommand("prepare");
  add_data_prepare(*prepare, *a);
  prepare->callback([a, &code] { code = data_prepare_command(*a); });
  auto c = std::make_shared<DataCanvasArgs>();
  CLI::App* canvas = data->add_subcommand("canvas");
  add_data_canvas(*canvas, *c);
  canvas->callback([c, &code] { code = data_canvas_command(*c); });
  auto v = std::make_shared<DataClipsArgs>();
  CLI::App* clips = data->add_subcommand("clips");
  add_data_clips(*clips, *v);
  clips->callback([v, &code] { code = data_clips_command(*v); });
}

}  // namespace loom::cli
