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

Tensor flat_zeros(int64_t n, Device device) {
  Tensor t = Tensor::empty({n}, DType::F32, device, MemCategory::OptimizerState);
  backend_for(device).fill(t, 0.0);
  return t;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// n zero bytes to send or receive compressed codes in.
Tensor wire_buffer(int64_t n, Device device) {
  Tensor t = Tensor::empty({n}, DType::U8, device, MemCategory::Communication);
  backend_for(device).fill(t, 0.0);
  return t;
}

// Elements [begin, begin + n) of a flat buffer (a view).
Tensor seg(const Tensor& flat, int64_t begin, int64_t n) {
  return narrow(flat, 0, begin, n);
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
    if (!c.host_state) device_ = p.value.device();  // the pieces' device
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
  global_ = flat_zeros(numel_, device_);
  momentum_ = flat_zeros(numel_, device_);
  result_ = flat_zeros(numel_, device_);
  copy_pieces(/*to_pieces=*/false, global_, 0, numel_);
  // Every worker starts from worker 0's weights (they are built alike from run.seed; this
  // makes it so whatever happened before).
  workers_->broadcast(global_, 0)->wait();
  copy_pieces(/*to_pieces=*/true, global_, 0, numel_);
  model_.sync_parameters();
  if (c.quant.kind != Compression::None && c.error_feedback) {
    error_ = flat_zeros(numel_, device_);
    owner_error_ = flat_zeros(numel_, device_);
  }
}

DiLoCo::~DiLoCo() {
  if (thread_.joinable()) thread_.join();
}

// Copies the flat range [begin, end) between `flat` and the pieces' values: on a GPU with the
// outer state on the host, this is the outer step's one transfer each way.
void DiLoCo::copy_pieces(bool to_pieces, const Tensor& flat, int64_t begin, int64_t end) {
  NoGradGuard no_grad;
  int64_t at = 0;
  for (const auto& p : model_.pieces()) {
    const int64_t n = p.value.numel(), lo = std::max(begin, at), hi = std::min(end, at + n);
    if (lo < hi) {
      const Tensor piece = narrow(reshape(p.value, {n}), 0, lo - at, hi - lo);
      const Tensor part = seg(flat, lo, hi - lo);
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
  {
    NoGradGuard no_grad;
    const Tensor r = seg(result_, fr.begin, fr.end - fr.begin);
    copy_(r, sub(seg(global_, fr.begin, fr.end - fr.begin), r));
  }
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
  NoGradGuard no_grad;  // (this thread's own)
  const Tensor r = seg(result_, fr.begin, fr.end - fr.begin);
  if (r.numel() > 0 && config_.quant.kind == Compression::None) average(r);
  if (r.numel() > 0 && config_.quant.kind != Compression::None) compressed_average(r, fr.begin);
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
  const int64_t n = fr.end - fr.begin;
  NoGradGuard no_grad;
  // SGD with (Nesterov) momentum on the averaged pseudo-gradient, as torch.optim.SGD does it.
  const Tensor d = seg(result_, fr.begin, n), g = seg(global_, fr.begin, n);
  const Tensor m = seg(momentum_, fr.begin, n);
  const double mu = config_.outer_momentum, lr = config_.outer_lr;
  const double sq = n > 0 ? double(item(sum(mul(d, d)))) : 0.0;
  copy_(m, add(mul_scalar(m, mu), d));
  copy_(g, sub(g, mul_scalar(config_.nesterov ? add(d, mul_scalar(m, mu)) : m, lr)));
  // The worker continues from the global weights, or (a late update, with mixing) from a blend
  // of them and where it has got to meanwhile.
  const double alpha = replace ? 0.0 : config_.mixing;
  if (alpha == 0) {
    copy_pieces(/*to_pieces=*/true, global_, fr.begin, fr.end);
  } else {  // its average is applied: result_ is reused for the local weights
    copy_pieces(/*to_pieces=*/false, result_, fr.begin, fr.end);
    copy_(d, add(mul_scalar(d, alpha), mul_scalar(g, 1 - alpha)));
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

void DiLoCo::average(const Tensor& delta) {
  Tensor t = Tensor::empty(delta.shape(), DType::F32, device_, MemCategory::Communication);
  copy_(t, delta);
  workers_->all_reduce(t, dist::ReduceOp::Avg)->wait();
  copy_(delta, t);
}

void DiLoCo::compressed_average(const Tensor& delta, int64_t begin) {
  const QuantConfig& q = config_.quant;
  const int M = workers_->size(), me = workers_->rank();
  if (M == 2) return gathered_average(delta, begin);
  const int64_t numel = delta.numel();
  // Member j owns the blocks [nb j / M, nb (j + 1) / M): its elements [lo[j], lo[j + 1]).
  const int64_t nb = (numel + q.block - 1) / q.block;
  std::vector<int64_t> lo(size_t(M) + 1);
  for (int j = 0; j <= M; ++j) lo[size_t(j)] = std::min(numel, nb * j / M * q.block);
  int64_t E = 0;  // the bytes of the largest share: every share travels padded to it
  for (int j = 0; j < M; ++j) E = std::max(E, encoded_bytes(q, lo[size_t(j) + 1] - lo[size_t(j)]));
  E = std::max<int64_t>(E, 1);
  const bool feedback = config_.error_feedback;
  const Tensor err = feedback ? seg(error_, begin, numel) : Tensor();
  const Tensor owner_err = feedback ? seg(owner_error_, begin, numel) : Tensor();
  // Share j's codes in a wire buffer of M shares of E bytes.
  auto codes = [&](const Tensor& wire, int j, int64_t n) {
    return seg(wire, int64_t(j) * E, encoded_bytes(q, n));
  };

  // Phase 1: each share of this worker's pseudo-gradient to its owner.
  if (feedback) copy_(delta, add(delta, err));
  const Tensor send = wire_buffer(int64_t(M) * E, device_),
               recv = wire_buffer(int64_t(M) * E, device_);
  const Tensor decoded = Tensor::empty({numel}, DType::F32, device_, MemCategory::Communication);
  for (int j = 0; j < M; ++j) {
    const int64_t a = lo[size_t(j)], n = lo[size_t(j) + 1] - a;
    encode(q, seg(delta, a, n), codes(send, j, n));
    if (feedback) decode(q, codes(send, j, n), seg(decoded, a, n));
  }
  if (feedback) copy_(err, sub(delta, decoded));
  workers_->all_to_all(send, recv)->wait();

  // The owner averages its share over the workers (in worker order: the same sum everywhere).
  const int64_t a = lo[size_t(me)], n = lo[size_t(me) + 1] - a;
  Tensor share = zeros({n}, DType::F32, device_);
  const Tensor one = Tensor::empty({n}, DType::F32, device_, MemCategory::Communication);
  for (int r = 0; r < M; ++r) {
    decode(q, codes(recv, r, n), one);
    share = add(share, one);
  }
  share = mul_scalar(share, 1.0 / M);
  if (feedback) share = add(share, seg(owner_err, a, n));
  // Phase 2: the compressed average of every share to every worker.
  const Tensor mine = wire_buffer(E, device_), all = wire_buffer(int64_t(M) * E, device_);
  encode(q, share, codes(mine, 0, n));
  if (feedback) {
    decode(q, codes(mine, 0, n), one);
    copy_(seg(owner_err, a, n), sub(share, one));
  }
  workers_->all_gather(mine, all)->wait();
  for (int j = 0; j < M; ++j)
    decode(q, codes(all, j, lo[size_t(j) + 1] - lo[size_t(j)]),
           seg(delta, lo[size_t(j)], lo[size_t(j) + 1] - lo[size_t(j)]));
}

void DiLoCo::gathered_average(const Tensor& delta, int64_t begin) {
  const QuantConfig& q = config_.quant;
  const int M = workers_->size();
  const int64_t numel = delta.numel(), bytes = encoded_bytes(q, numel);
  const int64_t E = std::max<int64_t>(bytes, 1);
  const Tensor err = config_.error_feedback ? seg(error_, begin, numel) : Tensor();
  const Tensor one = Tensor::empty({numel}, DType::F32, device_, MemCategory::Communication);
  if (err.defined()) copy_(delta, add(delta, err));
  const Tensor mine = wire_buffer(E, device_), all = wire_buffer(int64_t(M) * E, device_);
  encode(q, delta, seg(mine, 0, bytes));
  if (err.defined()) {
    decode(q, seg(mine, 0, bytes), one);
    copy_(err, sub(delta, one));
  }
  workers_->all_gather(mine, all)->wait();
  Tensor sum = zeros({numel}, DType::F32, device_);
  for (int r = 0; r < M; ++r) {  // in worker order: the same sum on every worker
    decode(q, seg(all, int64_t(r) * E, bytes), one);
    sum = add(sum, one);
  }
  copy_(delta, mul_scalar(sum, 1.0 / M));
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
