#include "loom/train/checkpointer.h"

#include <utility>

#include "loom/ops/creation.h"
#include "loom/train/checkpoint_dir.h"

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
  return state;
}

}  // namespace loom::train
