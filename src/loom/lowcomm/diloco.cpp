#include "loom/lowcomm/diloco.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "loom/autograd/node.h"
#include "loom/core/error.h"
#include "loom/core/trace.h"
#include "loom/ops/ops.h"

namespace loom::lowcomm {

namespace {

Tensor flat_zeros(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::F32, cpu_device(), MemCategory::OptimizerState);
  std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// n zero bytes to send or receive compressed codes in.
Tensor wire_bytes(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::U8, cpu_device(), MemCategory::Communication);
  std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

}  // namespace

DiLoCo::DiLoCo(parallel::ParallelModel& model, std::shared_ptr<dist::ProcessGroup> workers,
               const DiLoCoConfig& config)
    : model_(model), workers_(std::move(workers)), config_(config) {
  const DiLoCoConfig& c = config_;
  LOOM_CHECK(workers_->size() == c.workers)
      << "diloco: " << c.workers << " workers configured, the mesh has " << workers_->size();
  LOOM_CHECK(c.inner_steps > 0 && c.outer_lr > 0 && c.outer_momentum >= 0 && c.outer_momentum < 1 &&
             c.fragments >= 1 && c.inner_steps % c.fragments == 0 && c.overlap_steps >= 0 &&
             c.overlap_steps < c.inner_steps / c.fragments && c.mixing >= 0 && c.mixing < 1)
      << "diloco: inner_steps and outer_lr must be positive, outer_momentum and mixing in [0, 1), "
      << "inner_steps a multiple of fragments, 0 <= overlap_steps < inner_steps / fragments";
  for (const auto& p : model_.pieces()) {
    LOOM_CHECK(p.value.dtype() == DType::F32 && p.value.is_contiguous())
        << "diloco: piece " << p.name << " is not contiguous f32";
    numel_ += p.value.numel();
  }
  // Fragments: runs of whole pieces of about numel / F elements each, in the model's order.
  const int64_t F = c.fragments;
  int64_t at = 0;
  size_t k = 0;
  const auto& pieces = model_.pieces();
  for (int64_t f = 0; f < F; ++f) {
    Fragment fr{at, at, f * (c.inner_steps / F)};
    while (k < pieces.size() && (f == F - 1 || fr.end < numel_ * (f + 1) / F))
      fr.end += pieces[k++].value.numel();
    at = fr.end;
    fragments_.push_back(fr);
  }
  global_ = flat_zeros(numel_);
  momentum_ = flat_zeros(numel_);
  result_ = flat_zeros(numel_);
  copy_pieces(/*to_pieces=*/false, global_, 0, numel_);
  // Every worker starts from worker 0's weights (they are built alike from run.seed; this
  // makes it so whatever happened before).
  workers_->broadcast(global_, 0)->wait();
  copy_pieces(/*to_pieces=*/true, global_, 0, numel_);
  model_.sync_parameters();
  if (c.quant.kind != Compression::None && c.error_feedback) {
    error_ = flat_zeros(numel_);
    owner_error_ = flat_zeros(numel_);
  }
}

DiLoCo::~DiLoCo() {
  if (thread_.joinable()) thread_.join();
}

// Copies the flat range [begin, end) between `flat` (host memory) and the pieces' values,
// wherever they live: on a GPU this is the outer step's one transfer each way.
void DiLoCo::copy_pieces(bool to_pieces, const Tensor& flat, int64_t begin, int64_t end) {
  NoGradGuard no_grad;
  int64_t at = 0;
  for (const auto& p : model_.pieces()) {
    const int64_t n = p.value.numel(), lo = std::max(begin, at), hi = std::min(end, at + n);
    if (lo < hi) {
      const Tensor piece = narrow(reshape(p.value, {n}), 0, lo - at, hi - lo);
      const Tensor part = narrow(flat, 0, lo, hi - lo);
      if (to_pieces) {
        copy_(piece, part);
      } else {
        copy_(part, piece);
      }
    }
    at += n;
  }
}

std::optional<OuterStep> DiLoCo::after_step(int64_t step, bool last) {
  const DiLoCoConfig& c = config_;
  std::optional<OuterStep> out;
  std::vector<bool> current(fragments_.size(), false);  // on the global weights after this step
  auto add = [&](int f, bool replaced, const OuterStep& s) {
    if (!out) out = OuterStep{};
    out->bytes_sent += s.bytes_sent;
    out->seconds += s.seconds;
    out->delta_norm = std::hypot(out->delta_norm, s.delta_norm);
    out->fragments += 1;
    current[size_t(f)] = replaced || c.mixing == 0;
  };
  if (in_flight_ >= 0 && step == started_at_ + c.overlap_steps) {
    const int f = in_flight_;
    add(f, false, apply(f, false));
  }
  for (size_t f = 0; f < fragments_.size(); ++f)
    if ((step + 1) % c.inner_steps == fragments_[f].offset) {
      start(int(f), step);
      if (c.overlap_steps == 0) add(int(f), false, apply(int(f), false));
    }
  if (last) {  // the run ends: every worker on the global weights, every fragment up to date
    if (in_flight_ >= 0) {
      const int f = in_flight_;
      add(f, true, apply(f, true));
    }
    for (size_t f = 0; f < fragments_.size(); ++f)
      if (!current[f]) {
        start(int(f), step);
        add(int(f), true, apply(int(f), true));
      }
  }
  return out;
}

void DiLoCo::start(int f, int64_t step) {
  LOOM_CHECK(in_flight_ < 0) << "diloco: fragment " << f << " starts while fragment " << in_flight_
                             << " is on the wire";
  // The pseudo-gradient: how far this worker moved the global weights, backwards.
  const Fragment& fr = fragments_[size_t(f)];
  copy_pieces(/*to_pieces=*/false, result_, fr.begin, fr.end);
  float* r = result_.data<float>();
  const float* g = global_.data<float>();
  for (int64_t i = fr.begin; i < fr.end; ++i) r[i] = g[i] - r[i];
  in_flight_ = f;
  started_at_ = step;
  thread_ = std::thread([this, f] {
    try {
      exchange(f);
    } catch (...) {
      failed_ = std::current_exception();
    }
  });
}

void DiLoCo::exchange(int f) {
  trace::name_this_thread("diloco");
  trace::Scope scope("diloco_exchange", "communication");
  const Fragment& fr = fragments_[size_t(f)];
  const int64_t before = workers_->bytes_sent();
  float* r = result_.data<float>() + fr.begin;
  if (config_.quant.kind == Compression::None) {
    average(r, fr.end - fr.begin);
  } else {
    compressed_average(r, fr.begin, fr.end - fr.begin);
  }
  sent_ = workers_->bytes_sent() - before;
}

void DiLoCo::settle(bool drop) {
  if (thread_.joinable()) thread_.join();
  if (failed_) std::rethrow_exception(std::exchange(failed_, nullptr));
  if (drop) in_flight_ = -1;
}

OuterStep DiLoCo::apply(int f, bool replace) {
  trace::Scope scope("diloco_outer_step", "communication");
  const auto start = std::chrono::steady_clock::now();
  settle(false);
  const Fragment& fr = fragments_[size_t(f)];
  // SGD with (Nesterov) momentum on the averaged pseudo-gradient, as torch.optim.SGD does it.
  const float* d = result_.data<float>();
  float* g = global_.data<float>();
  float* m = momentum_.data<float>();
  const float mu = float(config_.outer_momentum), lr = float(config_.outer_lr);
  double sq = 0;
  for (int64_t i = fr.begin; i < fr.end; ++i) {
    sq += double(d[i]) * double(d[i]);
    m[i] = mu * m[i] + d[i];
    g[i] -= lr * (config_.nesterov ? d[i] + mu * m[i] : m[i]);
  }
  // The worker continues from the global weights, or (a late update, with mixing) from a blend
  // of them and where it has got to meanwhile.
  const float alpha = replace ? 0.0f : float(config_.mixing);
  if (alpha == 0) {
    copy_pieces(/*to_pieces=*/true, global_, fr.begin, fr.end);
  } else {
    float* r = result_.data<float>();  // its average is applied: reused for the local weights
    copy_pieces(/*to_pieces=*/false, result_, fr.begin, fr.end);
    for (int64_t i = fr.begin; i < fr.end; ++i) r[i] = alpha * r[i] + (1 - alpha) * g[i];
    copy_pieces(/*to_pieces=*/true, result_, fr.begin, fr.end);
  }
  model_.sync_parameters();  // ZeRO-3's full parameters follow the pieces
  in_flight_ = -1;
  OuterStep out;
  out.delta_norm = std::sqrt(sq);
  out.bytes_sent = sent_;
  out.seconds = seconds_since(start);
  return out;
}

void DiLoCo::average(float* delta, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::F32, cpu_device(), MemCategory::Communication);
  std::memcpy(t.data_ptr(), delta, t.nbytes());
  workers_->all_reduce(t, dist::ReduceOp::Avg)->wait();
  std::memcpy(delta, t.data_ptr(), t.nbytes());
}

void DiLoCo::compressed_average(float* delta, int64_t begin, int64_t numel) {
  const QuantConfig& q = config_.quant;
  const int M = workers_->size(), me = workers_->rank();
  if (M == 2) return gathered_average(delta, begin, numel);
  // Member j owns the blocks [nb j / M, nb (j + 1) / M): its elements [lo[j], lo[j + 1]).
  const int64_t nb = (numel + q.block - 1) / q.block;
  std::vector<int64_t> lo(size_t(M) + 1);
  for (int j = 0; j <= M; ++j) lo[size_t(j)] = std::min(numel, nb * j / M * q.block);
  int64_t E = 0;  // the bytes of the largest share: every share travels padded to it
  for (int j = 0; j < M; ++j) E = std::max(E, encoded_bytes(q, lo[size_t(j) + 1] - lo[size_t(j)]));
  E = std::max<int64_t>(E, 1);
  const bool feedback = config_.error_feedback;
  float* err = feedback ? error_.data<float>() + begin : nullptr;
  float* owner_err = feedback ? owner_error_.data<float>() + begin : nullptr;
  std::vector<float> decoded(static_cast<size_t>(numel));

  // Phase 1: each share of this worker's pseudo-gradient to its owner.
  if (feedback)
    for (int64_t i = 0; i < numel; ++i) delta[i] += err[i];
  Tensor send = wire_bytes(int64_t(M) * E), recv = wire_bytes(int64_t(M) * E);
  uint8_t* s = send.data<uint8_t>();
  for (int j = 0; j < M; ++j) {
    const int64_t a = lo[size_t(j)], n = lo[size_t(j) + 1] - a;
    encode(q, delta + a, n, s + j * E);
    if (feedback) decode(q, s + j * E, n, decoded.data() + a);
  }
  if (feedback)
    for (int64_t i = 0; i < numel; ++i) err[i] = delta[i] - decoded[size_t(i)];
  workers_->all_to_all(send, recv)->wait();

  // The owner averages its share over the workers (in worker order: the same sum everywhere).
  const int64_t a = lo[size_t(me)], n = lo[size_t(me) + 1] - a;
  std::vector<float> share(static_cast<size_t>(n), 0.0f), one(static_cast<size_t>(n));
  for (int r = 0; r < M; ++r) {
    decode(q, recv.data<uint8_t>() + r * E, n, one.data());
    for (int64_t i = 0; i < n; ++i) share[size_t(i)] += one[size_t(i)];
  }
  for (int64_t i = 0; i < n; ++i) {
    share[size_t(i)] /= float(M);
    if (feedback) share[size_t(i)] += owner_err[a + i];
  }
  // Phase 2: the compressed average of every share to every worker.
  Tensor mine = wire_bytes(E), all = wire_bytes(int64_t(M) * E);
  encode(q, share.data(), n, mine.data<uint8_t>());
  if (feedback) {
    decode(q, mine.data<uint8_t>(), n, one.data());
    for (int64_t i = 0; i < n; ++i) owner_err[a + i] = share[size_t(i)] - one[size_t(i)];
  }
  workers_->all_gather(mine, all)->wait();
  for (int j = 0; j < M; ++j)
    decode(q, all.data<uint8_t>() + j * E, lo[size_t(j) + 1] - lo[size_t(j)],
           delta + lo[size_t(j)]);
}

void DiLoCo::gathered_average(float* delta, int64_t begin, int64_t numel) {
  const QuantConfig& q = config_.quant;
  const int M = workers_->size();
  const int64_t E = std::max<int64_t>(encoded_bytes(q, numel), 1);
  float* err = config_.error_feedback ? error_.data<float>() + begin : nullptr;
  std::vector<float> one(static_cast<size_t>(numel)), sum(static_cast<size_t>(numel), 0.0f);
  if (err)
    for (int64_t i = 0; i < numel; ++i) delta[i] += err[i];
  Tensor mine = wire_bytes(E), all = wire_bytes(int64_t(M) * E);
  encode(q, delta, numel, mine.data<uint8_t>());
  if (err) {
    decode(q, mine.data<uint8_t>(), numel, one.data());
    for (int64_t i = 0; i < numel; ++i) err[i] = delta[i] - one[size_t(i)];
  }
  workers_->all_gather(mine, all)->wait();
  for (int r = 0; r < M; ++r) {  // in worker order: the same sum on every worker
    decode(q, all.data<uint8_t>() + r * E, numel, one.data());
    for (int64_t i = 0; i < numel; ++i) sum[size_t(i)] += one[size_t(i)];
  }
  for (int64_t i = 0; i < numel; ++i) delta[i] = sum[size_t(i)] / float(M);
}

std::vector<Tensor> DiLoCo::views_of(const Tensor& flat) const {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const auto& p : model_.pieces()) {
    const Shape& shape = p.value.shape();
    out.push_back(flat.as_strided(shape, contiguous_strides(shape), at));
    at += p.value.numel();
  }
  return out;
}

std::vector<DiLoCo::PieceState> DiLoCo::shared_state() const {
  return {{"diloco_global", views_of(global_)},
          {"diloco_momentum", views_of(momentum_)},
          {"diloco_average", views_of(result_)}};
}

std::vector<DiLoCo::PieceState> DiLoCo::worker_state() const {
  if (!error_.defined()) return {};
  return {{"diloco_error", views_of(error_)}, {"diloco_owner_error", views_of(owner_error_)}};
}

Json DiLoCo::state() const {
  return Json::object(
      {{"diloco_in_flight", int64_t(in_flight_)}, {"diloco_started_at", started_at_}});
}

void DiLoCo::resume(const Json& s) {
  in_flight_ = int(s.at("diloco_in_flight").as_int());
  started_at_ = s.at("diloco_started_at").as_int();
}

}  // namespace loom::lowcomm
