// In-memory checkpoints kept by peers (resilience.memory_checkpoint_every; the idea of Gemini,
// SOSP'23): every few steps each rank writes what it holds into its machine's memory file
// system (/dev/shm) and sends a copy to a buddy rank on another machine, which keeps it there
// too. A process that dies loses nothing of it (the files outlive it); a machine that dies loses
// its ranks' own copies, and its replacement takes them from the buddies. A restart at the same
// layout restores from memory when every rank's copy of one step is found, checksums matching,
// and falls back to the disk checkpoint otherwise.
//
//   <root>/loom-<run id>/<host>/own-00002-step-000010.bin    rank 2's copy of step 10
//   <root>/loom-<run id>/<host>/held-00002-step-000010.bin   its buddy's copy of it
//
// A copy is one blob: a header (magic, step, layout, payload size, payload xxh64) and the
// payload, whose meaning is the caller's (train/checkpointer.h). The layout is the caller's
// hash of what the payload holds and where: a copy is used only by the rank of the same layout.
// Each save commits when every rank has written its step; the copies of older steps go then,
// so at most two steps' copies exist, one only while a save is under way.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"

namespace loom {

// Whose copy each rank keeps: rank r's goes to (r + k) mod world with k the ranks on r's host,
// so to the same position on the next host when the ranks fill hosts in equal blocks (mpirun's
// placement by slot); on one host, or hosts in another pattern, to the next rank.
std::vector<int> buddies_of(const std::vector<std::string>& hosts);

class PeerStore {
 public:
  // Collective over group (a group of its own: a save runs on a background thread). host: the
  // name this rank's machine is known by (see dist/hosts.h).
  PeerStore(std::string root, const std::string& run_id, dist::ProcessGroup& group,
            const std::string& host);

  // Collective: keeps blob (U8, on the host) as this rank's copy of `step` and sends the buddy
  // its copy, receiving and keeping the copy of the rank this one is the buddy of; then drops
  // older steps' copies. layout: see above.
  void save(int64_t step, uint64_t layout, const Tensor& payload);

  // What a restore can use: the newest step >= not_before of which every rank finds a copy of
  // its layout (its own, or its buddy's), or step -1 with the reason there is none.
  struct Found {
    int64_t step = -1;
    std::string why_not;
    std::vector<int> from_buddy;  // the ranks whose own copy is gone: their buddy sends it
  };
  // A copy's payload: data and size, kept valid by `keep` (a mapping of the copy's file, or the
  // memory it was received into); data is null where there is none.
  struct Payload {
    const char* data = nullptr;
    size_t size = 0;
    std::shared_ptr<const void> keep;
    bool ok() const { return data != nullptr; }
  };

  // Collective: checks this rank's own copies whole (one that fails its checksum is named and
  // passed over), those it holds for another by their headers. layout: this rank's.
  Found find(uint64_t layout, int64_t not_before);
  // Collective: this rank's payload of found.step (its own copy, or sent by its buddy), or none
  // where the copy failed its checksum (the caller agrees on the outcome).
  Payload fetch(const Found& found);

  // Removes this rank's copies (its own and the one it holds): after a restore from disk they
  // belong to a past the run no longer follows; at the run's end they are done with.
  void forget();

  const std::string& dir() const { return dir_; }
  int buddy() const { return buddies_[size_t(rank_)]; }

 private:
  std::string path(const char* kind, int rank, int64_t step) const;
  // Steps of this rank's copies of `kind` for `rank`, newest first.
  std::vector<int64_t> steps_of(const char* kind, int rank) const;
  void remove_temps() const;  // this rank's files of a write a crash cut short

  dist::ProcessGroup& group_;
  std::string dir_;
  int rank_;
  std::vector<int> buddies_;
  int held_for_;    // the rank whose copy this one keeps
  Payload cached_;  // find()'s newest own copy, checked, for fetch()
  int64_t cached_step_ = -1;
};

}  // namespace loom
