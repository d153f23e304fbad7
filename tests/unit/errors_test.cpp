// Bad input throws loom::Error with a message that names the op and the shapes involved.
#include <gtest/gtest.h>

#include "expect_error.h"

#include "loom/backend/backend.h"
#include "loom/ops/ops.h"

namespace {

using loom::DType;
using loom::Tensor;

TEST(Errors, MismatchedShapes) {
  expect_error(
      [] {
        loom::matmul(loom::zeros({2, 3}), loom::zeros({4, 5}));
      },
      {"matmul", "(2, 3)", "(4, 5)"});
  expect_error([] { loom::add(loom::zeros({2, 3}), loom::zeros({4})); }, {"add", "(2, 3)", "(4)"});
  expect_error(
      [] {
        loom::linear(loom::zeros({2, 3}), loom::zeros({4, 5}));
      },
      {"linear", "(2, 3)", "(4, 5)"});
  expect_error(
      [] {
        loom::layer_norm(loom::zeros({2, 8}), loom::zeros({6}), Tensor());
      },
      {"layer_norm", "weight", "(6)", "(8)"});
  expect_error([] { loom::reshape(loom::zeros({2, 3}), {4, 2}); }, {"reshape", "(4, 2)", "(2, 3)"});
  expect_error(
      [] {
        loom::cat({loom::zeros({2, 3}), loom::zeros({3, 3})}, 1);
      },
      {"cat", "(3, 3)", "(2, 3)"});
  expect_error(
      [] {
        loom::scaled_dot_product_attention(loom::zeros({1, 3, 4, 8}), loom::zeros({1, 2, 4, 8}),
                                           loom::zeros({1, 2, 4, 8}));
      },
      {"attention", "3 query heads", "2 key/value heads"});
  expect_error(
      [] {
        loom::modulate(loom::zeros({2, 4, 8}), loom::zeros({2, 8}), loom::zeros({3, 8}));
      },
      {"modulate", "scale", "(3, 8)", "(2, 8)"});
}

TEST(Errors, WrongDtypes) {
  expect_error([] { loom::add(loom::zeros({2}), loom::zeros({2}, DType::BF16)); },
               {"add", "f32", "bf16"});
  expect_error([] { loom::exp(loom::zeros({2}, DType::I64)); }, {"exp", "i64"});
  expect_error(
      [] {
        loom::embedding(loom::zeros({3}, DType::F32), loom::zeros({4, 2}));
      },
      {"embedding", "i64"});
  expect_error(
      [] {
        loom::cross_entropy(loom::zeros({2, 5}), loom::zeros({2}, DType::I32));
      },
      {"cross_entropy", "i64", "i32"});
}

TEST(Errors, OutOfRangeIndices) {
  Tensor ids = loom::from_vector(std::vector<int64_t>{0, 7, 2}, {3});
  expect_error(
      [&] {
        loom::embedding(ids, loom::zeros({5, 4}));
      },
      {"index_select", "index 7", "size 5", "(5, 4)"});
  Tensor neg = loom::from_vector(std::vector<int64_t>{-1}, {1, 1});
  expect_error(
      [&] {
        loom::gather(loom::zeros({2, 3}), 1, neg);
      },
      {"gather", "index -1", "size 3"});
  Tensor targets = loom::from_vector(std::vector<int64_t>{1, 9}, {2});
  expect_error(
      [&] {
        loom::cross_entropy(loom::zeros({2, 5}), targets);
      },
      {"cross_entropy", "target 9", "[0, 5)"});
  expect_error([] { loom::narrow(loom::zeros({4, 3}), 0, 2, 3); }, {"narrow", "[2, 5)", "size 4"});
  expect_error([] { loom::sum(loom::zeros({4, 3}), {2}); }, {"dim 2", "(4, 3)"});
}

// Without the CUDA backend (its stub twin) or without a GPU (the backend built, no device to
// run it), using device cuda is one error that says to use the CPU.
TEST(Errors, CudaWithoutBackendOrDeviceNamesTheWayOut) {
  const loom::Device cuda{loom::DeviceType::CUDA, 0};
  auto use_cuda = [&] {
    loom::Backend& b = loom::backend_for(cuda);
    loom::Tensor t = loom::Tensor::empty({4}, loom::DType::F32, cuda);
    b.fill(t, 0.0);
  };
  try {
    use_cuda();
  } catch (const loom::Error&) {
    expect_error(use_cuda, {"CUDA", "device cpu"});
    return;
  }
  GTEST_SKIP() << "a CUDA device is present: there is no error to check";
}

}  // namespace
