#include "loom/checkpoint/peer_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/hash.h"
#include "loom/dist/hosts.h"
#include "loom/ops/creation.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'M', 'E', 'M', '1'};

// A copy's first 40 bytes.
struct Header {
  char magic[8];
  int64_t step;
  uint64_t layout, payload_bytes, payload_xxh64;
};
static_assert(sizeof(Header) == 40);

constexpr int kTagHeader = 71, kTagPayload = 72;
constexpr int64_t kPieceBytes = int64_t(8) << 20;  // a save's transfers go in pieces of 8 MiB

Header header_of(int64_t step, uint64_t layout, const Tensor& payload) {
  Header h;
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.step = step;
  h.layout = layout;
  h.payload_bytes = uint64_t(payload.nbytes());
  h.payload_xxh64 = xxh64(payload.data_ptr(), payload.nbytes());
  return h;
}

Tensor bytes_of(const Header& h) {
  Tensor t = Tensor::empty({int64_t(sizeof h)}, DType::U8, cpu_device(), MemCategory::Other);
  std::memcpy(t.data_ptr(), &h, sizeof h);
  return t;
}

Tensor payload_tensor(uint64_t bytes) {
  return Tensor::empty({int64_t(bytes)}, DType::U8, cpu_device(), MemCategory::Other);
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    LOOM_CHECK(w > 0) << "memory checkpoint: cannot write " << path << ": " << std::strerror(errno);
    p += w;
    n -= size_t(w);
  }
}

// Written under a temporary name and renamed: a reader sees a whole copy or none. (No fsync: the
// copy lives in memory, and outlives the process, not the machine.)
void write_copy(const std::string& path, const Header& h, const Tensor& payload) {
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  LOOM_CHECK(fd >= 0) << "memory checkpoint: cannot create " << temp << ": "
                      << std::strerror(errno);
  try {
    write_all(fd, &h, sizeof h, temp);
    write_all(fd, payload.data_ptr(), payload.nbytes(), temp);
  } catch (...) {
    ::close(fd);
    fs::remove(temp);
    throw;
  }
  ::close(fd);
  fs::rename(temp, path);
}

// A copy as found: its header and, read whole, its payload mapped (MAP_POPULATE: the pages
// are the memory file system's own, mapped in one go) and checked; `why` says what is wrong
// with it (then there is no payload).
struct Copy {
  Header header{};
  PeerStore::Payload payload;
  std::string why;
};

Copy read_copy(const std::string& path, bool whole) {
  Copy c;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    c.why = std::string("cannot open it: ") + std::strerror(errno);
    return c;
  }
  const uint64_t file_bytes = uint64_t(fs::file_size(path));
  if (::pread(fd, &c.header, sizeof c.header, 0) != ssize_t(sizeof c.header) ||
      std::memcmp(c.header.magic, kMagic, 8) != 0) {
    c.why = "it is not a memory checkpoint copy";
  } else if (file_bytes != sizeof(Header) + c.header.payload_bytes) {
    c.why = "it holds " + std::to_string(file_bytes) + " bytes, its header says " +
            std::to_string(sizeof(Header) + c.header.payload_bytes);
  } else if (whole) {
    void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
      c.why = std::string("cannot map it: ") + std::strerror(errno);
    } else {
      c.payload.keep =
          std::shared_ptr<void>(map, [file_bytes](void* m) { ::munmap(m, file_bytes); });
      c.payload.data = static_cast<const char*>(map) + sizeof(Header);
      c.payload.size = c.header.payload_bytes;
      if (xxh64(c.payload.data, c.payload.size) != c.header.payload_xxh64) {
        c.why = "its bytes do not match their checksum";
        c.payload = {};
      }
    }
  }
  ::close(fd);
  return c;
}

// A payload as a tensor (to send it).
Tensor tensor_of(const PeerStore::Payload& p) {
  Tensor t = payload_tensor(p.size);
  std::memcpy(t.data_ptr(), p.data, p.size);
  return t;
}

// The copies of one rank this rank's machine holds, as found: (step, layout), newest first.
using Found2 = std::vector<std::pair<int64_t, uint64_t>>;

}  // namespace

std::vector<int> buddies_of(const std::vector<std::string>& hosts) {
  const int world = int(hosts.size());
  std::map<std::string, int> ranks_on;
  for (const std::string& h : hosts) ++ranks_on[h];
  // The shift that puts every copy on another host, if the placement has one.
  int shift = 1;
  if (ranks_on.size() > 1) {
    const int k = ranks_on.at(hosts[0]);
    bool elsewhere = k < world;
    for (int r = 0; r < world && elsewhere; ++r)
      elsewhere = hosts[size_t((r + k) % world)] != hosts[size_t(r)];
    if (elsewhere) shift = k;
  }
  std::vector<int> buddies(hosts.size());
  for (int r = 0; r < world; ++r) buddies[size_t(r)] = (r + shift) % world;
  return buddies;
}

PeerStore::PeerStore(std::string root, const std::string& run_id, dist::ProcessGroup& group,
                     const std::string& host)
    : group_(group),
      dir_((fs::path(root) / ("loom-" + run_id) / host).string()),
      rank_(group.rank()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  LOOM_CHECK(!ec && fs::is_directory(dir_))
      << "resilience.memory_store: cannot create " << dir_ << ": " << ec.message();
  buddies_ = buddies_of(dist::gather_names(group, host));
  held_for_ = int(std::find(buddies_.begin(), buddies_.end(), rank_) - buddies_.begin());
}

std::string PeerStore::path(const char* kind, int rank, int64_t step) const {
  char name[64];
  std::snprintf(name, sizeof name, "%s-%05d-step-%06lld.bin", kind, rank, (long long)step);
  return (fs::path(dir_) / name).string();
}

void PeerStore::remove_temps() const {
  char own[32], held[32];
  std::snprintf(own, sizeof own, "own-%05d-", rank_);
  std::snprintf(held, sizeof held, "held-%05d-", held_for_);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".tmp" && (name.rfind(own, 0) == 0 || name.rfind(held, 0) == 0))
      fs::remove(e.path(), ec);
  }
}

std::vector<int64_t> PeerStore::steps_of(const char* kind, int rank) const {
  std::vector<int64_t> steps;
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "%s-%05d-step-", kind, rank);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".bin") continue;
    long long step = -1;
    if (std::sscanf(name.c_str() + std::strlen(prefix), "%lld.bin", &step) == 1 && step >= 0)
      steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void PeerStore::save(int64_t step, uint64_t layout, const Tensor& payload) {
  LOOM_CHECK(payload.dtype() == DType::U8 && payload.is_contiguous() &&
             payload.device() == cpu_device())
      << "memory checkpoint: a payload is contiguous bytes on the host";
  const Header mine = header_of(step, layout, payload);
  const bool peers = group_.size() > 1;
  fs::create_directories(dir_);  // again: forget() removes it once empty
  if (peers) {                   // the buddy's copy, and the one this rank keeps for another
    const Tensor theirs_header = bytes_of(Header{});
    const Tensor my_header = bytes_of(mine);
    auto r = group_.recv(theirs_header, held_for_, kTagHeader);
    auto s = group_.send(my_header, buddy(), kTagHeader);
    r->wait();
    s->wait();
    Header theirs;
    std::memcpy(&theirs, theirs_header.data_ptr(), sizeof theirs);
    LOOM_CHECK(std::memcmp(theirs.magic, kMagic, 8) == 0 && theirs.step == step)
        << "memory checkpoint: rank " << held_for_ << " sent no copy of step " << step;
    const Tensor held = payload_tensor(theirs.payload_bytes);
    // In pieces: the step's own transfers, queued on the same communication thread, go between.
    const int64_t most = std::max(theirs.payload_bytes, mine.payload_bytes);
    for (int64_t at = 0; at < most; at += kPieceBytes) {
      auto piece = [at](const Tensor& t) {
        return t.as_strided({std::clamp<int64_t>(t.numel() - at, 0, kPieceBytes)}, {1}, at);
      };
      r = at < held.numel() ? group_.recv(piece(held), held_for_, kTagPayload) : nullptr;
      s = at < payload.numel() ? group_.send(piece(payload), buddy(), kTagPayload) : nullptr;
      if (r) r->wait();
      if (s) s->wait();
    }
    // (Its checksum, the sender's, is checked when a restore reads it.)
    write_copy(path("held", held_for_, step), theirs, held);
  }
  write_copy(path("own", rank_, step), mine, payload);
  group_.barrier()->wait();  // every rank holds step: the older copies can go
  for (int64_t s : steps_of("own", rank_))
    if (s != step) fs::remove(path("own", rank_, s));
  if (peers)
    for (int64_t s : steps_of("held", held_for_))
      if (s != step) fs::remove(path("held", held_for_, s));
  remove_temps();  // a save a crash cut short
}

PeerStore::Found PeerStore::find(uint64_t layout, int64_t not_before) {
  // What this machine holds of this rank's and of the rank it keeps a copy for.
  // Its own copies are read whole and checked (the newest kept for fetch()); the copies it
  // holds for another only where one is asked for (fetch()).
  cached_ = {};
  cached_step_ = -1;
  auto usable = [this](const char* kind, int rank, bool whole) {
    Found2 found;
    for (int64_t step : steps_of(kind, rank)) {
      const std::string p = path(kind, rank, step);
      Copy c = read_copy(p, whole);
      if (c.why.empty())
        found.emplace_back(step, c.header.layout);
      else
        std::printf("memory checkpoint: passing over %s: %s\n", p.c_str(), c.why.c_str());
      if (c.why.empty() && whole && !cached_.ok()) {
        cached_step_ = step;
        cached_ = std::move(c.payload);
      }
      if (found.size() == 2) break;
    }
    found.resize(2, {-1, 0});
    return found;
  };
  const Found2 own = usable("own", rank_, true);
  const Found2 held = group_.size() > 1 ? usable("held", held_for_, false) : Found2(2, {-1, 0});
  std::vector<int64_t> mine{int64_t(layout)};
  for (const Found2* f : {&own, &held})
    for (auto [s, l] : *f) mine.insert(mine.end(), {s, int64_t(l)});
  constexpr int64_t kWords = 9;
  Tensor all = Tensor::empty({kWords * group_.size()}, DType::I64);
  group_.all_gather(from_vector(mine, {kWords}), all)->wait();
  const std::vector<int64_t> w = to_vector_i64(all);
  auto at = [&](int r, int k) { return w[size_t(r * kWords + k)]; };
  // has(r, 1) is rank r's own copies, has(r, 5) the copies rank r holds for another.
  auto has = [&](int r, int first, int64_t step, int64_t lay) {
    for (int k = first; k < first + 4; k += 2)
      if (at(r, k) == step && at(r, k + 1) == lay) return true;
    return false;
  };
  std::set<int64_t> steps;
  for (int r = 0; r < group_.size(); ++r)
    for (int k : {1, 3, 5, 7})
      if (at(r, k) >= not_before && at(r, k) >= 0) steps.insert(at(r, k));
  Found f;
  if (steps.empty()) {
    f.why_not = "no copy of a step from " + std::to_string(not_before) + " on is in memory";
    return f;
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    std::vector<int> from_buddy;
    int missing = -1;
    for (int q = 0; q < group_.size() && missing < 0; ++q) {
      if (has(q, 1, *it, at(q, 0))) continue;
      if (group_.size() > 1 && has(buddies_[size_t(q)], 5, *it, at(q, 0)))
        from_buddy.push_back(q);
      else
        missing = q;
    }
    if (missing < 0) {
      f.step = *it;
      f.from_buddy = from_buddy;
      return f;
    }
    if (f.why_not.empty())
      f.why_not = "rank " + std::to_string(missing) + " has no copy of step " +
                  std::to_string(*it) + " for its layout, nor has its buddy rank " +
                  std::to_string(buddies_[size_t(missing)]);
  }
  return f;
}

PeerStore::Payload PeerStore::fetch(const Found& found) {
  LOOM_CHECK(found.step >= 0) << "memory checkpoint: nothing to fetch";
  auto needs = [&](int r) {
    return std::find(found.from_buddy.begin(), found.from_buddy.end(), r) != found.from_buddy.end();
  };
  // The rank this one keeps a copy for gets it first (sent while this rank's own arrives); a
  // copy that fails its checks is sent as a header of step -1 and no bytes.
  dist::WorkPtr sent_header, sent_payload;
  Tensor their_header, their_payload;
  if (group_.size() > 1 && needs(held_for_)) {
    const std::string p = path("held", held_for_, found.step);
    Copy theirs = read_copy(p, true);
    if (!theirs.why.empty()) {
      std::printf("memory checkpoint: %s: %s\n", p.c_str(), theirs.why.c_str());
      theirs.header.step = -1;
    }
    their_header = bytes_of(theirs.header);
    sent_header = group_.send(their_header, held_for_, kTagHeader);
    if (theirs.why.empty()) {
      their_payload = tensor_of(theirs.payload);
      sent_payload = group_.send(their_payload, held_for_, kTagPayload);
    }
  }
  Payload payload;
  if (needs(rank_)) {
    const Tensor header_bytes = bytes_of(Header{});
    group_.recv(header_bytes, buddy(), kTagHeader)->wait();
    Header h;
    std::memcpy(&h, header_bytes.data_ptr(), sizeof h);
    if (h.step == found.step) {
      const Tensor received = payload_tensor(h.payload_bytes);
      group_.recv(received, buddy(), kTagPayload)->wait();
      if (xxh64(received.data_ptr(), received.nbytes()) == h.payload_xxh64)
        payload = {static_cast<const char*>(received.data_ptr()), size_t(received.nbytes()),
                   std::make_shared<Tensor>(received)};
      else
        std::printf("memory checkpoint: rank %d's copy of step %lld arrived damaged\n", buddy(),
                    (long long)found.step);
    }
  } else if (cached_step_ == found.step) {
    payload = std::exchange(cached_, {});
  } else {
    payload = read_copy(path("own", rank_, found.step), true).payload;
  }
  if (sent_header) sent_header->wait();
  if (sent_payload) sent_payload->wait();
  cached_ = {};
  return payload;
}

void PeerStore::forget() {
  remove_temps();
  for (int64_t s : steps_of("own", rank_)) fs::remove(path("own", rank_, s));
  if (group_.size() > 1)
    for (int64_t s : steps_of("held", held_for_)) fs::remove(path("held", held_for_, s));
  std::error_code ec;  // the machine's and the run's directories, once empty
  fs::remove(dir_, ec);
  fs::remove(fs::path(dir_).parent_path(), ec);
}

}  // namespace loom
