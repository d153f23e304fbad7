#include "loom/train/recipes/caption_text.h"

#include <filesystem>

#include "loom/autograd/node.h"
#include "loom/data/canvas.h"
#include "loom/data/token_windows.h"
#include "loom/ops/ops.h"
#include "loom/train/recipes/gpt.h"

namespace loom::train {

namespace fs = std::filesystem;

void CaptionText::attach(models::Mmdit& model) const {
  if (!gpt) return;
  model.attach_text_features([g = gpt](const Tensor& ids) {
    if (g->device() != ids.device()) g->to(ids.device());  // follows the model's device
    return gpt_caption_features(*g, ids);
  });
}

std::vector<std::string> training_captions(const Config& cfg, const ImageDataset& source) {
  std::vector<std::string> captions;
  captions.reserve(size_t(cfg.data.canvases));
  for (int64_t i = 0; i < cfg.data.canvases; ++i) {
    const std::vector<CanvasItem> items =
        canvas_items(source, uint64_t(cfg.data.canvas_seed), /*test=*/false, i);
    captions.push_back(cfg.data.class_captions ? canvas_class_caption(items)
                                               : canvas_caption(items));
  }
  return captions;
}

namespace {

// The tokenizer data.tokenizer names (not "words").
BpeTokenizer caption_bpe(const Config& cfg, const std::vector<std::string>& captions,
                         const std::string& run_dir) {
  const std::string& spec = cfg.data.tokenizer;
  if (spec != "bpe" || !run_dir.empty()) return read_tokenizer(spec, "", run_dir).bpe;
  std::string text;
  for (const std::string& c : captions) text += c + "\n";
  return BpeTokenizer::train(text, int(cfg.mmdit().vocab - CaptionTokenizer::kFirstToken));
}

}  // namespace

CaptionText load_caption_text(const Config& cfg, const ImageDataset& source,
                              const std::string& run_dir) {
  CaptionText out;
  const std::vector<std::string> captions = training_captions(cfg, source);
  if (!cfg.data.text_encoder.empty()) {
    LoadedGpt g = load_gpt_checkpoint(cfg.data.text_encoder, "model.text_encoder");
    out.tokenizer = CaptionTokenizer(g.tok.bpe);
    out.gpt = std::shared_ptr<models::Gpt>(std::move(g.model));
  } else if (cfg.data.tokenizer != "words") {
    out.tokenizer = CaptionTokenizer(caption_bpe(cfg, captions, run_dir));
  }
  LOOM_CHECK(out.tokenizer.size() <= cfg.mmdit().vocab)
      << "data.tokenizer " << cfg.data.tokenizer << " has "
      << out.tokenizer.size() - CaptionTokenizer::kFirstToken
      << " tokens, more than model.vocab_size "
      << cfg.mmdit().vocab - CaptionTokenizer::kFirstToken;
  out.tokenizer.learn_known(captions);
  // Every training caption fits (encode names one that does not).
  for (const std::string& c : captions) out.tokenizer.encode(c, cfg.mmdit().text_length);
  return out;
}

void save_caption_text(const CaptionText& text, const std::string& run_dir) {
  // A BPE of data.tokenizer "bpe": learned by this run, or read from the reference's run.
  if (!text.gpt && !text.tokenizer.words())
    text.tokenizer.bpe().save((fs::path(run_dir) / "tokenizer.bpe").string());
}

Tensor gpt_caption_features(const models::Gpt& gpt, const Tensor& ids) {
  NoGradGuard no_grad;
  LOOM_CHECK(ids.dim() == 2 && ids.dtype() == DType::I64)
      << "caption features: expected ids (B, L) i64, got " << ids.shape();
  const int64_t B = ids.size(0), L = ids.size(1);
  std::vector<int64_t> tokens = to_vector_i64(to_device(ids, cpu_device()));
  std::vector<float> keep(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    keep[i] = tokens[i] >= CaptionTokenizer::kFirstToken ? 1.0f : 0.0f;
    // Padding after a caption cannot change its features (the GPT is causal): any token will do.
    tokens[i] = std::max<int64_t>(tokens[i] - CaptionTokenizer::kFirstToken, 0);
  }
  const Device d = gpt.device();
  const Tensor h = gpt.features(from_vector(tokens, {B, L}, DType::I64, d));  // (B, L, C)
  return mul(to_dtype(h, DType::F32), from_vector(keep, {B, L, 1}, DType::F32, d));
}

}  // namespace loom::train
