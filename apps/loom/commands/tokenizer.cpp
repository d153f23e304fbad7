// `loom tokenizer train | check | convert`: byte-level BPE tokenizers.
#include <algorithm>
#include <cstdio>
#include "commands.h"
#include "loom/data/bpe.h"
#include "loom/data/npy.h"
#include "loom/data/text.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer_files.h"
#include "loom/ops/creation.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/config.h"
#include "numbers.h"

namespace loom::cli {

namespace {

struct TokenizerTrainArgs {
  std::string input, out, cache_dir;
  bool kjv = false;
  int64_t vocab = 0;
};

void add_tokenizer_train(CLI::App& cmd, TokenizerTrainArgs& a) {
  cmd.description(
      "learn a byte-level BPE tokenizer with N tokens (--input FILE or --kjv) and save it");
  cmd.add_option("--input", a.input, "the text to learn from")->type_name("FILE");
  cmd.add_flag("--kjv", a.kjv, "learn from the King James Bible (Debian's bible-kjv)");
  cmd.add_option("--cache-dir", a.cache_dir, "where --kjv keeps kjv.txt")->type_name("DIR");
  add_int(cmd, "--vocab", a.vocab, "tokens, the 256 bytes included")->required();
  cmd.add_option("--out", a.out, "the tokenizer file to write")->required()->type_name("PATH");
}

int tokenizer_train_command(TokenizerTrainArgs a) {
  LOOM_CHECK(a.kjv != !a.input.empty())
      << "tokenizer train: give exactly one of --input FILE and --kjv";
  train::check_output_path(a.out, "tokenizer train --out");
  LOOM_CHECK(a.vocab >= BpeTokenizer::kByteTokens && a.vocab <= (int64_t(1) << 24))
      << "tokenizer train: --vocab " << a.vocab << " must be at least " << BpeTokenizer::kByteTokens
      << " (the byte tokens)";
  if (a.kjv)
    a.input = kjv_corpus(a.cache_dir.empty() ? train::default_cache_dir(".") : a.cache_dir);
  const std::string text = read_text_file(a.input);
  const BpeTokenizer tok = BpeTokenizer::train(text, int(a.vocab));
  tok.save(a.out);
  const size_t tokens = tok.encode(text).size();
  std::printf(
      "tokenizer: %d tokens (%zu merges) learned from %s (%zu bytes) -> %s\n"
      "%s encodes to %zu tokens, %.3f bytes/token; set model.vocab_size = %d\n",
      tok.vocab_size(), tok.merges().size(), a.input.c_str(), text.size(), a.out.c_str(),
      a.input.c_str(), tokens, double(text.size()) / double(std::max<size_t>(tokens, 1)),
      tok.vocab_size());
  return 0;
}

struct TokenizerCheckArgs {
  std::string path, pattern = "gpt2", input, ids;
};

void add_tokenizer_spec(CLI::App& cmd, std::string& path, std::string& pattern) {
  cmd.add_option("--tokenizer", path,
                 "a Loom BPE file, a tokenizer.json, a directory with tokenizer.json or "
                 "vocab.json + merges.txt, or a .tiktoken file")
      ->required()
      ->type_name("PATH");
  cmd.add_option("--pattern", pattern, "a .tiktoken file's pre-tokenisation: gpt2, cl100k, o200k")
      ->capture_default_str();
}

void add_tokenizer_check(CLI::App& cmd, TokenizerCheckArgs& a) {
  cmd.description("encode FILE, decode it again and compare (round trip)");
  add_tokenizer_spec(cmd, a.path, a.pattern);
  cmd.add_option("--input", a.input, "the text to encode")->required()->type_name("FILE");
  cmd.add_option("--ids", a.ids, "also write the token ids as .npy (int64)")->type_name("FILE");
}

int tokenizer_check_command(const TokenizerCheckArgs& a) {
  const BpeTokenizer tok = read_tokenizer(a.path, a.pattern).bpe;
  const std::string text = read_text_file(a.input);
  const std::vector<int32_t> ids = tok.encode(text);
  LOOM_CHECK(tok.decode(ids) == text) << "tokenizer check: decode(encode(" << a.input
                                      << ")) differs from the file (" << a.path << ")";
  if (!a.ids.empty())
    write_npy(a.ids,
              from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {int64_t(ids.size())}));
  std::printf(
      "round trip ok: %s (%zu bytes) -> %zu tokens of %s (%d tokens) -> the same bytes "
      "(%.3f bytes/token)\n",
      a.input.c_str(), text.size(), ids.size(), a.path.c_str(), tok.vocab_size(),
      double(text.size()) / double(std::max<size_t>(ids.size(), 1)));
  return 0;
}

struct TokenizerConvertArgs {
  std::string path, pattern = "gpt2", out;
};

void add_tokenizer_convert(CLI::App& cmd, TokenizerConvertArgs& a) {
  cmd.description("write a tokenizer as a Hugging Face tokenizer.json");
  add_tokenizer_spec(cmd, a.path, a.pattern);
  cmd.add_option("--out", a.out, "the tokenizer.json to write")->required()->type_name("FILE");
}

int tokenizer_convert_command(const TokenizerConvertArgs& a) {
  train::check_output_path(a.out, "tokenizer convert --out");
  const BpeTokenizer tok = read_tokenizer(a.path, a.pattern).bpe;
  write_tokenizer_json(tok, a.out);
  std::printf("tokenizer: %d tokens of %s -> %s\n", tok.vocab_size(), a.path.c_str(),
              a.out.c_str());
  return 0;
}

}  // namespace

void add_tokenizer_commands(CLI::App& loom, int& code) {
  CLI::App* tokenizer = loom.add_subcommand("tokenizer")->require_subcommand(1);
  auto train_args = std::make_shared<TokenizerTrainArgs>();
  CLI::App* train_cmd = tokenizer->add_subcommand("train");
  add_tokenizer_train(*train_cmd, *train_args);
  train_cmd->callback([train_args, &code] { code = tokenizer_train_command(*train_args); });
  auto check_args = std::make_shared<TokenizerCheckArgs>();
  CLI::App* check_cmd = tokenizer->add_subcommand("check");
  add_tokenizer_check(*check_cmd, *check_args);
  check_cmd->callback([check_args, &code] { code = tokenizer_check_command(*check_args); });
  auto convert_args = std::make_shared<TokenizerConvertArgs>();
  CLI::App* convert_cmd = tokenizer->add_subcommand("convert");
  add_tokenizer_convert(*convert_cmd, *convert_args);
  convert_cmd->callback([convert_args, &code] { code = tokenizer_convert_command(*convert_args); });
}

}  // namespace loom::cli
