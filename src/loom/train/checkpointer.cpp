#include "loom/train/checkpointer.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "loom/backend/backend.h"
#include "loom/core/hash.h"
#include "loom/dist/hosts.h"
#include "loom/ops/creation.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/recipe.h"

namespace loom::train {

Checkpointer::Checkpointer(const dist::DeviceMesh& mesh, parallel::ParallelModel& model,
                           optim::AdamW& optimizer, std::function<std::vector<PieceState>()> extra,
                           std::string model_kind, std::string run_dir, bool async, int64_t keep,
                           WorkerLayout layout)
    : model_(model),
      optimizer_(optimizer),
      extra_(std::move(extra)),
      model_kind_(std::move(model_kind)),
      run_dir_(std::move(run_dir)),
      async_(async),
      keep_(keep),
      layout_(std::move(layout)),
      group_(mesh.world()->split(0, mesh.world()->rank(), "checkpoint")) {}

Checkpointer::~Checkpointer() {
  if (saver_.joinable()) saver_.join();
  if (memory_saver_.joinable()) memory_saver_.join();
}

void Checkpointer::wait() {
  if (saver_.joinable()) saver_.join();
  if (save_error_) std::rethrow_exception(std::exchange(save_error_, nullptr));
}

namespace {

// A checkpoint holds whole tensors' element ranges (parallel::PieceSpan): a tensor-parallel
// part is written as the ranges of the whole it covers, so any layout reads any other.
Tensor span_of(const parallel::ParallelModel& model, const PieceValues& contents,
               const parallel::PieceSpan& span) {
  const Tensor& value =
      contents.values.empty() ? model.pieces()[span.piece].value : contents.values.at(span.piece);
  return value.as_strided({span.end - span.begin}, {1}, value.offset() + span.offset);
}

std::string name_of(const parallel::ParallelModel& model, const PieceValues& contents,
                    const parallel::PieceSpan& span) {
  return contents.prefix + model.pieces()[span.piece].name + contents.suffix;
}

}  // namespace

std::vector<PieceValues> Checkpointer::contents(bool saving, int64_t source) const {
  const std::string worker = source > 0 ? "worker" + std::to_string(source) + "/" : "";
  // The model first: a checkpoint of another model fails on its weights' names and shapes.
  std::vector<PieceValues> out{{worker + "model/", "", {}}};
  const auto moments = optimizer_.named_state();  // exp_avg, exp_avg_sq per piece, in order
  std::vector<Tensor> m, v;
  for (size_t k = 0; k < moments.size(); k += 2) {
    m.push_back(moments[k].second);
    v.push_back(moments[k + 1].second);
  }
  out.push_back({worker + "optimizer/", ".exp_avg", m});
  out.push_back({worker + "optimizer/", ".exp_avg_sq", v});
  for (auto& [name, values] : extra_()) out.push_back({worker + name + "/", "", values});
  if (layout_.shared && (!saving || layout_.worker == 0))
    for (auto& [name, values] : layout_.shared()) out.push_back({name + "/", "", values});
  return out;
}

std::string Checkpointer::save(int64_t step, const Json& state) {
  if (layout_.settle) layout_.settle(false);
  // What this rank writes: its share of what the replicas hold alike.
  std::vector<TensorPiece> pieces;
  const std::vector<parallel::PieceSpan> spans = model_.piece_spans(/*share=*/true);
  for (const PieceValues& c : contents(/*saving=*/true, layout_.worker))
    for (const parallel::PieceSpan& span : spans)
      pieces.push_back({name_of(model_, c, span), span.whole_shape, span.begin, span.end,
                        span_of(model_, c, span)});
  wait();
  // The files are written from host memory: an async save's snapshot (which the step may
  // overwrite meanwhile without changing what is written), and any piece on a device.
  for (auto& piece : pieces) {
    if (!async_ && piece.data.device() == cpu_device()) continue;
    Tensor copy = Tensor::empty({piece.end - piece.begin}, piece.data.dtype(), cpu_device(),
                                MemCategory::Other);
    copy_(copy, piece.data);
    piece.data = copy;
  }
  if (!async_) return save_checkpoint(run_dir_, step, *group_, pieces, state, keep_);
  saver_ = std::thread([this, step, pieces = std::move(pieces), state] {
    try {
      save_checkpoint(run_dir_, step, *group_, pieces, state, keep_);
    } catch (...) {
      save_error_ = std::current_exception();
    }
  });
  return checkpoint_dir_name(run_dir_, step);
}

Json Checkpointer::load(const std::string& ckpt_dir) {
  if (layout_.settle) layout_.settle(true);
  const CheckpointReader reader(ckpt_dir);
  Json state = read_trainer_state(reader);
  const std::string kind = state.at("model_kind").as_string();
  LOOM_CHECK(kind == model_kind_) << "checkpoint " << ckpt_dir << " is of model kind " << kind
                                  << ", not " << model_kind_;
  const int64_t workers =
      state.contains("diloco_workers") ? state.at("diloco_workers").as_int() : 0;
  LOOM_CHECK((workers > 0) == (layout_.workers > 0))
      << "checkpoint " << ckpt_dir << " was written by a run with "
      << (workers > 0 ? std::to_string(workers) + " DiLoCo workers" : "no DiLoCo")
      << "; this run has "
      << (layout_.workers > 0 ? std::to_string(layout_.workers) + " DiLoCo workers" : "no DiLoCo")
      << " (lowcomm.workers): a DiLoCo checkpoint has a model per worker, another none";
  // Another worker count: worker m continues the checkpoint's worker m mod its count.
  const int64_t source = workers > 0 ? layout_.worker % workers : 0;
  const std::vector<parallel::PieceSpan> spans = model_.piece_spans(/*share=*/false);
  for (const PieceValues& c : contents(/*saving=*/false, source))
    for (const parallel::PieceSpan& span : spans)
      reader.read(name_of(model_, c, span), span.whole_shape, span.begin, span.end,
                  span_of(model_, c, span));
  model_.sync_parameters();
  optimizer_.set_steps_taken(state.at("optimizer_steps").as_int());
  // In-memory copies newer than this checkpoint belong to a past the run no longer follows.
  if (memory_) {
    wait_memory();
    memory_->forget();
  }
  return state;
}

// ---- In-memory copies ------------------------------------------------------------------------

namespace {

// A test places ranks on hosts of their own on one machine: LOOM_RANKS_PER_HOST=K names the
// host of rank r "<host>-<r / K>" (docs/resilience.md).
std::string memory_host(int rank) {
  const char* k = std::getenv("LOOM_RANKS_PER_HOST");
  if (!k || !*k) return dist::this_host();
  const int per_host = std::atoi(k);
  LOOM_CHECK(per_host > 0) << "LOOM_RANKS_PER_HOST=" << k << ": expected a count > 0";
  return dist::this_host() + "-" + std::to_string(rank / per_host);
}

void copy_bytes(const Tensor& from, void* to) {
  const Tensor host = from.device() == cpu_device() ? from : to_device(from, cpu_device());
  std::memcpy(to, host.data_ptr(), host.nbytes());
}

}  // namespace

void Checkpointer::keep_in_memory(const std::string& root, const std::string& run_id) {
  dist::ProcessGroup& world = *group_;
  memory_group_ = world.split(0, world.rank(), "memory_checkpoint");
  memory_ =
      std::make_unique<PeerStore>(root, run_id, *memory_group_, memory_host(memory_group_->rank()));
}

std::vector<std::pair<std::string, Tensor>> Checkpointer::held_pieces() const {
  std::vector<std::pair<std::string, Tensor>> out;
  const std::vector<parallel::PieceSpan> spans = model_.piece_spans(/*share=*/false);
  for (const PieceValues& c : contents(/*saving=*/false, layout_.worker))
    for (const parallel::PieceSpan& span : spans)
      out.emplace_back(name_of(model_, c, span) + ":" + std::to_string(span.begin),
                       span_of(model_, c, span));
  return out;
}

uint64_t Checkpointer::memory_layout(
    const std::vector<std::pair<std::string, Tensor>>& pieces) const {
  std::string text =
      std::to_string(memory_group_->size()) + " " + std::to_string(memory_group_->rank());
  for (const auto& [name, t] : pieces)
    text += "\n" + name + " " + std::to_string(t.numel()) + " " + dtype_name(t.dtype());
  return xxh64(text.data(), text.size());
}

void Checkpointer::wait_memory() {
  if (memory_saver_.joinable()) memory_saver_.join();
  if (memory_error_) std::rethrow_exception(std::exchange(memory_error_, nullptr));
}

// The payload: trainer_state.json's length (8 bytes) and text, padded to 8 bytes, then every
// piece's bytes in held_pieces() order.
void Checkpointer::save_to_memory(int64_t step, const Json& state) {
  LOOM_CHECK(memory_) << "in-memory checkpoints are off (resilience.memory_checkpoint_every)";
  const auto begin = std::chrono::steady_clock::now();
  if (layout_.settle) layout_.settle(false);
  const auto pieces = held_pieces();
  const std::string text = state.dump();
  const size_t head = 8 + (text.size() + 7) / 8 * 8;
  size_t bytes = head;
  for (const auto& [name, t] : pieces) bytes += t.nbytes();
  wait_memory();  // one copy at a time
  Tensor payload = Tensor::empty({int64_t(bytes)}, DType::U8, cpu_device(), MemCategory::Other);
  char* at = static_cast<char*>(payload.data_ptr());
  const uint64_t length = text.size();
  std::memset(at, 0, head);
  std::memcpy(at, &length, 8);
  std::memcpy(at + 8, text.data(), text.size());
  at += head;
  for (const auto& [name, t] : pieces) {
    copy_bytes(t, at);
    at += t.nbytes();
  }
  const uint64_t layout = memory_layout(pieces);
  memory_saver_ = std::thread([this, step, layout, payload] {
    try {
      memory_->save(step, layout, payload);
    } catch (...) {
      memory_error_ = std::current_exception();
    }
  });
  memory_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ++memory_saves_;
}

Json Checkpointer::load_from_memory(int64_t not_before,
                                    const std::function<std::string(const Json&)>& refuse) {
  LOOM_CHECK(memory_) << "in-memory checkpoints are off (resilience.memory_checkpoint_every)";
  wait_memory();
  if (layout_.settle) layout_.settle(true);
  const auto pieces = held_pieces();
  const PeerStore::Found found = memory_->find(memory_layout(pieces), not_before);
  const bool main = memory_group_->rank() == 0;
  if (found.step < 0) {
    if (main) std::printf("memory checkpoint: none to restore (%s)\n", found.why_not.c_str());
    return Json();
  }
  const PeerStore::Payload payload = memory_->fetch(found);
  // Every rank's copy whole, or the restore falls back to disk on every rank.
  if (sum_over(*memory_group_, {payload.ok() ? 0.0 : 1.0})[0] > 0) {
    if (main)
      std::printf("memory checkpoint: a copy of step %lld failed its checks; none restored\n",
                  (long long)found.step);
    return Json();
  }
  const char* at = payload.data;
  uint64_t length = 0;
  std::memcpy(&length, at, 8);
  const Json state = Json::parse(std::string(at + 8, length), "an in-memory trainer state");
  if (const std::string why = refuse ? refuse(state) : ""; !why.empty()) {
    if (main)
      std::printf("memory checkpoint: step %lld not restored: %s\n", (long long)found.step,
                  why.c_str());
    return Json();
  }
  at += 8 + (length + 7) / 8 * 8;
  for (const auto& [name, t] : pieces) {
    if (t.device() == cpu_device()) {
      std::memcpy(t.data_ptr(), at, t.nbytes());
    } else {
      const Tensor host = Tensor::empty(t.shape(), t.dtype(), cpu_device(), MemCategory::Other);
      std::memcpy(host.data_ptr(), at, t.nbytes());
      backend_for(t.device()).copy(host, t);
    }
    at += t.nbytes();
  }
  LOOM_CHECK(at == payload.data + payload.size)
      << "memory checkpoint: the copy of step " << found.step << " holds more than this rank";
  model_.sync_parameters();
  optimizer_.set_steps_taken(state.at("optimizer_steps").as_int());
  if (main) {
    std::string buddies;
    for (int r : found.from_buddy) buddies += (buddies.empty() ? "" : ", ") + std::to_string(r);
    std::printf("memory checkpoint: restoring step %lld from memory (%s)\n", (long long)found.step,
                buddies.empty() ? "every rank its own copy"
                                : ("ranks " + buddies + " from their buddies' copies").c_str());
  }
  return state;
}

void Checkpointer::forget_memory() {
  if (!memory_) return;
  wait_memory();
  memory_->forget();
}

}  // namespace loom::train
