// BPE training with incremental pair counts: after each merge only the words that contain the
// merged pair are rescanned, so a few MB of text trains in seconds.
#include <queue>
#include <string_view>
#include <unordered_map>

#include "loom/core/error.h"
#include "loom/data/bpe.h"

namespace loom {
namespace {

// A distinct piece of the training text, as current token ids, with how often it occurs.
struct Word {
  std::vector<int32_t> ids;
  int64_t count = 0;
};

struct Candidate {
  int64_t count;
  uint64_t key;
  // Max-heap order: more frequent first; on ties the smaller key, for determinism.
  bool operator<(const Candidate& o) const {
    return count != o.count ? count < o.count : key > o.key;
  }
};

bool contains_pair(const std::vector<int32_t>& ids, int32_t left, int32_t right) {
  for (size_t i = 0; i + 1 < ids.size(); ++i)
    if (ids[i] == left && ids[i + 1] == right) return true;
  return false;
}

// Replaces every non-overlapping (left, right) in ids, scanning left to right, by `merged`.
void merge_pair(std::vector<int32_t>& ids, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
      ids[out++] = merged;
      ++i;
    } else {
      ids[out++] = ids[i];
    }
  }
  ids.resize(out);
}

}  // namespace

BpeTokenizer BpeTokenizer::train(const std::string& text, int vocab_size) {
  LOOM_CHECK(vocab_size >= kByteTokens)
      << "BPE train: vocab_size = " << vocab_size << ", expected at least " << kByteTokens
      << " (the byte tokens)";

  // Distinct pieces in order of first appearance (a deterministic word numbering).
  std::vector<Word> words;
  {
    std::unordered_map<std::string_view, size_t> index;
    detail::for_each_bpe_piece(text, [&](size_t offset, size_t length) {
      const std::string_view piece(text.data() + offset, length);
      const auto [it, fresh] = index.emplace(piece, words.size());
      if (fresh) {
        const auto* bytes = reinterpret_cast<const uint8_t*>(piece.data());
        words.push_back(Word{std::vector<int32_t>(bytes, bytes + length), 0});
      }
      words[it->second].count += 1;
    });
  }

  // pair_count[key]: occurrences of the pair over the whole text. where[key]: the words that
  // contain it (may hold stale entries for words that no longer do; those are skipped).
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  auto note_word = [&](uint64_t key, int32_t w) {
    auto& list = where[key];
    if (list.empty() || list.back() != w) list.push_back(w);
  };
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& ids = words[w].ids;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const uint64_t key = detail::bpe_pair_key(ids[i], ids[i + 1]);
      pair_count[key] += words[w].count;
      note_word(key, int32_t(w));
    }
  }
  // Lazy max-heap: counts of existing pairs only ever fall (a merge only creates pairs with
  // the new token), so an entry whose count is stale is re-pushed with the current count and
  // the first up-to-date entry popped is the true maximum.
  std::priority_queue<Candidate> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  std::vector<std::pair<int32_t, int32_t>> merges;
  std::unordered_map<uint64_t, int64_t> delta;
  while (kByteTokens + int64_t(merges.size()) < vocab_size) {
    Candidate best{0, 0};
    while (!heap.empty()) {
      const Candidate top = heap.top();
      heap.pop();
      const auto it = pair_count.find(top.key);
      const int64_t current = it == pair_count.end() ? 0 : it->second;
      if (current == top.count) {
        best = top;
        break;
      }
      if (current > 0) heap.push({current, top.key});
    }
    // A pair seen once teaches nothing that generalises; stop rather than memorise.
    if (best.count < 2) break;

    const int32_t left = int32_t(best.key >> 32), right = int32_t(uint32_t(best.key));
    const int32_t merged = kByteTokens + int32_t(merges.size());
    merges.emplace_back(left, right);

    // Rescan only the words holding the pair: subtract their old pairs, merge, add the new.
    delta.clear();
    const std::vector<int32_t> holders = std::move(where[best.key]);
    where.erase(best.key);
    for (const int32_t w : holders) {
      Word& word = words[size_t(w)];
      if (!contains_pair(word.ids, left, right)) continue;  // a stale `where` entry
      for (size_t i = 0; i + 1 < word.ids.size(); ++i)
        delta[detail::bpe_pair_key(word.ids[i], word.ids[i + 1])] -= word.count;
      merge_pair(word.ids, left, right, merged);
      for (size_t i = 0; i + 1 < word.ids.size(); ++i) {
        const uint64_t key = detail::bpe_pair_key(word.ids[i], word.ids[i + 1]);
        delta[key] += word.count;
        if (word.ids[i] == merged || word.ids[i + 1] == merged) note_word(key, w);
      }
    }
    for (const auto& [key, d] : delta) {
      if (d == 0) continue;
      int64_t& count = pair_count[key];
      count += d;
      if (d > 0) heap.push({count, key});
      if (count == 0) pair_count.erase(key);
    }
  }
  return BpeTokenizer(std::move(merges), "BPE training");
}

}  // namespace loom
