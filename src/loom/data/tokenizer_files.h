// The tokenizer files of other tools, read into (and written from) a BpeTokenizer:
//  - Hugging Face tokenizer.json with a byte-level BPE model: the ByteLevel pre-tokenizer
//    (GPT-2's regex), or Split by a regex ("isolated") then ByteLevel without regex (Llama 3),
//    ignore_merges honoured; added tokens become special tokens (see bpe.h: never produced
//    from text). A BPE with byte_fallback is SentencePiece-style (Llama 2, Mistral): Llama 2's
//    normalizer (Prepend "\u2581", Replace " " by it) or the Metaspace pre-tokenizer (any
//    prepend_scheme, split or not), the <0xNN> byte tokens. Other normalizers and
//    pre-tokenizers, other models (WordPiece, Unigram), dropout and a byte-level prefix space
//    are refused by name rather than encoded differently.
//  - GPT-2's vocab.json + merges.txt (the same model, GPT-2's regex).
//  - tiktoken rank files (one "base64-bytes rank" per line) with a named pattern (pretokenize.h);
//    "gpt2" also has <|endoftext|> after the ranks, as tiktoken's r50k_base.
#pragma once
#include <string>

#include "loom/data/bpe.h"

namespace loom {

BpeTokenizer read_tokenizer_json(const std::string& path);
BpeTokenizer read_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
BpeTokenizer read_tiktoken(const std::string& path, const std::string& pattern_name);

// tokenizer.json for Hugging Face's tokenizers (atomically); a SentencePiece-style one as Llama 2's
// layout (or Metaspace, see bpe.h), with the decoder that drops the prefix space. Loom's own pieces
// are written as a Split regex; it cuts pieces longer than BpeTokenizer::kMaxPieceBytes and invalid
// UTF-8 differently (neither occurs in the KJV text). A tokenizer read by rank (tiktoken) gets the
// merges that rebuild each token from the lower ranks, and ignore_merges.
void write_tokenizer_json(const BpeTokenizer& tok, const std::string& path);

}  // namespace loom
