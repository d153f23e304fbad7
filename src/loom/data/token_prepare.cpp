#include "loom/data/token_prepare.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/core/json_file.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// Tokenizes bytes [begin, end) of `in` chunk by chunk into `out`.
void tokenize_range(std::ifstream& in, const std::string& path, int64_t begin, int64_t end,
                    const Tokenizer& tok, size_t chunk_bytes, TokenFileWriter& out) {
  in.clear();
  in.seekg(begin);
  std::string carry;  // bytes read past the last cut, the start of the next chunk
  for (int64_t at = begin; at < end || !carry.empty();) {
    std::string text = std::move(carry);
    carry.clear();
    const size_t want = size_t(std::min<int64_t>(int64_t(chunk_bytes), end - at));
    const size_t had = text.size();
    text.resize(had + want);
    in.read(text.data() + had, std::streamsize(want));
    LOOM_CHECK(in.gcount() == std::streamsize(want))
        << "data prepare: reading " << path << " failed at byte " << at;
    at += int64_t(want);
    if (at < end) {
      // Cut before the last " x" that follows a non-space; without one, read on.
      size_t cut = text.size() - 1;
      while (cut > 1 && !(text[cut] == ' ' && !is_space(text[cut - 1]) && cut + 1 < text.size() &&
                          !is_space(text[cut + 1])))
        --cut;
      if (cut <= 1) {
        carry = std::move(text);
        continue;
      }
      carry = text.substr(cut);
      text.resize(cut);
    }
    out.append(tok.encode(text));
  }
}

}  // namespace

PreparedTokens prepare_tokens(const std::vector<std::string>& inputs, const Tokenizer& tok,
                              const std::string& tokenizer_spec, double val_fraction,
                              const std::string& out_dir, size_t chunk_bytes) {
  LOOM_CHECK(!inputs.empty()) << "data prepare: no input text";
  LOOM_CHECK(val_fraction > 0 && val_fraction < 1)
      << "data prepare: --val-fraction must be in (0, 1), got " << val_fraction;
  LOOM_CHECK(!fs::exists(out_dir))
      << "data prepare: " << out_dir << " exists; remove it or name another directory";
  for (const std::string& f : inputs)
    LOOM_CHECK(fs::is_regular_file(f)) << "data prepare: input " << f << " is not a file";
  const fs::path final_dir = fs::absolute(out_dir);
  const fs::path work = final_dir.parent_path() /
                        (final_dir.filename().string() + ".partial." + std::to_string(::getpid()));
  fs::create_directories(work);
  try {
    const int64_t vocab = tok.bpe.vocab_size();
    const int32_t eot = tok.bytes ? -1 : tok.bpe.special_id("<|endoftext|>");
    TokenFileWriter train((work / "train.bin").string(), vocab),
        val((work / "val.bin").string(), vocab);
    PreparedTokens r;
    for (const std::string& path : inputs) {
      std::ifstream in(path, std::ios::binary);
      LOOM_CHECK(in) << "data prepare: cannot read " << path;
      const int64_t size = int64_t(fs::file_size(path));
      const int64_t n_val = std::llround(double(size) * val_fraction), n_train = size - n_val;
      if (r.documents > 0 && eot >= 0) {
        train.append({eot});
        val.append({eot});
      }
      tokenize_range(in, path, 0, n_train, tok, chunk_bytes, train);
      tokenize_range(in, path, n_train, size, tok, chunk_bytes, val);
      r.documents += 1;
      r.bytes += size;
    }
    r.train_tokens = train.size();
    r.val_tokens = val.size();
    train.commit();
    val.commit();
    save_tokenizer_copy(tok, work.string());
    Json sources = Json::array();
    for (const std::string& f : inputs) sources.push_back(Json(fs::absolute(f).string()));
    write_json_file((work / "meta.json").string(), Json::object({{"format", "loom tokens 1"},
                                                                 {"tokenizer", tokenizer_spec},
                                                                 {"vocab_size", vocab},
                                                                 {"val_fraction", val_fraction},
                                                                 {"documents", r.documents},
                                                                 {"bytes", r.bytes},
                                                                 {"train_tokens", r.train_tokens},
                                                                 {"val_tokens", r.val_tokens},
                                                                 {"sources", sources}}));
    fs::rename(work, final_dir);
    return r;
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(work, ignored);
    throw;
  }
}

}  // namespace loom
