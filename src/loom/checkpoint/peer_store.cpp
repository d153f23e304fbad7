#include "loom/checkpoint/peer_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

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

// A copy read whole and checked; `why` says what is wrong with it (then the tensor is empty).
struct Copy {
  Header header{};
  Tensor payload;
  std::string why;
};

Copy read_copy(const std::string& path) {
  Copy c;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    c.why = std::string("cannot open it: ") + std::strerror(errno);
    return c;
  }
  auto read_all = [fd](void* data, size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = ::read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= size_t(r);
    }
    return true;
  };
  const uint64_t file_bytes = uint64_t(fs::file_size(path));
  if (!read_all(&c.header, sizeof c.header) || std::memcmp(c.header.magic, kMagic, 8) != 0) {
    c.why = "it is not a memory checkpoint copy";
  } else if (file_bytes != sizeof(Header) + c.header.payload_bytes) {
    c.why = "it holds " + std::to_string(file_bytes) + " bytes, its header says " +
            std::to_string(sizeof(Header) + c.header.payload_bytes);
  } else {
    c.payload = payload_tensor(c.header.payload_bytes);
    if (!read_all(c.payload.data_ptr(), c.header.payload_bytes))
      c.why = "it cannot be read whole";
    else if (xxh64(c.payload.data_ptr(), c.payload.nbytes()) != c.header.payload_xxh64)
      c.why = "its bytes do not match their checksum";
  }
  ::close(fd);
  if (!c.why.empty()) c.payload = Tensor();
  return c;
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
    r = group_.recv(held, held_for_, kTagPayload);
    s = group_.send(payload, buddy(), kTagPayload);
    r->wait();
    s->wait();
    LOOM_CHECK(xxh64(held.data_ptr(), held.nbytes()) == theirs.payload_xxh64)
        << "memory checkpoint: the copy of rank " << held_for_ << "'s step " << step
        << " arrived damaged";
    write_copy(path("held", held_for_, step), theirs, held);
  }
  write_copy(path("own", rank_, step), mine, payload);
  group_.barrier()->wait();  // every rank holds step: the older copies can go
  for (int64_t s : steps_of("own", rank_))
    if (s != step) fs::remove(path("own", rank_, s));
  if (peers)
    for (int64_t s : steps_of("held", held_for_))
      if (s != step) fs::remove(path("held", held_for_, s));
}

PeerStore::Found PeerStore::find(uint64_t layout, int64_t not_before) {
  // What this machine holds of this rank's and of the rank it keeps a copy for.
  auto usable = [this](const char* kind, int rank) {
    Found2 found;
    for (int64_t step : steps_of(kind, rank)) {
      const std::string p = path(kind, rank, step);
      const Copy c = read_copy(p);
      if (c.why.empty())
        found.emplace_back(step, c.header.layout);
      else
        std::printf("memory checkpoint: passing over %s: %s\n", p.c_str(), c.why.c_str());
      if (found.size() == 2) break;
    }
    found.resize(2, {-1, 0});
    return found;
  };
  const Found2 own = usable("own", rank_);
  const Found2 held = group_.size() > 1 ? usable("held", held_for_) : Found2(2, {-1, 0});
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

Tensor PeerStore::fetch(const Found& found) {
  LOOM_CHECK(found.step >= 0) << "memory checkpoint: nothing to fetch";
  auto needs = [&](int r) {
    return std::find(found.from_buddy.begin(), found.from_buddy.end(), r) != found.from_buddy.end();
  };
  auto read = [&](const char* kind, int rank) {
    Copy c = read_copy(path(kind, rank, found.step));
    LOOM_CHECK(c.why.empty()) << "memory checkpoint: " << path(kind, rank, found.step) << ": "
                              << c.why;
    return c;
  };
  // The rank this one keeps a copy for gets it first (sent while this rank's own arrives).
  dist::WorkPtr sent_header, sent_payload;
  Copy theirs;
  Tensor their_header;
  if (group_.size() > 1 && needs(held_for_)) {
    theirs = read("held", held_for_);
    their_header = bytes_of(theirs.header);
    sent_header = group_.send(their_header, held_for_, kTagHeader);
    sent_payload = group_.send(theirs.payload, held_for_, kTagPayload);
  }
  Tensor payload;
  if (needs(rank_)) {
    const Tensor header_bytes = bytes_of(Header{});
    group_.recv(header_bytes, buddy(), kTagHeader)->wait();
    Header h;
    std::memcpy(&h, header_bytes.data_ptr(), sizeof h);
    payload = payload_tensor(h.payload_bytes);
    group_.recv(payload, buddy(), kTagPayload)->wait();
    LOOM_CHECK(xxh64(payload.data_ptr(), payload.nbytes()) == h.payload_xxh64)
        << "memory checkpoint: the copy of step " << found.step << " from rank " << buddy()
        << " arrived damaged";
  } else {
    payload = read("own", rank_).payload;
  }
  if (sent_header) sent_header->wait();
  if (sent_payload) sent_payload->wait();
  return payload;
}

void PeerStore::forget() {
  for (int64_t s : steps_of("own", rank_)) fs::remove(path("own", rank_, s));
  if (group_.size() > 1)
    for (int64_t s : steps_of("held", held_for_)) fs::remove(path("held", held_for_, s));
  std::error_code ec;  // the machine's and the run's directories, once empty
  fs::remove(dir_, ec);
  fs::remove(fs::path(dir_).parent_path(), ec);
}

}  // namespace loom
