#include "loom/checkpoint/sharded.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/backend/backend.h"
#include "loom/core/atomic_file.h"
#include "loom/core/error.h"
#include "loom/core/json_file.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "loom-sharded-checkpoint";
constexpr int64_t kVersion = 1;

std::string rank_name(int rank, const char* ext) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05d.%s", rank, ext);
  return buf;
}

DType safetensors_dtype(const std::string& name, const std::string& where) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::I32,
                  DType::I64, DType::U8})
    if (name == safetensors_dtype_name(d)) return d;
  LOOM_FAIL() << where << ": unknown dtype " << name;
}

Json shape_json(const Shape& shape) {
  Json a = Json::array();
  for (int64_t s : shape) a.push_back(s);
  return a;
}

Shape shape_of(const Json& j) {
  Shape s;
  for (const Json& e : j.as_array()) s.push_back(e.as_int());
  return s;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in) << "cannot open " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void write_rank_shard(const std::string& dir, int rank, const std::vector<TensorPiece>& pieces) {
  const std::string file = rank_name(rank, "safetensors");
  std::vector<std::pair<std::string, Tensor>> entries;
  Json index = Json::array();
  for (const auto& p : pieces) {
    LOOM_CHECK(p.data.is_contiguous() && p.data.numel() == p.end - p.begin && p.begin >= 0 &&
               p.end <= shape_numel(p.shape))
        << "checkpoint: piece [" << p.begin << ", " << p.end << ") of " << p.name << " " << p.shape
        << " holds " << p.data.numel() << " elements";
    if (p.end == p.begin) continue;
    const std::string key = p.name + ":" + std::to_string(p.begin);
    entries.emplace_back(key, p.data.as_strided({p.end - p.begin}, {1}, p.data.offset()));
    index.push_back(Json::object({{"name", p.name},
                                  {"dtype", safetensors_dtype_name(p.data.dtype())},
                                  {"shape", shape_json(p.shape)},
                                  {"file", file},
                                  {"key", key},
                                  {"begin", p.begin},
                                  {"end", p.end},
                                  {"xxh64", xxh64_hex(p.data.data_ptr(), p.data.nbytes())}}));
  }
  save_safetensors((fs::path(dir) / file).string(), entries);
  write_json_file((fs::path(dir) / rank_name(rank, "json")).string(), index, -1);
}

void write_manifest(const std::string& dir, int world_size,
                    const std::map<std::string, std::string>& files) {
  Json tensors = Json::object();
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> ranges;
  for (int r = 0; r < world_size; ++r) {
    const std::string index_path = (fs::path(dir) / rank_name(r, "json")).string();
    const Json index = read_json_file(index_path);
    for (const Json& e : index.as_array()) {
      const std::string& name = e.at("name").as_string();
      if (!tensors.contains(name))
        tensors.set(name, Json::object({{"dtype", e.at("dtype")},
                                        {"shape", e.at("shape")},
                                        {"pieces", Json::array()}}));
      Json& t = tensors.at(name);
      LOOM_CHECK(t.at("dtype") == e.at("dtype") && t.at("shape") == e.at("shape"))
          << "checkpoint: ranks disagree on the dtype or shape of " << name;
      t.at("pieces").push_back(Json::object({{"file", e.at("file")},
                                             {"key", e.at("key")},
                                             {"begin", e.at("begin")},
                                             {"end", e.at("end")},
                                             {"xxh64", e.at("xxh64")}}));
      ranges[name].emplace_back(e.at("begin").as_int(), e.at("end").as_int());
    }
  }
  // Every element of every tensor written exactly once.
  for (auto& [name, rs] : ranges) {
    std::sort(rs.begin(), rs.end());
    int64_t at = 0;
    for (auto [b, e] : rs) {
      LOOM_CHECK(b == at) << "checkpoint: the ranks' pieces of " << name
                          << (b < at ? " overlap at element " : " leave out elements from ")
                          << std::min(b, at);
      at = e;
    }
    const int64_t numel = shape_numel(shape_of(tensors.at(name).at("shape")));
    LOOM_CHECK(at == numel) << "checkpoint: the ranks' pieces of " << name << " end at element "
                            << at << " of " << numel;
  }
  Json sums = Json::object();
  for (const auto& [file, text] : files) {
    AtomicFile out((fs::path(dir) / file).string());
    out.write(text);
    out.commit();
    sums.set(file, Json::object({{"xxh64", xxh64_hex(text.data(), text.size())}}));
  }
  // The manifest's own checksum beside it: a damaged or edited manifest is noticed too.
  const std::string manifest = Json::object({{"format", kFormat},
                                             {"version", kVersion},
                                             {"world_size", int64_t(world_size)},
                                             {"files", sums},
                                             {"tensors", tensors}})
                                   .dump(2) +
                               "\n";
  write_file_atomic((fs::path(dir) / "manifest.json").string(), manifest);
  write_file_atomic((fs::path(dir) / "manifest.xxh64").string(),
                    xxh64_hex(manifest.data(), manifest.size()) + "\n");
  for (int r = 0; r < world_size; ++r) fs::remove(fs::path(dir) / rank_name(r, "json"));
}

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)) {
  LOOM_CHECK(fs::is_directory(dir_)) << "checkpoint " << dir_ << " is not a directory";
  const fs::path manifest_path = fs::path(dir_) / "manifest.json";
  if (!fs::exists(manifest_path)) {
    // The older layout: whole tensors in <part>.safetensors, read as single pieces.
    legacy_ = true;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() != ".safetensors") continue;
      const std::string part = e.path().stem().string();
      const std::string file = e.path().filename().string();
      for (const auto& [key, t] : this->file(file, part + "/").tensors)
        tensors_[part + "/" + key] = {t.dtype(), t.shape(), {{file, key, "", 0, t.numel()}}};
    }
    LOOM_CHECK(!tensors_.empty() || fs::exists(fs::path(dir_) / "trainer_state.json"))
        << dir_ << " is not a checkpoint: it has no manifest.json, .safetensors file or "
        << "trainer_state.json (a checkpoint is a step-NNNNNN directory of a run)";
    return;
  }
  const std::string where = manifest_path.string();
  std::ifstream in(where, std::ios::binary);
  LOOM_CHECK(in) << "cannot read " << where;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Checkpoints written before the manifest had its checksum have no manifest.xxh64.
  std::ifstream sum_file(fs::path(dir_) / "manifest.xxh64");
  std::string sum;
  manifest_checksummed_ = bool(sum_file >> sum);
  LOOM_CHECK(!manifest_checksummed_ || sum == xxh64_hex(text.data(), text.size()))
      << "checkpoint " << dir_ << ": manifest.json does not match its checksum (manifest.xxh64): "
      << "the manifest is damaged or was edited";
  const Json m = Json::parse(text, "'" + where + "'");
  LOOM_CHECK(m.at("format").as_string() == kFormat && m.at("version").as_int() == kVersion)
      << where << ": not a " << kFormat << " version " << kVersion << " manifest";
  for (const auto& [file, spec] : m.at("files").items())
    file_sums_[file] = spec.at("xxh64").as_string();
  for (const auto& [name, spec] : m.at("tensors").items()) {
    Entry entry{safetensors_dtype(spec.at("dtype").as_string(), where + ", tensor " + name),
                shape_of(spec.at("shape")),
                {}};
    for (const Json& p : spec.at("pieces").as_array())
      entry.pieces.push_back({p.at("file").as_string(), p.at("key").as_string(),
                              p.at("xxh64").as_string(), p.at("begin").as_int(),
                              p.at("end").as_int()});
    std::sort(entry.pieces.begin(), entry.pieces.end(),
              [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const auto& p : entry.pieces) {
      LOOM_CHECK(p.begin == at && p.end > p.begin)
          << where << ": the pieces of " << name << " do not tile it (element " << at
          << " is followed by a piece [" << p.begin << ", " << p.end << "))";
      at = p.end;
    }
    LOOM_CHECK(at == shape_numel(entry.shape))
        << where << ": the pieces of " << name << " cover " << at << " of its "
        << shape_numel(entry.shape) << " elements " << entry.shape;
    tensors_[name] = std::move(entry);
  }
}

CheckpointReader::~CheckpointReader() = default;

const SafetensorsFile& CheckpointReader::file(const std::string& name,
                                              const std::string& tensor) const {
  auto it = loaded_.find(name);
  if (it != loaded_.end()) return *it->second;
  const fs::path path = fs::path(dir_) / name;
  LOOM_CHECK(fs::exists(path)) << "checkpoint " << dir_ << ": file " << name << " (holding "
                               << tensor << ") is missing";
  auto loaded = std::make_unique<SafetensorsFile>(load_safetensors(path.string()));
  return *(loaded_[name] = std::move(loaded));
}

bool CheckpointReader::contains(const std::string& name) const {
  return tensors_.count(name) > 0;
}

Shape CheckpointReader::shape(const std::string& name) const {
  auto it = tensors_.find(name);
  LOOM_CHECK(it != tensors_.end()) << "checkpoint " << dir_ << " has no tensor " << name;
  return it->second.shape;
}

std::vector<std::string> CheckpointReader::names(const std::string& prefix) const {
  std::vector<std::string> out;
  for (const auto& [name, e] : tensors_)
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  return out;
}

void CheckpointReader::read(const std::string& name, const Shape& shape, int64_t begin, int64_t end,
                            const Tensor& dest) const {
  if (dest.device() != cpu_device()) {  // read on the host, then moved whole
    const Tensor host = Tensor::empty(dest.shape(), dest.dtype(), cpu_device(), MemCategory::Other);
    read(name, shape, begin, end, host);
    backend_for(dest.device()).copy(host, dest);
    return;
  }
  auto it = tensors_.find(name);
  LOOM_CHECK(it != tensors_.end()) << "checkpoint " << dir_ << " has no tensor " << name;
  const Entry& e = it->second;
  LOOM_CHECK(e.shape == shape) << "checkpoint " << dir_ << ": tensor " << name << " has shape "
                               << e.shape << ", expected " << shape
                               << " (a checkpoint of another model or config?)";
  LOOM_CHECK(dest.dtype() == e.dtype && dest.is_contiguous() && dest.numel() == end - begin &&
             begin >= 0 && end <= shape_numel(shape))
      << "checkpoint: cannot read elements [" << begin << ", " << end << ") of " << name << " ("
      << safetensors_dtype_name(e.dtype) << ") into " << dest.numel() << " elements of "
      << safetensors_dtype_name(dest.dtype());
  const size_t elem = dtype_size(e.dtype);
  for (const Piece& p : e.pieces) {
    const int64_t a = std::max(begin, p.begin), b = std::min(end, p.end);
    if (a >= b) continue;
    const SafetensorsFile& f = file(p.file, name);
    LOOM_CHECK(f.contains(p.key)) << "checkpoint " << dir_ << ": " << p.file << " has no entry "
                                  << p.key << " (for " << name << ")";
    const Tensor& t = f.get(p.key);
    LOOM_CHECK(t.dtype() == e.dtype && t.numel() == p.end - p.begin)
        << "checkpoint " << dir_ << ": " << p.file << " holds " << t.numel() << " elements of "
        << safetensors_dtype_name(t.dtype()) << " for " << name << " [" << p.begin << ", " << p.end
        << "), the manifest says " << p.end - p.begin << " of " << safetensors_dtype_name(e.dtype);
    if (!legacy_) {
      bool& ok = verified_[p.file + "|" + p.key];
      if (!ok) {
        const std::string sum = xxh64_hex(t.data_ptr(), t.nbytes());
        LOOM_CHECK(sum == p.xxh64) << "checkpoint " << dir_ << ": checksum mismatch in " << p.file
                                   << " for " << name << " [" << p.begin << ", " << p.end
                                   << "): manifest xxh64 " << p.xxh64 << ", data " << sum;
        ok = true;
      }
    }
    std::memcpy(static_cast<char*>(dest.data_ptr()) + size_t(a - begin) * elem,
                static_cast<const char*>(t.data_ptr()) + size_t(a - p.begin) * elem,
                size_t(b - a) * elem);
  }
}

Tensor CheckpointReader::read_full(const std::string& name) const {
  const Shape s = shape(name);
  Tensor t = Tensor::empty(s, tensors_.at(name).dtype, cpu_device(), MemCategory::Other);
  read(name, s, 0, shape_numel(s), t);
  return t;
}

std::vector<std::pair<std::string, Tensor>> CheckpointReader::read_all(
    const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : names(prefix + "/"))
    out.emplace_back(name.substr(prefix.size() + 1), read_full(name));
  return out;
}

std::string CheckpointReader::read_text(const std::string& file) const {
  const fs::path path = fs::path(dir_) / file;
  LOOM_CHECK(fs::exists(path)) << "checkpoint " << dir_ << ": file " << file << " is missing";
  const std::string text = read_bytes(path.string());
  if (!legacy_) {
    auto it = file_sums_.find(file);
    LOOM_CHECK(it != file_sums_.end())
        << "checkpoint " << dir_ << ": manifest.json does not list " << file;
    const std::string sum = xxh64_hex(text.data(), text.size());
    LOOM_CHECK(sum == it->second) << "checkpoint " << dir_ << ": checksum mismatch in " << file
                                  << ": manifest xxh64 " << it->second << ", data " << sum;
  }
  return text;
}

}  // namespace loom
