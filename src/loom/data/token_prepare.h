// `loom data prepare`: text tokenized once into a directory of token files (token_file.h) that
// training reads in place: train.bin, val.bin, a copy of the tokenizer and meta.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loom/data/token_windows.h"

namespace loom {

struct PreparedTokens {
  int64_t documents = 0, bytes = 0, train_tokens = 0, val_tokens = 0;
};

// Each input file is a document; its last val_fraction of bytes is held out (val.bin), the
// rest trains (train.bin), each part tokenized on its own as tokenize_text does, so one file
// gives the very tokens a run on the text itself would. Documents are separated by
// <|endoftext|> where the tokenizer has it. Text is read in chunks of about chunk_bytes, cut
// only before a space that follows a non-space and precedes a non-space (a piece boundary for
// Loom's, GPT-2's, cl100k's and o200k's rules), so memory stays flat and the tokens equal those
// of the whole text. out_dir must not exist; it is built beside and renamed into place at the
// end, so a failure leaves nothing half-written.
PreparedTokens prepare_tokens(const std::vector<std::string>& inputs, const Tokenizer& tok,
                              const std::string& tokenizer_spec, double val_fraction,
                              const std::string& out_dir, size_t chunk_bytes = size_t(64) << 20);

}  // namespace loom
