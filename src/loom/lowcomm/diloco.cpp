#include "loom/lowcomm/diloco.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/trace.h"

namespace loom::lowcomm {

namespace {

Tensor flat_zeros(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::F32, cpu_device(), MemCategory::OptimizerState);
  std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

// Calls f(piece value's data, its offset in the flat buffers, its length) for every piece.
template <typename F>
void for_each_piece(const parallel::ParallelModel& model, F f) {
  int64_t at = 0;
  for (const auto& p : model.pieces()) {
    f(p.value.data<float>(), at, p.value.numel());
    at += p.value.numel();
  }
}

}  // namespace

DiLoCo::DiLoCo(parallel::ParallelModel& model, std::shared_ptr<dist::ProcessGroup> workers,
               const DiLoCoConfig& config)
    : model_(model), workers_(std::move(workers)), config_(config) {
  LOOM_CHECK(workers_->size() == config_.workers)
      << "diloco: " << config_.workers << " workers configured, the mesh has " << workers_->size();
  LOOM_CHECK(config_.inner_steps > 0 && config_.outer_lr > 0 && config_.outer_momentum >= 0 &&
             config_.outer_momentum < 1)
      << "diloco: inner_steps and outer_lr must be positive, outer_momentum in [0, 1)";
  for (const auto& p : model_.pieces()) {
    LOOM_CHECK(p.value.dtype() == DType::F32 && p.value.is_contiguous())
        << "diloco: piece " << p.name << " is not contiguous f32";
    numel_ += p.value.numel();
  }
  global_ = flat_zeros(numel_);
  momentum_ = flat_zeros(numel_);
  float* g = global_.data<float>();
  for_each_piece(model_, [&](float* v, int64_t at, int64_t n) {
    std::memcpy(g + at, v, size_t(n) * sizeof(float));
  });
  // Every worker starts from worker 0's weights (they are built alike from run.seed; this
  // makes it so whatever happened before).
  workers_->broadcast(global_, 0)->wait();
  for_each_piece(model_, [&](float* v, int64_t at, int64_t n) {
    std::memcpy(v, g + at, size_t(n) * sizeof(float));
  });
  model_.after_optimizer_step();
  if (config_.quant.kind != Compression::None && config_.error_feedback) {
    error_ = flat_zeros(numel_);
    owner_error_ = flat_zeros(numel_);
  }
}

OuterStep DiLoCo::sync() {
  trace::Scope scope("diloco_outer_step", "communication");
  const auto start = std::chrono::steady_clock::now();
  const int64_t sent_before = workers_->bytes_sent();
  // The pseudo-gradient: how far this worker moved the global weights, backwards.
  std::vector<float> delta(static_cast<size_t>(numel_));
  const float* g = global_.data<float>();
  for_each_piece(model_, [&](const float* v, int64_t at, int64_t n) {
    for (int64_t i = 0; i < n; ++i) delta[size_t(at + i)] = g[at + i] - v[i];
  });
  if (config_.quant.kind == Compression::None) {
    average(delta);
  } else {
    compressed_average(delta);
  }
  // SGD with (Nesterov) momentum on the averaged pseudo-gradient, as torch.optim.SGD does it.
  OuterStep out;
  float* gw = global_.data<float>();
  float* m = momentum_.data<float>();
  const float mu = float(config_.outer_momentum), lr = float(config_.outer_lr);
  double sq = 0;
  for (int64_t i = 0; i < numel_; ++i) {
    const float d = delta[size_t(i)];
    sq += double(d) * double(d);
    m[i] = mu * m[i] + d;
    gw[i] -= lr * (config_.nesterov ? d + mu * m[i] : m[i]);
  }
  for_each_piece(model_, [&](float* v, int64_t at, int64_t n) {
    std::memcpy(v, gw + at, size_t(n) * sizeof(float));
  });
  model_.after_optimizer_step();  // ZeRO-3's full parameters follow the pieces
  out.delta_norm = std::sqrt(sq);
  out.bytes_sent = workers_->bytes_sent() - sent_before;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void DiLoCo::average(std::vector<float>& delta) {
  Tensor t = Tensor::empty({numel_}, DType::F32, cpu_device(), MemCategory::Communication);
  std::memcpy(t.data_ptr(), delta.data(), t.nbytes());
  workers_->all_reduce(t, dist::ReduceOp::Avg)->wait();
  std::memcpy(delta.data(), t.data_ptr(), t.nbytes());
}

void DiLoCo::compressed_average(std::vector<float>& delta) {
  const QuantConfig& q = config_.quant;
  const int M = workers_->size(), me = workers_->rank();
  // Member j owns the blocks [nb j / M, nb (j + 1) / M): its elements [lo[j], lo[j + 1]).
  const int64_t nb = (numel_ + q.block - 1) / q.block;
  std::vector<int64_t> lo(size_t(M) + 1);
  for (int j = 0; j <= M; ++j) lo[size_t(j)] = std::min(numel_, nb * j / M * q.block);
  int64_t E = 0;  // the bytes of the largest share: every share travels padded to it
  for (int j = 0; j < M; ++j) E = std::max(E, encoded_bytes(q, lo[size_t(j) + 1] - lo[size_t(j)]));
  E = std::max<int64_t>(E, 1);
  auto u8 = [](int64_t n) {
    Tensor t = Tensor::empty({n}, DType::U8, cpu_device(), MemCategory::Communication);
    std::memset(t.data_ptr(), 0, t.nbytes());
    return t;
  };
  const bool feedback = config_.error_feedback;
  float* err = feedback ? error_.data<float>() : nullptr;
  float* owner_err = feedback ? owner_error_.data<float>() : nullptr;
  std::vector<float> decoded(static_cast<size_t>(numel_));

  // Phase 1: each share of this worker's pseudo-gradient to its owner.
  if (feedback)
    for (int64_t i = 0; i < numel_; ++i) delta[size_t(i)] += err[i];
  Tensor send = u8(int64_t(M) * E), recv = u8(int64_t(M) * E);
  uint8_t* s = send.data<uint8_t>();
  for (int j = 0; j < M; ++j) {
    const int64_t a = lo[size_t(j)], n = lo[size_t(j) + 1] - a;
    encode(q, delta.data() + a, n, s + j * E);
    if (feedback) decode(q, s + j * E, n, decoded.data() + a);
  }
  if (feedback)
    for (int64_t i = 0; i < numel_; ++i) err[i] = delta[size_t(i)] - decoded[size_t(i)];
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
  Tensor mine = u8(E), all = u8(int64_t(M) * E);
  encode(q, share.data(), n, mine.data<uint8_t>());
  if (feedback) {
    decode(q, mine.data<uint8_t>(), n, one.data());
    for (int64_t i = 0; i < n; ++i) owner_err[a + i] = share[size_t(i)] - one[size_t(i)];
  }
  workers_->all_gather(mine, all)->wait();
  for (int j = 0; j < M; ++j)
    decode(q, all.data<uint8_t>() + j * E, lo[size_t(j) + 1] - lo[size_t(j)],
           delta.data() + lo[size_t(j)]);
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
  return {{"diloco_global", views_of(global_)}, {"diloco_momentum", views_of(momentum_)}};
}

std::vector<DiLoCo::PieceState> DiLoCo::worker_state() const {
  if (!error_.defined()) return {};
  return {{"diloco_error", views_of(error_)}, {"diloco_owner_error", views_of(owner_error_)}};
}

}  // namespace loom::lowcomm
