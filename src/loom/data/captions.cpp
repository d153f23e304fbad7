#include "loom/data/captions.h"

#include <algorithm>
#include <sstream>

#include "loom/core/error.h"
#include "loom/data/canvas.h"
#include "loom/ops/creation.h"

namespace loom {

namespace {

// "top left, bottom" -> {"top", "left", ",", "bottom"}
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::string spaced;
  for (char ch : text) spaced += ch == ',' ? std::string(" , ") : std::string(1, ch);
  std::istringstream in(spaced);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

CaptionVocab::CaptionVocab() {
  words_ = {"<pad>", "<null>", "a", "small", "large", "at", "the", "and", ","};
  auto add = [&](const std::string& text) {
    for (const std::string& w : split_words(text))
      if (std::find(words_.begin(), words_.end(), w) == words_.end()) words_.push_back(w);
  };
  for (const char* name : kCanvasQuadrantNames) add(name);
  for (const char* name : kFashionClassNames) add(name);
}

std::vector<int64_t> CaptionVocab::encode(const std::string& caption, int64_t length) const {
  const std::vector<std::string> words = split_words(caption);
  LOOM_CHECK(int64_t(words.size()) <= length)
      << "caption \"" << caption << "\" has " << words.size()
      << " tokens, more than the text encoder's context of " << length << " (model.text_length)";
  std::vector<int64_t> ids(size_t(length), kPad);
  for (size_t i = 0; i < words.size(); ++i) {
    const auto at = std::find(words_.begin() + 2, words_.end(), words[i]);  // not <pad>, <null>
    if (at == words_.end()) {
      std::string known;
      for (size_t k = 2; k < words_.size(); ++k) known += (k > 2 ? " " : "") + words_[k];
      LOOM_FAIL() << "caption \"" << caption << "\": the word \"" << words[i]
                  << "\" is not in the caption vocabulary (" << known << ")";
    }
    ids[i] = int64_t(at - words_.begin());
  }
  return ids;
}

CaptionTokenizer::CaptionTokenizer(BpeTokenizer bpe)
    : bpe_(std::make_shared<const BpeTokenizer>(std::move(bpe))) {}

const BpeTokenizer& CaptionTokenizer::bpe() const {
  LOOM_CHECK(bpe_) << "captions: the tokenizer is the closed word vocabulary, not a BPE";
  return *bpe_;
}

int64_t CaptionTokenizer::size() const {
  return bpe_ ? kFirstToken + bpe_->vocab_size() : vocab_.size();
}

void CaptionTokenizer::learn_known(const std::vector<std::string>& captions) {
  if (!bpe_) return;
  known_.assign(size_t(bpe_->vocab_size()), false);
  for (const std::string& c : captions)
    for (int32_t id : bpe_->encode(c)) known_[size_t(id)] = true;
}

std::vector<int64_t> CaptionTokenizer::encode(const std::string& caption, int64_t length) const {
  if (!bpe_) return vocab_.encode(caption, length);
  const std::vector<int32_t> tokens = bpe_->encode(caption);
  LOOM_CHECK(int64_t(tokens.size()) <= length)
      << "caption \"" << caption << "\" has " << tokens.size()
      << " tokens, more than the text encoder's context of " << length << " (model.text_length)";
  std::vector<int64_t> ids(size_t(length), CaptionVocab::kPad);
  size_t at = 0;  // the token's first byte in the caption
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& bytes = bpe_->token_bytes(tokens[i]);
    if (!known_.empty() && !known_[size_t(tokens[i])]) {
      // The word it belongs to: the run of non-spaces from its first non-space byte on.
      const size_t q = caption.find_first_not_of(' ', at);
      std::string word = bytes;
      if (q != std::string::npos) {
        const size_t begin = caption.find_last_of(' ', q) == std::string::npos
                                 ? 0
                                 : caption.find_last_of(' ', q) + 1;
        word = caption.substr(begin, caption.find(' ', q) - begin);
      }
      LOOM_FAIL() << "caption \"" << caption << "\": the word \"" << word << "\" holds the token \""
                  << bytes << "\" (BPE id " << tokens[i] << "), which never occurs in the "
                  << "training captions, so the text encoder never learned it";
    }
    ids[i] = kFirstToken + tokens[i];
    at += bytes.size();
  }
  return ids;
}

Tensor CaptionTokenizer::encode_all(const std::vector<std::string>& captions,
                                    int64_t length) const {
  std::vector<int64_t> ids;
  ids.reserve(captions.size() * size_t(length));
  for (const std::string& c : captions) {
    const std::vector<int64_t> one = encode(c, length);
    ids.insert(ids.end(), one.begin(), one.end());
  }
  return from_vector(ids, {int64_t(captions.size()), length});
}

int64_t CaptionVocab::longest_canvas_caption() {
  // "a large ankle boot at the top left" is 8 words; 4 items and 3 joiners ("," or "and").
  return 4 * 8 + 3;
}

}  // namespace loom
