// The text readers: any bytes as a UTF-8 corpus file (read, split into train and held-out),
// and as a BPE tokenizer file (loaded, then used to encode and decode the corpus).
#include "fuzz_input.h"
#include "loom/core/error.h"
#include "loom/data/bpe.h"
#include "loom/data/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = loom::fuzz::write_input("corpus.txt", data, size);
  std::string text;
  try {
    text = loom::read_text_file(path);
    loom::split_text(text, 0.1);
  } catch (const loom::Error&) {
  }
  try {
    const loom::BpeTokenizer tok = loom::BpeTokenizer::load(path);
    const std::string sample = text.empty() ? "In the beginning" : text.substr(0, 256);
    tok.decode(tok.encode(sample));
  } catch (const loom::Error&) {
  }
  return 0;
}
