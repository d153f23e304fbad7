// Token files (llm.c's layout), the weighted token set windows are drawn from, and data
// prepare's chunked tokenisation against tokenizing the whole text at once.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "temp_dir_test.h"

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/bpe.h"
#include "loom/data/pretokenize.h"
#include "loom/data/token_file.h"
#include "loom/data/token_prepare.h"
#include "loom/data/token_windows.h"

namespace {

namespace fs = std::filesystem;
using loom::TokenFile;
using loom::TokenFileWriter;

class TokenFiles : public TempDirTest {};

std::vector<int32_t> all_tokens(const TokenFile& f) {
  std::vector<int32_t> v(size_t(f.size()));
  f.read(0, f.size(), v.data());
  return v;
}

TEST_F(TokenFiles, HeaderAndTokensAreLlmCsLayout) {
  TokenFileWriter w(path("a.bin"), 65536);  // the largest vocabulary of uint16 tokens
  w.append({0, 50256, 7});
  w.append({65535});
  w.commit();
  // Read back by hand, as llm.c's loader would: 256 int32, then uint16 tokens.
  std::ifstream in(path("a.bin"), std::ios::binary);
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 4);
  uint16_t tokens[4];
  in.read(reinterpret_cast<char*>(tokens), sizeof tokens);
  EXPECT_EQ(tokens[1], 50256);
  EXPECT_EQ(tokens[3], 65535);
  EXPECT_EQ(fs::file_size(path("a.bin")), 1024u + 8u);
  const TokenFile f(path("a.bin"), 65536);
  EXPECT_EQ(all_tokens(f), (std::vector<int32_t>{0, 50256, 7, 65535}));
  int32_t two[2];
  f.read(1, 2, two);
  EXPECT_EQ(two[0], 50256);
  EXPECT_EQ(two[1], 7);
  EXPECT_THROW(f.read(3, 2, two), loom::Error);
}

TEST_F(TokenFiles, LargeVocabulariesUseUint32) {
  TokenFileWriter w(path("b.bin"), 128256);
  w.append({128255, 3});
  w.commit();
  const TokenFile f(path("b.bin"), 128256);
  EXPECT_EQ(f.token_bytes(), 4);
  EXPECT_EQ(all_tokens(f), (std::vector<int32_t>{128255, 3}));
  std::ifstream in(path("b.bin"), std::ios::binary);
  int32_t header[2];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
}

TEST_F(TokenFiles, CorruptFilesAreRejectedNamingThem) {
  auto expect_error = [&](const std::string& file, const std::string& what, int64_t vocab) {
    try {
      TokenFile f(file, vocab);
      ADD_FAILURE() << "no error for " << what;
    } catch (const loom::Error& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  {
    TokenFileWriter w(path("ok.bin"), 300);
    w.append({1, 2, 299});
    w.commit();
  }
  fs::copy_file(path("ok.bin"), path("short.bin"));
  fs::resize_file(path("short.bin"), 1024 + 5);
  expect_error(path("short.bin"), "truncated or corrupt", 0);
  std::ofstream(path("tiny.bin")) << "abc";
  expect_error(path("tiny.bin"), "shorter than its 1024-byte header", 0);
  fs::copy_file(path("ok.bin"), path("magic.bin"));
  {
    std::fstream f(path("magic.bin"), std::ios::in | std::ios::out | std::ios::binary);
    const int32_t junk = 1234;
    f.write(reinterpret_cast<const char*>(&junk), 4);
  }
  expect_error(path("magic.bin"), "header starts 1234", 0);
  expect_error(path("ok.bin"), "token 2 is 299, outside the vocabulary of 256", 256);
  expect_error(path("absent.bin"), "cannot open", 0);
  TokenFileWriter w(path("v.bin"), 10);
  EXPECT_THROW(w.append({10}), loom::Error);
}

TEST_F(TokenFiles, AWriterDestroyedUncommittedLeavesNothing) {
  {
    TokenFileWriter w(path("gone.bin"), 300);
    w.append({1, 2, 3});
  }
  EXPECT_FALSE(fs::exists(path("gone.bin")));
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left " << e.path();
}

TEST(TokenSet, WindowsAreDrawnByWeight) {
  loom::TokenSet set;
  set.add(std::vector<int32_t>(1000, 0), 3);
  set.add(std::vector<int32_t>(50, 1), 1);
  const int64_t T = 8, n = 20000;
  int64_t second = 0;
  for (int64_t g = 0; g < n; ++g) {
    const loom::Window w = loom::draw_window(set, 12345, g, T);
    ASSERT_GE(w.start, 0);
    ASSERT_LT(w.start, set.size(w.stream) - T);
    second += w.stream;
  }
  // 1/4 of the windows from the second stream: binomial sd sqrt(n p (1 - p)) ~ 61, bound 5 sd.
  EXPECT_NEAR(double(second), n / 4.0, 5 * 61.3);
  // One stream: the start alone, as before weights existed (uniform over [0, n - T)).
  loom::TokenSet one;
  one.add(std::vector<int32_t>(1000, 0), 7);
  const auto r = loom::philox4x32_10(5, 0, 99);
  EXPECT_EQ(loom::draw_window(one, 99, 5, T).start,
            int64_t((uint64_t(r[0]) << 32 | r[1]) % uint64_t(1000 - T)));
}

TEST_F(TokenFiles, PrepareInChunksEqualsTokenizingTheWholeText) {
  // Text with long words, punctuation, runs of spaces and newlines, digits and UTF-8.
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "In the beginning  God created " + std::to_string(i * 7919) +
            " heavens,\n\nand the earth; caf\xc3\xa9   na\xc3\xafve.\t'tis\n";
  std::ofstream(path("doc.txt"), std::ios::binary) << text;
  loom::BpeTokenizer::Parts gpt2;
  for (int b = 0; b < 256; ++b) gpt2.tokens.push_back(std::string(1, char(b)));
  gpt2.tokens.push_back("th");
  gpt2.tokens.push_back(" th");
  gpt2.pattern = loom::known_piece_pattern("gpt2");
  for (const loom::BpeTokenizer& bpe :
       {loom::BpeTokenizer::train(text, 400), loom::BpeTokenizer::from_parts(gpt2, "test")}) {
    loom::Tokenizer tok;
    tok.bytes = false;
    tok.bpe = bpe;
    const std::string out = path("prep-" + std::to_string(bpe.vocab_size()));
    const loom::PreparedTokens r =
        loom::prepare_tokens({path("doc.txt")}, tok, "test", 0.1, out, 97);
    const size_t n_val = size_t(std::llround(double(text.size()) * 0.1));
    const auto train = bpe.encode(text.substr(0, text.size() - n_val));
    const auto val = bpe.encode(text.substr(text.size() - n_val));
    EXPECT_EQ(all_tokens(TokenFile(out + "/train.bin")), train);
    EXPECT_EQ(all_tokens(TokenFile(out + "/val.bin")), val);
    EXPECT_EQ(r.train_tokens, int64_t(train.size()));
    EXPECT_TRUE(fs::exists(out + "/meta.json"));
    EXPECT_THROW(loom::prepare_tokens({path("doc.txt")}, tok, "test", 0.1, out), loom::Error);
  }
}

}  // namespace
