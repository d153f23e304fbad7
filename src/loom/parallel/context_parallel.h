// Context (sequence) parallelism for attention: each rank of `group` (P ranks) holds some rows
// of the sequence of q, k and v -- Ulysses: the contiguous chunk r; ring: any rows with their
// global positions (load-balanced: chunks r and 2P-1-r of 2P); USP: both at once, a ring of
// Ulysses groups.
//
// apply_context_parallel applies either to a model from outside, following its plan.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "loom/nn/module.h"
#include "loom/nn/parallel_plan.h"
#include "loom/parallel/functional.h"
#include "loom/parallel/topology.h"  // ContextParallelKind

namespace loom::parallel {

// Ulysses (Jacobs et al. 2023): an all-to-all trades the sequence split for a head split, each
// rank attends over the whole sequence with H/P of the heads, and a second all-to-all trades
// back. q (B, H, T/P, D), k/v (B, Hkv, T/P, D) with H and Hkv multiples of P (GQA keeps its
// grouping: rank j gets query heads j H/P.. and key/value heads j Hkv/P..). Returns this
// rank's chunk of the output, (B, H, T/P, D). Causal masking (and a sliding window > 0) use
// global positions.
Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         const GroupPtr& group, int64_t window = 0);

// Ring attention (Liu et al. 2023): the ranks' key/value blocks travel around the ring; each
// rank attends its queries to every block in turn -- the next block's transfer started before
// the current one's compute -- with the fused attention kernel (no score matrix is stored) and
// merges the partial results by their log-sum-exp (online softmax). Memory: O(n) per rank.
// The backward sends the blocks around again, each with its accumulating key/value gradients
// (the kernel's backward with the final output and log-sum-exp gives each block's exact share),
// and a last shift brings the gradients home. positions (n) i64: the global positions this
// rank's rows hold (the ranks' positions partition the sequence); causal masking works on runs
// of consecutive positions, a band per pair of runs placed by their positions: with a sliding
// window (> 0) a block wholly before every query's window is skipped, one partly in it
// computed within the band.
// q (B, H, n, D), k/v (B, Hkv, n, D) f32 with H a multiple of Hkv. Under bf16 autocast the
// blocks travel and the kernels run in bf16 (half the bytes on the ring); the partial results
// merge, and the gradients accumulate, in f32.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                      bool causal, const GroupPtr& group, int64_t window = 0);

// USP, unified sequence parallelism (Fang & Zhao 2024, as xDiT runs it): context parallelism
// over ring x Ulysses ranks. The Ulysses all-to-all inside `ulysses` (U ranks) trades the
// sequence split for a head split, so the group's U chunks become one longer run of rows with
// H/U of the heads; ring attention over `ring` (the R ranks holding the same heads) then
// attends those rows to every ring member's, and a second all-to-all trades back. Ulysses'
// traffic stays within its group (a machine's fast links) and the ring's blocks are U times
// longer and fewer. positions (n): this rank's rows' global positions (a Ulysses group's ranks
// hold consecutive parts of one ring member's rows). q (B, H, n, D), k/v (B, Hkv, n, D) with H
// and Hkv multiples of U.
Tensor usp_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                     bool causal, const GroupPtr& ulysses, const GroupPtr& ring,
                     int64_t window = 0);

// Load-balanced causal sharding of T positions over P ranks: rank r holds chunks r and
// 2P - 1 - r of 2P equal chunks, so every rank has as much of the causal triangle to compute.
std::vector<int64_t> load_balanced_positions(int64_t T, int64_t rank, int64_t P);

// The sequence rows rank r of P holds of T: ring, chunks r and 2P - 1 - r (load-balanced);
// Ulysses, chunk r of P; USP with U Ulysses ranks (rank r = a U + u: ring member a, Ulysses
// member u), part u of U of ring member a's load-balanced rows over P / U ring members.
std::vector<int64_t> context_parallel_rows(int64_t T, int64_t rank, int64_t P,
                                           ContextParallelKind kind, int64_t ulysses = 1);

// The rows rank r of P holds of a stream of n rows made of segments in the proportions of
// `segments` (plan.sequence_segments: their lengths in the whole stream): chunk r of each
// segment, in segment order. Every segment's share of n must split over P.
std::vector<int64_t> segment_rows(const std::vector<int64_t>& segments, int64_t n, int64_t rank,
                                  int64_t P);
// Every rank's segment_rows one after another (a permutation of 0..n-1): the order in which a
// plain split along the rows hands each rank its own.
std::vector<int64_t> segment_order(const std::vector<int64_t>& segments, int64_t n, int64_t P);
// The permutation that puts rows taken in `order` back where they came from.
std::vector<int64_t> inverse_order(const std::vector<int64_t>& order);

// Context parallelism over `group`: each rank holds its context_parallel_rows of the sequence,
// and the plan's attention modules attend over every rank's rows -- ring or Ulysses attention
// -- with their rows' global positions (RoPE, the causal mask).
//   plan.sequence_shards (GPT): the caller gives the model this rank's rows of its inputs and
//     targets with their positions, so every activation is 1/P of the sequence; the plan's
//     loss module averages the ranks' losses. Every parameter's gradient is a share.
//   otherwise (DiT): the residual stream is split along plan.sequence_dim from the first
//     block's input to the last block's output; the blocks' other inputs (conditioning) stay
//     whole and what lies outside the blocks runs whole on every rank. The block parameters'
//     gradients are shares. With plan.sequence_segments (MMDiT: caption, then image rows;
//     bidirectional, position-free) each rank takes chunk r of every segment, the attention
//     cores need no positions, and plan.context_inputs get their input gathered whole.
// Returns the parameters whose gradient each rank holds only its rows' share of, to be summed
// over the group before the optimizer step.
// ulysses: USP's Ulysses degree (kind Usp).
std::set<std::string> apply_context_parallel(nn::Module& model, const nn::ParallelPlan& plan,
                                             const GroupPtr& group, ContextParallelKind kind,
                                             int64_t ulysses = 1);

}  // namespace loom::parallel
