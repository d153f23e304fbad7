// Byte-level BPE: lossless on any bytes, learns the greedy merges, compresses repetitive
// text, and its file round-trips and rejects corruption.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "temp_dir_test.h"

#include "loom/core/error.h"
#include "loom/data/bpe.h"

namespace {

namespace fs = std::filesystem;
using loom::BpeTokenizer;

// Pseudo-English: words drawn from a small Zipf-ish vocabulary, with punctuation and newlines.
std::string synthetic_text(size_t bytes, uint32_t seed) {
  const std::vector<std::string> words = {
      "the",  "and",   "of", "to",  "in",   "that", "he", "shall", "unto", "for",  "his",  "lord",
      "they", "be",    "is", "him", "not",  "them", "it", "with",  "all",  "thou", "thy",  "was",
      "god",  "which", "my", "me",  "said", "but",  "ye", "their", "have", "will", "thee", "from"};
  std::mt19937 rng(seed);
  std::string text;
  while (text.size() < bytes) {
    const size_t r = rng() % 1000;
    text += words[(r * r / 1000) * words.size() / 1000];
    const uint32_t p = rng() % 20;
    text += p == 0 ? ".\n" : p == 1 ? ", " : p == 2 ? "\n\n" : " ";
  }
  return text;
}

std::string random_bytes(size_t n, std::mt19937& rng) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xff);
  return s;
}

class DataBpe : public TempDirTest {};

TEST_F(DataBpe, LearnsGreedyMergesWithDeterministicTies) {
  // Pairs in "aaabdaaabac": aa x4 is merged first (to 256), giving Z a b d Z a b a c; then
  // (Z, a) and (a, b) both occur twice and the smaller pair (a, b) wins (257); then (256, 257)
  // occurs twice (258); every remaining pair occurs once, so training stops.
  const BpeTokenizer tok = BpeTokenizer::train("aaabdaaabac", 1000);
  const std::vector<std::pair<int32_t, int32_t>> expected = {{'a', 'a'}, {'a', 'b'}, {256, 257}};
  EXPECT_EQ(tok.merges(), expected);
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.token_bytes(258), "aaab");
  EXPECT_EQ(tok.encode("aaabdaaabac"), (std::vector<int32_t>{258, 'd', 258, 'a', 'c'}));
}

TEST_F(DataBpe, RoundTripsAnyBytes) {
  const BpeTokenizer tok = BpeTokenizer::train(synthetic_text(50000, 1), 400);
  std::mt19937 rng(7);
  EXPECT_EQ(tok.decode(tok.encode("")), "");
  for (int trial = 0; trial < 200; ++trial) {
    const std::string s = random_bytes(rng() % 700, rng);  // incl. runs > kMaxPieceBytes
    ASSERT_EQ(tok.decode(tok.encode(s)), s) << "trial " << trial;
  }
  // Mixed: text with invalid UTF-8 and control bytes spliced in.
  std::string mixed = synthetic_text(3000, 2);
  for (size_t i = 0; i < mixed.size(); i += 97) mixed[i] = char(0x80 + i % 128);
  mixed += std::string(600, 'x') + std::string("\0\xff\xc3(", 4) + std::string(300, ' ');
  EXPECT_EQ(tok.decode(tok.encode(mixed)), mixed);

  // A tokenizer trained on random bytes (merges between arbitrary bytes) is lossless too.
  const BpeTokenizer noisy = BpeTokenizer::train(random_bytes(20000, rng) + mixed, 300);
  for (int trial = 0; trial < 50; ++trial) {
    const std::string s = random_bytes(rng() % 400, rng);
    ASSERT_EQ(noisy.decode(noisy.encode(s)), s) << "trial " << trial;
  }
}

TEST_F(DataBpe, MergesCompressRepetitiveText) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the cat sat on the mat. ";
  const BpeTokenizer tok = BpeTokenizer::train(text, 300);
  EXPECT_GT(tok.vocab_size(), 256);
  EXPECT_LE(tok.vocab_size(), 300);
  const std::vector<int32_t> ids = tok.encode(text);
  // Pieces are "the", " cat", " sat", " on", " the", " mat."; with enough merges each repeated
  // piece becomes one token (the leading "the" occurs once and may stay split).
  EXPECT_LE(ids.size(), 6u * 300u + 2u);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(BpeTokenizer().encode(text).size(), text.size());  // no merges: one token per byte
}

TEST_F(DataBpe, TrainsOnTwoHundredKilobytesQuicklyAndDeterministically) {
  const std::string text = synthetic_text(200000, 3);
  const auto start = std::chrono::steady_clock::now();
  const BpeTokenizer a = BpeTokenizer::train(text, 1024);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
  const BpeTokenizer b = BpeTokenizer::train(text, 1024);
  EXPECT_EQ(a.merges(), b.merges());
  const std::vector<int32_t> ids = a.encode(text);
  EXPECT_LT(ids.size() * 3, text.size());
  EXPECT_EQ(a.decode(ids), text);
}

TEST_F(DataBpe, SaveLoadGivesIdenticalEncodings) {
  const std::string text = synthetic_text(30000, 4);
  const BpeTokenizer tok = BpeTokenizer::train(text, 350);
  tok.save(path("tok.bpe"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1)
      << "a temporary file was left behind";
  const BpeTokenizer loaded = BpeTokenizer::load(path("tok.bpe"));
  EXPECT_EQ(loaded.vocab_size(), tok.vocab_size());
  EXPECT_EQ(loaded.merges(), tok.merges());
  EXPECT_EQ(loaded.encode(text), tok.encode(text));
  const std::string other = synthetic_text(5000, 5) + "\xff\xfe unseen bytes";
  EXPECT_EQ(loaded.encode(other), tok.encode(other));
}

TEST_F(DataBpe, CorruptFilesThrowNamingTheFile) {
  const BpeTokenizer tok = BpeTokenizer::train(synthetic_text(5000, 6), 270);
  tok.save(path("good.bpe"));
  std::ifstream in(path("good.bpe"));
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  auto expect_load_error = [&](const std::string& name, const std::string& content,
                               const std::string& detail) {
    std::ofstream(path(name), std::ios::binary) << content;
    try {
      BpeTokenizer::load(path(name));
      ADD_FAILURE() << name << ": no error";
    } catch (const loom::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path(name)), std::string::npos) << msg;
      EXPECT_NE(msg.find(detail), std::string::npos) << msg;
    }
  };
  expect_load_error("magic.bpe", "loom-bpe 2" + good.substr(10), "line 1");
  expect_load_error("truncated.bpe", good.substr(0, good.size() - 8), "merge");
  expect_load_error("count.bpe", "loom-bpe 1\nmerges 3\n97 98\n", "promises 3 merges");
  expect_load_error("text.bpe", "loom-bpe 1\nmerges 1\n97 x\n", "line 3");
  expect_load_error("future.bpe", "loom-bpe 1\nmerges 2\n97 98\n257 97\n", "does not exist yet");
  expect_load_error("repeat.bpe", "loom-bpe 1\nmerges 2\n97 98\n97 98\n", "repeats merge 0");
  expect_load_error("empty.bpe", "", "line 1");
  EXPECT_THROW(BpeTokenizer::load(path("absent.bpe")), loom::Error);
}

TEST_F(DataBpe, RejectsBadArguments) {
  EXPECT_THROW(BpeTokenizer::train("abc", 255), loom::Error);
  const BpeTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_THROW(tok.decode({65, 256}), loom::Error);
  EXPECT_THROW(tok.decode({-1}), loom::Error);
}

}  // namespace
