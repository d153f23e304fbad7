#include "loom/lowcomm/round_agreement.h"

#include <algorithm>
#include <vector>

#include "loom/ops/creation.h"

namespace loom::lowcomm {

Decision RoundAgreement::after_step(int64_t step, bool out_of_time, bool preempted,
                                    bool roll_back) {
  noted_[0] = noted_[0] || out_of_time;
  noted_[1] = noted_[1] || preempted;
  noted_[2] = noted_[2] || roll_back;
  if ((step + 1) % inner_steps_ != 0) return {};
  if (world_.size() == 1) {
    const Decision mine{noted_[0], noted_[1], noted_[2]};
    noted_[0] = noted_[1] = noted_[2] = false;
    return mine;
  }
  std::vector<float> any(3, 0.0f);
  if (work_) {
    work_->wait();
    work_ = nullptr;
    any = to_vector(sent_);
  }
  const std::vector<float> mine = {float(noted_[0]), float(noted_[1]), float(noted_[2])};
  noted_[0] = noted_[1] = noted_[2] = false;
  const bool act =
      step + 1 == steps_ || std::any_of(any.begin(), any.end(), [](float v) { return v > 0; });
  sent_ = from_vector(mine, {3});
  work_ = world_.all_reduce(sent_, dist::ReduceOp::Sum);
  if (act) {
    work_->wait();
    work_ = nullptr;
    const std::vector<float> now = to_vector(sent_);
    for (size_t i = 0; i < 3; ++i) any[i] += now[i];
  }
  return {any[0] > 0, any[1] > 0, any[2] > 0};
}

void RoundAgreement::settle() {
  if (work_) work_->wait();
  work_ = nullptr;
}

}  // namespace loom::lowcomm
