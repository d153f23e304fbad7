// Tokenizer files of other tools (tokenizer.json, vocab.json + merges.txt, tiktoken) and the
// two merge rules, on vocabularies small enough to work out by hand; each bad file gives one
// error naming it. Equality with tiktoken and tokenizers themselves on the whole KJV text is
// tests/e2e/tokenizer_test.sh.
#include <cstdio>
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

// A SentencePiece-style BPE laid out as Llama 2's tokenizer.json: <unk> <s> </s>, the byte
// tokens <0x00>..<0xFF> at 3..258, then "▁" (259), a b c (260-262), and what the merges make:
// "▁a" 263, "ab" 264, "▁ab" 265, "bc" 266, "c▁" 267, "bb" 268.
std::string sentencepiece_vocab() {
  std::string v = R"({"<unk>": 0, "<s>": 1, "</s>": 2, )";
  for (int b = 0; b < 256; ++b) {
    char name[16];
    std::snprintf(name, sizeof name, "\"<0x%02X>\": %d, ", b, 3 + b);
    v += name;
  }
  return v + R"("▁": 259, "a": 260, "b": 261, "c": 262, "▁a": 263, "ab": 264, "▁ab": 265,
    "bc": 266, "c▁": 267, "bb": 268})";
}

TEST_F(TokenizerFiles, SentencePieceBpeAsLlamaTwoWritesIt) {
  const std::string added =
      R"("added_tokens": [{"id": 0, "content": "<unk>", "special": true},
      {"id": 1, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true}], )";
  const std::string merges = R"("▁ a", "a b", "▁a b", "b c", "c ▁", "b b")";
  auto file = [&](const std::string& name, const std::string& how) {
    return write(name, "{" + added + how +
                           R"("model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true,
        "unk_token": "<unk>", "vocab": )" +
                           sentencepiece_vocab() + R"(, "merges": [)" + merges + "]}}");
  };
  const BpeTokenizer llama2 = loom::read_tokenizer_json(file("llama2.json", R"(
      "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
      "pre_tokenizer": null, )"));
  // " ab": ▁ a b -> ▁a b (priority 0) -> ▁ab (2).
  EXPECT_EQ(llama2.encode("ab"), (Ids{265}));
  // " abc": ▁a b c -> ▁ab c: "▁a b" (2) before "b c" (3).
  EXPECT_EQ(llama2.encode("abc"), (Ids{265, 262}));
  // " bc a": ▁a first (0), then bc (3); nothing joins ▁ and bc.
  EXPECT_EQ(llama2.encode("bc a"), (Ids{259, 266, 263}));
  // One piece: " c b" -> ▁ c▁ b, the merge "c ▁" across the space.
  EXPECT_EQ(llama2.encode("c b"), (Ids{259, 267, 261}));
  // Equal pairs overlapping: the leftmost merges first, " bbb" -> ▁ bb b.
  EXPECT_EQ(llama2.encode("bbb"), (Ids{259, 268, 261}));
  // é (C3 A9) is not in the vocabulary: its bytes' tokens, 3 + 0xC3 and 3 + 0xA9.
  EXPECT_EQ(llama2.encode("é"), (Ids{259, 198, 172}));
  // A "▁" in the text is the space it stands for; a leading space gets the prefix space too.
  EXPECT_EQ(llama2.encode("a▁b"), (Ids{263, 259, 261}));
  EXPECT_EQ(llama2.encode(" ab"), (Ids{259, 265}));
  // Decoding drops the prefix space, and the byte tokens are their bytes.
  EXPECT_EQ(llama2.decode({265, 262}), "abc");
  EXPECT_EQ(llama2.decode(llama2.encode("bc é c b")), "bc é c b");
  // The special tokens are not made from text.
  EXPECT_EQ(llama2.encode("<s>").size(), 4u);  // ▁ and the bytes of < s >
  EXPECT_EQ(llama2.special_id("<s>"), 1);

  // Metaspace, split at spaces: " c" and " b" are pieces, so "c ▁" no longer applies; a text
  // that starts with a space gets no second one.
  const BpeTokenizer metaspace = loom::read_tokenizer_json(file("metaspace.json", R"(
      "normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
        "prepend_scheme": "always", "split": true}, )"));
  EXPECT_EQ(metaspace.encode("c b"), (Ids{259, 262, 259, 261}));
  EXPECT_EQ(metaspace.encode(" ab"), (Ids{265}));
  EXPECT_EQ(metaspace.encode("bc a"), (Ids{259, 266, 263}));

  // Written as tokenizer.json and read again: the same ids, both layouts.
  for (const BpeTokenizer* tok : {&llama2, &metaspace}) {
    loom::write_tokenizer_json(*tok, path("again.json"));
    const BpeTokenizer again = loom::read_tokenizer_json(path("again.json"));
    for (const std::string text : {"ab", "abc", "bc a", "c b", " ab", "é a▁b"})
      EXPECT_EQ(again.encode(text), tok->encode(text)) << text;
  }

  // Not supported: another normalizer; a byte token missing.
  try {
    loom::read_tokenizer_json(file("nfkc.json", R"("normalizer": {"type": "NFKC"}, )"));
    ADD_FAILURE() << "NFKC was not refused";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("normalizer {\"type\":\"NFKC\"} is not supported with "
                                         "byte_fallback"),
              std::string::npos)
        << e.what();
  }
  std::string vocab = sentencepiece_vocab();
  vocab.replace(vocab.find("\"<0x41>\""), 8, "\"<0xZZ>\"");
  const std::string missing = write("missing.json", "{" + added + R"("model": {"type": "BPE",
      "byte_fallback": true, "vocab": )" + vocab + R"(, "merges": []}})");
  try {
    loom::read_tokenizer_json(missing);
    ADD_FAILURE() << "a missing byte token was not refused";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no <0x41> token"), std::string::npos) << e.what();
  }
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
