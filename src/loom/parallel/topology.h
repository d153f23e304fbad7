// How the job's processes train one model: the mesh degrees and, per axis, the typed choice of
// what runs on it. Parsed and validated once from [parallel] (train/config.cpp); everything
// downstream switches on these enums, never on the config's strings.
#pragma once
#include <string>

#include "loom/core/dtype.h"
#include "loom/dist/device_mesh.h"

namespace loom::parallel {

enum class DataParallel { DDP, Zero1, Zero2, Zero3 };   // "fsdp" reads as Zero3
enum class Recompute { None, Full, Selective };         // activation checkpointing of blocks
enum class ContextParallelKind { Ring, Ulysses, Usp };  // Usp: ring x Ulysses
enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1 };

struct Topology {
  dist::ParallelDims dims;  // dp_shard = -1: every rank not used by other axes
  DataParallel data_parallel = DataParallel::DDP;  // over dp_shard, replicated over dp_replicate
  // Zero3: what parameters travel as; Zero1-2 offloaded from a GPU: also the device's copy.
  DType gather_dtype = DType::F32;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;  // tp > 1: norms and residuals on sequence shards
  ContextParallelKind context_parallel = ContextParallelKind::Ring;
  int64_t ulysses = 1;  // Usp: the Ulysses degree within cp (the ring's is cp / ulysses)
  ScheduleKind pipeline_schedule = ScheduleKind::OneFOneB;
  int64_t pipeline_chunks = 1;     // model chunks per pipeline rank (interleaved only)
  double bucket_mb = 25;           // DDP gradient buckets
  bool offload_optimizer = false;  // AdamW state in host memory (optim.offload; parallel/zero.h)
  // The dp_replicate groups are DiLoCo workers (lowcomm/diloco.h): gradients are exchanged
  // within a worker (over dp_shard) only, and the workers average their weights every H steps.
  bool outer_sync = false;
  // Expert parallelism: every mixture's experts split over groups of `ep` data-parallel ranks
  // (consecutive dp ranks); the experts' gradients are exchanged between the ranks holding
  // the same ones. 1: every rank holds every expert.
  int64_t ep = 1;

  int zero_stage() const { return int(data_parallel); }  // 0: DDP
};

// From the config's spelling; an unknown name throws "<what> '<name>' (expected <names>)".
DataParallel data_parallel_from_name(const std::string& name,  // ddp, zero1-3, fsdp
                                     const std::string& what = "data parallelism");
Recompute recompute_from_name(const std::string& name,  // none, full, selective
                              const std::string& what = "activation checkpointing");
ContextParallelKind context_parallel_from_name(const std::string& name,  // ring, ulysses, usp
                                               const std::string& what = "context parallelism");
ScheduleKind schedule_kind_from_name(const std::string& name,  // gpipe, 1f1b, interleaved, zb-h1
                                     const std::string& what = "pipeline schedule");
const char* name_of(DataParallel kind);
const char* name_of(ContextParallelKind kind);
const char* name_of(ScheduleKind kind);

}  // namespace loom::parallel
