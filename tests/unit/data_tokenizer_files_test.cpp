// Tokenizer files of other tools (tokenizer.json, vocab.json + merges.txt, tiktoken) and the
// two merge rules, on vocabularies small enough to work out by hand; each bad file gives one
// error naming it. Equality with tiktoken and tokenizers themselves on the whole KJV text is
// tests/e2e/tokenizer_test.sh.
#include <fstream>

#include <gtest/gtest.h>

#include "temp_dir_test.h"

#include "loom/core/error.h"
#include "loom/data/bpe.h"
#include "loom/data/pretokenize.h"
#include "loom/data/tokenizer_files.h"

namespace {

using loom::BpeTokenizer;
using Ids = std::vector<int32_t>;

// GPT-2's byte-to-character table, written out from its definition: the printable Latin-1
// bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves, the rest for 256, 257, ...
std::string byte_char(int b) {
  static std::vector<int> cp = [] {
    std::vector<int> c(256, -1);
    int next = 256;
    for (int i = 0; i < 256; ++i)
      if ((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174) c[size_t(i)] = i;
    for (int i = 0; i < 256; ++i)
      if (c[size_t(i)] < 0) c[size_t(i)] = next++;
    return c;
  }();
  const int v = cp[size_t(b)];
  std::string s;
  if (v < 0x80) {
    s += char(v);
  } else {
    s += char(0xC0 | v >> 6);
    s += char(0x80 | (v & 0x3F));
  }
  return s;
}

class TokenizerFiles : public TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  // A byte-level vocabulary: the 256 bytes at their own ids, then `extra` at 256, 257, ...
  static std::string vocab_json(const std::vector<std::string>& extra) {
    std::string v = "{";
    for (int b = 0; b < 256; ++b) {
      std::string c = byte_char(b);
      if (c == "\"" || c == "\\") c = "\\" + c;
      v += "\"" + c + "\": " + std::to_string(b) + ", ";
    }
    for (size_t k = 0; k < extra.size(); ++k)
      v += "\"" + extra[k] + "\": " + std::to_string(256 + k) + (k + 1 < extra.size() ? ", " : "");
    if (extra.empty()) v.resize(v.size() - 2);
    return v + "}";
  }
  std::string tokenizer_json(const std::string& merges, const std::string& vocab,
                             const std::string& model_extra = "",
                             const std::string& top_extra = "") {
    return write("tokenizer.json",
                 "{\"version\": \"1.0\", " + top_extra +
                     "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                     "\"use_regex\": true},\"model\": {\"type\": \"BPE\", " +
                     model_extra + "\"vocab\": " + vocab + ", \"merges\": [" + merges + "]}}");
  }
};

TEST_F(TokenizerFiles, HuggingFaceMergesApplyInListOrder) {
  const std::string vocab = vocab_json({"ab", "abc", "bc"});  // ids 256, 257, 258
  // "a b" first: a b c -> ab c -> abc.
  const BpeTokenizer first =
      loom::read_tokenizer_json(tokenizer_json(R"("a b", "ab c", "b c")", vocab));
  EXPECT_EQ(first.encode("abc"), (Ids{257}));
  // "b c" first: a b c -> a bc, and no merge joins a with bc.
  const BpeTokenizer second =
      loom::read_tokenizer_json(tokenizer_json(R"("b c", "a b", "ab c")", vocab));
  EXPECT_EQ(second.encode("abc"), (Ids{'a', 258}));
  // The newer spelling of merges as pairs reads the same.
  const BpeTokenizer pairs =
      loom::read_tokenizer_json(tokenizer_json(R"(["b", "c"], ["a", "b"], ["ab", "c"])", vocab));
  EXPECT_EQ(pairs.encode("abc"), (Ids{'a', 258}));
  // GPT-2's pieces: "abc" and " abc"; no merge joins the space (Ġ) to a letter.
  EXPECT_EQ(first.encode("abc abc"), (Ids{257, ' ', 257}));
  // A merge never crosses pieces: "ab" + "c" across "ab,c" stays apart.
  EXPECT_EQ(first.encode("ab,c"), (Ids{256, ',', 'c'}));
  EXPECT_EQ(first.decode(first.encode("x abc, abc")), "x abc, abc");
}

TEST_F(TokenizerFiles, IgnoreMergesTakesAWholePieceThatIsAToken) {
  const std::string vocab = vocab_json({"bc", "abc"});  // no merge makes "abc"
  EXPECT_EQ(loom::read_tokenizer_json(tokenizer_json(R"("b c")", vocab)).encode("abc"),
            (Ids{'a', 256}));
  EXPECT_EQ(
      loom::read_tokenizer_json(tokenizer_json(R"("b c")", vocab, "\"ignore_merges\": true, "))
          .encode("abc"),
      (Ids{257}));
}

TEST_F(TokenizerFiles, VocabAndMergesFilesReadAsTokenizerJson) {
  write("vocab.json", vocab_json({"ab", "abc", "bc", "<|endoftext|>"}));
  write("merges.txt", "#version: 0.2\na b\nab c\nb c\n");
  const BpeTokenizer tok = loom::read_vocab_merges(path("vocab.json"), path("merges.txt"));
  EXPECT_EQ(tok.encode("abc abc"), (Ids{257, ' ', 257}));
  EXPECT_EQ(tok.special_id("<|endoftext|>"), 259);
  // A special token's spelling in text is ordinary text.
  EXPECT_EQ(tok.encode("<|endoftext|>").size(), 4u + 1u + 4u + 1u + 3u);  // <| endoftext |>
}

TEST_F(TokenizerFiles, TiktokenMergesByRankOfTheJoinedBytes) {
  // Ranks 0..255: the bytes; 256 "bc", 257 "ab", 258 "abc" (base64 YmM=, YWI=, YWJj).
  std::string ranks;
  const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int b = 0; b < 256; ++b)
    ranks += std::string{b64[b >> 2], b64[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  ranks += "YmM= 256\nYWI= 257\nYWJj 258\n";
  const BpeTokenizer tok = loom::read_tiktoken(write("t.tiktoken", ranks), "gpt2");
  // x a b c x: (b, c) has the lowest rank, then (a, bc) joins to "abc", rank 258.
  EXPECT_EQ(tok.encode("xabcx"), (Ids{'x', 258, 'x'}));
  EXPECT_EQ(tok.vocab_size(), 260);  // + <|endoftext|>, as tiktoken's gpt2
  EXPECT_EQ(tok.special_id("<|endoftext|>"), 259);
  // The merges that rebuild each token from lower ranks: bc = b c, ab = a b, abc = a bc.
  EXPECT_EQ(tok.merge_list(),
            (std::vector<std::pair<int32_t, int32_t>>{{'b', 'c'}, {'a', 'b'}, {'a', 256}}));
}

TEST_F(TokenizerFiles, Gpt2PatternCutsPiecesAsGpt2Does) {
  const loom::PieceRegex regex(loom::known_piece_pattern("gpt2"), "test");
  std::vector<std::string> pieces;
  const std::string text = "Hello world's  end 42!\n";
  regex.for_each_piece(text, [&](size_t at, size_t n) { pieces.push_back(text.substr(at, n)); });
  // Two spaces before a word: the first is a piece of its own, the second starts the word.
  EXPECT_EQ(pieces,
            (std::vector<std::string>{"Hello", " world", "'s", " ", " end", " 42", "!", "\n"}));
  // Stretches that no match covers are pieces too.
  const loom::PieceRegex digits("[0-9]+", "test");
  pieces.clear();
  regex.for_each_piece("", [&](size_t, size_t) { pieces.push_back("?"); });
  EXPECT_TRUE(pieces.empty());
  const std::string mixed = "ab12cd3";
  digits.for_each_piece(mixed, [&](size_t at, size_t n) { pieces.push_back(mixed.substr(at, n)); });
  EXPECT_EQ(pieces, (std::vector<std::string>{"ab", "12", "cd", "3"}));
}

TEST_F(TokenizerFiles, LoomBpeWrittenAsTokenizerJsonEncodesTheSame) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the lord said unto moses, and the people said amen.\n";
  const BpeTokenizer own = BpeTokenizer::train(text, 300);
  loom::write_tokenizer_json(own, path("own.json"));
  const BpeTokenizer back = loom::read_tokenizer_json(path("own.json"));
  const std::string probe = text + "  unknown\twords \x01\x7f\xc3\xa9 here\n\n";
  EXPECT_EQ(back.encode(probe), own.encode(probe));
  EXPECT_FALSE(back.is_loom_bpe());
  EXPECT_TRUE(own.is_loom_bpe());
  EXPECT_THROW(back.save(path("back.bpe")), loom::Error);
}

TEST_F(TokenizerFiles, BadFilesGiveOneErrorNamingThem) {
  auto fails = [&](const std::string& file, const std::string& what) {
    try {
      loom::read_tokenizer_json(file);
      ADD_FAILURE() << "no error for " << what;
    } catch (const loom::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  const std::string vocab = vocab_json({"ab"});
  fails(write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})"), "WordPiece");
  fails(tokenizer_json(R"("a b")", vocab, "", R"("normalizer": {"type": "NFC"}, )"), "NFC");
  fails(tokenizer_json(R"("a q9")", vocab), "not in the vocabulary");
  fails(tokenizer_json(R"("a b")", vocab, R"("byte_fallback": true, )"), "byte_fallback");
  fails(tokenizer_json("", R"({"a": 0, "b": 2})"), "no token has the id 1");
  std::string no_bang = vocab_json({});
  no_bang.replace(no_bang.find("\"!\": 33"), 7, "\"xy\": 33");
  fails(tokenizer_json("", no_bang), "byte 0x21 has no token");
  fails(write("junk.json", "{\"model\": "), "not valid JSON");
  fails(write("split.json", R"({"model": {"type": "BPE", "vocab": )" + vocab +
                                R"(, "merges": []}, "pre_tokenizer": {"type": "Sequence",
        "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?<!"}, "behavior": "Isolated",
        "invert": false}, {"type": "ByteLevel", "use_regex": false}]}})"),
        "does not compile");
  EXPECT_THROW(loom::read_tiktoken(write("dup.tiktoken", "YQ== 0\nYQ== 0\n"), "gpt2"), loom::Error);
  EXPECT_THROW(loom::read_tiktoken(write("b64.tiktoken", "Y!== 0\n"), "gpt2"), loom::Error);
  EXPECT_THROW(loom::read_tiktoken(write("gap.tiktoken", "YQ== 1\n"), "gpt2"), loom::Error);
  EXPECT_THROW(loom::read_tiktoken(write("p.tiktoken", "YQ== 0\n"), "gpt5"), loom::Error);
}

}  // namespace
