// Pipeline schedules as data: the 1F1B order as its definition states it, every valid
// (ranks, micro-batches, chunks) runs to completion without deadlock with each pass exactly
// once, activation memory stays within the schedule's bound, interleaving shortens the
// pipeline, and the simulator does catch a schedule that deadlocks.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/parallel/pipeline_schedule.h"

namespace {

using loom::parallel::make_pipe_schedule;
using loom::parallel::ScheduleKind;
using loom::parallel::simulate;

TEST(PipeSchedule, OneFOneBOrderOfFourRanksAndEightMicroBatches) {
  const auto s = make_pipe_schedule(ScheduleKind::OneFOneB, 4, 8);
  // Rank 0 warms up with P - 1 = 3 forwards, then alternates, then drains the backwards; the
  // last rank alternates from the start.
  EXPECT_EQ(s.str(),
            "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n"
            "rank 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7\n"
            "rank 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7\n"
            "rank 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7\n");
}

TEST(PipeSchedule, EveryValidLayoutCompletesWithinItsMemoryBound) {
  for (int64_t P = 1; P <= 8; ++P)
    for (int64_t M = 1; M <= 16; ++M) {
      const auto gpipe = simulate(make_pipe_schedule(ScheduleKind::GPipe, P, M));
      ASSERT_TRUE(gpipe.ok) << "gpipe P=" << P << " M=" << M << ": " << gpipe.error;
      const auto one = simulate(make_pipe_schedule(ScheduleKind::OneFOneB, P, M));
      ASSERT_TRUE(one.ok) << "1f1b P=" << P << " M=" << M << ": " << one.error;
      for (int64_t p = 0; p < P; ++p) {
        EXPECT_EQ(gpipe.peak_in_flight[size_t(p)], M);
        EXPECT_LE(one.peak_in_flight[size_t(p)], std::min(P - p, M)) << "P=" << P << " M=" << M;
      }
      // As short as a pipeline can be: M + P - 1 forward and backward pairs of 3 time units;
      // the bubble (P - 1) / M of the work.
      EXPECT_EQ(one.steps, 3 * (M + P - 1)) << "P=" << P << " M=" << M;
      EXPECT_NEAR(one.bubble, double(P - 1) / double(M), 1e-12) << "P=" << P << " M=" << M;
    }
  for (int64_t P = 1; P <= 6; ++P)
    for (int64_t V = 2; V <= 4; ++V)
      for (int64_t M = P; M <= 3 * P; M += P) {
        const auto s = make_pipe_schedule(ScheduleKind::Interleaved1F1B, P, M, V);
        const auto sim = simulate(s);
        ASSERT_TRUE(sim.ok) << "interleaved P=" << P << " V=" << V << " M=" << M << ": "
                            << sim.error << "\n"
                            << s.str();
        for (int64_t p = 0; p < P; ++p)
          EXPECT_LE(sim.peak_in_flight[size_t(p)],
                    std::min((P - p - 1) * 2 + (V - 1) * P + 1, M * V));
      }
}

TEST(PipeSchedule, InterleavingShortensThePipeline) {
  // A pass of a 1F1B stage does V chunks' work: compare in chunk-pass units.
  for (int64_t V : {2, 4}) {
    const auto one = simulate(make_pipe_schedule(ScheduleKind::OneFOneB, 4, 8));
    const auto inter = simulate(make_pipe_schedule(ScheduleKind::Interleaved1F1B, 4, 8, V));
    ASSERT_TRUE(one.ok && inter.ok);
    EXPECT_LT(inter.steps, one.steps * V) << "V=" << V;
  }
}

TEST(PipeSchedule, ZeroBubbleH1KeepsOneFOneBMemoryAndCutsTheBubbleToAThird) {
  for (int64_t P = 1; P <= 8; ++P)
    for (int64_t M = 1; M <= 24; ++M) {
      const auto s = make_pipe_schedule(ScheduleKind::ZeroBubbleH1, P, M);
      const auto zb = simulate(s);
      ASSERT_TRUE(zb.ok) << "zb-h1 P=" << P << " M=" << M << ": " << zb.error << "\n" << s.str();
      // No rank holds more activations than 1F1B's first rank.
      for (int64_t p = 0; p < P; ++p)
        EXPECT_LE(zb.peak_in_flight[size_t(p)], std::min(P, M)) << "P=" << P << " M=" << M;
      // Qi et al.: with F = B = W, ZB-H1's bubble is (P - 1) / (3 M) of the work once the
      // pipeline fills (M >= P), against 1F1B's (P - 1) / M.
      if (M >= P) {
        EXPECT_NEAR(zb.bubble, double(P - 1) / double(3 * M), 1e-12)
            << "P=" << P << " M=" << M << "\n"
            << s.str();
      }
    }
  // Its order at four ranks (as Qi et al.'s figure 3): 1F1B's F and B, rank p's W passes p
  // micro-batches late.
  EXPECT_EQ(make_pipe_schedule(ScheduleKind::ZeroBubbleH1, 4, 6).str(),
            "rank 0: F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5\n"
            "rank 1: F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5\n"
            "rank 2: F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 B5 W3 W4 W5\n"
            "rank 3: F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5\n");
}

TEST(PipeSchedule, SimulatorCatchesADeadlock) {
  auto s = make_pipe_schedule(ScheduleKind::OneFOneB, 2, 2);
  std::swap(s.passes[1][0], s.passes[1][1]);  // rank 1: B0 before its own F0
  const auto sim = simulate(s);
  EXPECT_FALSE(sim.ok);
  EXPECT_NE(sim.error.find("deadlock"), std::string::npos) << sim.error;
  EXPECT_NE(sim.error.find("rank 1 B0"), std::string::npos) << sim.error;
}

TEST(PipeSchedule, InvalidLayoutsAreNamed) {
  EXPECT_THROW(make_pipe_schedule(ScheduleKind::Interleaved1F1B, 4, 6, 2), loom::Error);
  EXPECT_THROW(make_pipe_schedule(ScheduleKind::OneFOneB, 4, 8, 2), loom::Error);
  EXPECT_THROW(make_pipe_schedule(ScheduleKind::GPipe, 0, 8), loom::Error);
  try {
    loom::parallel::schedule_kind_from_name("zigzag");
    ADD_FAILURE();
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zigzag' (expected gpipe, 1f1b, interleaved or zb-h1)"),
              std::string::npos);
  }
}

}  // namespace
