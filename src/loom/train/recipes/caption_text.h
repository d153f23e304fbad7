// How an MMDiT run reads its captions: the tokenizer of data.tokenizer ("words", a BPE learned
// from the training captions, a tokenizer file) or, with model.text_encoder, a frozen GPT's
// tokenizer and its features of the captions. Model code never sees the GPT: the MMDiT's text
// encoder calls the features it is given (models::TextFeatures).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "loom/data/captions.h"
#include "loom/data/idx.h"
#include "loom/models/gpt/gpt.h"
#include "loom/models/mmdit/mmdit.h"
#include "loom/train/config.h"

namespace loom::train {

struct CaptionText {
  CaptionTokenizer tokenizer;               // knows the tokens of the training captions
  std::shared_ptr<models::Gpt> gpt;         // model.text_encoder's GPT, frozen; null: none
  void attach(models::Mmdit& model) const;  // the GPT's features, where the model reads them
};

// The captions the model is told of training canvases [0, data.canvases) (data.captions "classes":
// their items' classes alone), without drawing their images.
std::vector<std::string> training_captions(const Config& cfg, const ImageDataset& source);

// The run's caption text. run_dir "": a new run's (data.tokenizer "bpe" learns the BPE from the
// training captions), else a trained run's (its tokenizer.bpe). Every caption of the training
// set must fit model.text_length: one clear error naming the first that does not.
CaptionText load_caption_text(const Config& cfg, const ImageDataset& source,
                              const std::string& run_dir);
// Writes what load_caption_text reads from a run directory (the BPE of data.tokenizer "bpe").
void save_caption_text(const CaptionText& text, const std::string& run_dir);

// A GPT's features of caption ids (B, L) (0 padding, 1 the null caption, k + 2 its token k): the
// GPT's final-norm output over the caption's tokens, zero at padding and for the null caption.
// (B, L, C) f32 on the GPT's device, without a graph.
Tensor gpt_caption_features(const models::Gpt& gpt, const Tensor& ids);

}  // namespace loom::train
