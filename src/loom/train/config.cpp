#include "loom/train/config.h"
#include "loom/train/preemption.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "loom/backend/cpu/gemm.h"
#include "loom/dist/nccl_group.h"
#include "loom/plan/hardware_peak.h"
#include "loom/train/config_file.h"
#include "loom/train/config_read.h"
#include "loom/train/profiler.h"

namespace loom::train {

namespace {

void check_pipeline(const Config& c, const ParallelFacts& m, const std::string& path) {
  const auto& p = c.parallel.topology;
  const bool interleaved = p.pipeline_schedule == parallel::ScheduleKind::Interleaved1F1B;
  const int64_t pp = p.dims.pp, V = p.pipeline_chunks, M = c.train.grad_accum;
  LOOM_CHECK(pp >= 1) << "config " << path << ": parallel.pp must be >= 1, got " << pp;
  LOOM_CHECK(V >= 1 && (V == 1 || interleaved))
      << "config " << path << ": parallel.pipeline_chunks " << V
      << " (more than 1 only with pipeline_schedule = \"interleaved\")";
  if (pp == 1) return;
  LOOM_CHECK(m.pipeline) << "config " << path << ": model.kind " << c.spec().name
                         << " has no pipeline parallelism (parallel.pp 1)";
  const int64_t depth = m.depth;
  LOOM_CHECK(pp * V <= depth) << "config " << path << ": parallel.pp " << pp
                              << " x pipeline_chunks " << V << " = " << pp * V
                              << " stages for model.depth " << depth
                              << " blocks (each stage needs at least one)";
  LOOM_CHECK(!interleaved || M % pp == 0)
      << "config " << path
      << ": the interleaved schedule needs train.grad_accum (the micro-batches, " << M
      << ") to be a multiple of parallel.pp " << pp;
}

// Heads, features and tokens must split over the tensor- and context-parallel ranks: checked
// here, before any work, with the keys to change.
void check_model_parallel(const Config& c, const ParallelFacts& m, const std::string& path) {
  const auto& p = c.parallel.topology;
  const int64_t tp = p.dims.tp, cp = p.dims.cp;
  LOOM_CHECK(tp >= 1 && cp >= 1) << "config " << path << ": parallel.tp and cp must be >= 1, got "
                                 << tp << " and " << cp;
  LOOM_CHECK(!p.sequence_parallel || tp > 1)
      << "config " << path << ": parallel.sequence_parallel needs parallel.tp > 1";
  check_pipeline(c, m, path);
  if (tp == 1 && cp == 1) return;
  LOOM_CHECK(m.tensor_and_context) << "config " << path << ": model.kind " << c.spec().name
                                   << " has no tensor or context parallelism";
  LOOM_CHECK(cp == 1 || m.no_context.empty())
      << "config " << path << ": parallel.cp " << cp << ": model.kind " << c.spec().name << " "
      << m.no_context;
  LOOM_CHECK(m.ssm_heads % tp == 0 && m.ssm_groups % tp == 0)
      << "config " << path << ": the Mamba-2 layers' " << m.ssm_heads << " heads (ssm_expand x "
      << "width / ssm_head_dim) in " << m.ssm_groups
      << " groups (model.ssm_groups) must both be divisible by parallel.tp " << tp;
  const int64_t heads = m.heads, kv_heads = m.kv_heads, hidden = m.mlp_hidden, tokens = m.tokens;
  LOOM_CHECK(heads % tp == 0 && kv_heads % tp == 0)
      << "config " << path << ": model.heads " << heads << " (key/value heads " << kv_heads
      << ") must be divisible by parallel.tp " << tp;
  LOOM_CHECK(hidden % tp == 0) << "config " << path << ": the MLP's " << hidden
                               << " hidden features must be divisible by parallel.tp " << tp;
  LOOM_CHECK(m.vocab == 0 || p.dims.pp > 1 || m.vocab % tp == 0)
      << "config " << path << ": model.vocab_size " << m.vocab
      << " must be divisible by parallel.tp " << tp << " (the embedding and head split over it)";
  const std::string& what = m.tokens_what;
  const bool ring = p.context_parallel == parallel::ContextParallelKind::Ring;
  // A segmented sequence: each part split over cp, then over tp with sequence parallelism.
  const int64_t splits = cp * (p.sequence_parallel ? tp : 1);
  const std::string over = cp > 1 && splits > cp ? "parallel.cp " + std::to_string(cp) +
                                                       " x parallel.tp " + std::to_string(tp)
                           : cp > 1 ? "parallel.cp " + std::to_string(cp)
                                    : "parallel.tp " + std::to_string(tp);
  for (int64_t segment : m.segments)
    LOOM_CHECK(segment % splits == 0)
        << "config " << path << ": " << (cp > 1 ? "context" : "sequence")
        << " parallelism splits each part of the " << what << " over " << over
        << ", which does not divide " << segment;
  if (cp > 1 && p.context_parallel == parallel::ContextParallelKind::Usp) {
    const int64_t U = p.ulysses, R = cp / U;
    LOOM_CHECK(!m.segments.empty() || (tokens % (2 * R) == 0 && (tokens / R) % U == 0))
        << "config " << path << ": USP context parallelism splits the " << what << " into " << 2 * R
        << " chunks for its ring of " << R << " (two chunks per ring member) and each "
        << "ring member's rows over " << U << " Ulysses ranks (parallel.cp " << cp << " = ring "
        << R << " x parallel.ulysses " << U << "), which does not divide them";
    LOOM_CHECK((heads / tp) % U == 0 && (kv_heads / tp) % U == 0)
        << "config " << path << ": USP's Ulysses attention splits each tensor-parallel rank's "
        << heads / tp << " heads (" << kv_heads / tp << " key/value heads) over parallel.ulysses "
        << U << ", which does not divide them";
  } else if (cp > 1) {
    LOOM_CHECK(!m.segments.empty() || tokens % (ring ? 2 * cp : cp) == 0)
        << "config " << path << ": " << (ring ? "ring" : "Ulysses")
        << " context parallelism splits the " << what << " into " << (ring ? 2 * cp : cp)
        << " chunks (parallel.cp " << cp << (ring ? ", two chunks per rank" : "")
        << "), which does not divide them";
    LOOM_CHECK(ring || ((heads / tp) % cp == 0 && (kv_heads / tp) % cp == 0))
        << "config " << path << ": Ulysses attention splits each tensor-parallel rank's "
        << heads / tp << " heads (" << kv_heads / tp << " key/value heads) over parallel.cp " << cp
        << ", which does not divide them";
  }
  LOOM_CHECK(!p.sequence_parallel || !m.segments.empty() || (tokens / cp) % tp == 0)
      << "config " << path << ": sequence parallelism splits the " << what
      << (cp > 1 ? " (" + std::to_string(tokens / cp) + " per context-parallel rank)" : "")
      << " over parallel.tp " << tp << ", which does not divide them";
}

// [lowcomm]: only method is read unless it is "diloco", so a DiLoCo key in a run without it is
// an unknown key.
void read_lowcomm(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  const std::string method = f.get_string("lowcomm", "method", "none");
  LOOM_CHECK(method == "none" || method == "diloco")
      << "config " << path << ": lowcomm.method '" << method << "' (expected none or diloco)";
  if (method == "none") return;
  lowcomm::DiLoCoConfig d;
  d.workers = f.get_int("lowcomm", "workers", 0);
  d.inner_steps = f.get_int("lowcomm", "inner_steps", d.inner_steps);
  d.outer_lr = f.get_double("lowcomm", "outer_lr", d.outer_lr);
  d.outer_momentum = f.get_double("lowcomm", "outer_momentum", d.outer_momentum);
  d.nesterov = f.get_bool("lowcomm", "nesterov", d.nesterov);
  d.quant.kind = lowcomm::compression_from_name(f.get_string("lowcomm", "compression", "none"),
                                                "config " + path + ": lowcomm.compression");
  d.quant.block = f.get_int("lowcomm", "block_size", d.quant.block);
  const std::string scale = f.get_string("lowcomm", "scale_dtype", "f32");
  LOOM_CHECK(scale == "f32" || scale == "bf16")
      << "config " << path << ": lowcomm.scale_dtype '" << scale << "' (expected f32 or bf16)";
  d.quant.scale_dtype = dtype_from_name(scale);
  d.error_feedback = f.get_bool("lowcomm", "error_feedback", d.error_feedback);
  d.fragments = f.get_int("lowcomm", "fragments", d.fragments);
  d.overlap_steps = f.get_int("lowcomm", "overlap_steps", d.overlap_steps);
  d.mixing = f.get_double("lowcomm", "mixing", d.mixing);
  const std::string outer_state = f.get_string("lowcomm", "outer_state", "device");
  LOOM_CHECK(outer_state == "device" || outer_state == "host")
      << "config " << path << ": lowcomm.outer_state '" << outer_state
      << "' (expected device or host)";
  d.host_state = outer_state == "host";
  LOOM_CHECK(d.workers >= 1) << "config " << path
                             << ": lowcomm.method \"diloco\" needs lowcomm.workers (>= 1)";
  LOOM_CHECK(d.inner_steps >= 1 && d.outer_lr > 0 && d.outer_momentum >= 0 &&
             d.outer_momentum < 1 && d.quant.block >= 1)
      << "config " << path << ": lowcomm.inner_steps, outer_lr and block_size must be "
      << "positive, outer_momentum in [0, 1)";
  LOOM_CHECK(d.fragments >= 1 && d.inner_steps % d.fragments == 0)
      << "config " << path << ": lowcomm.inner_steps " << d.inner_steps
      << " must be a multiple of lowcomm.fragments " << d.fragments
      << " (the fragments' exchanges are inner_steps / fragments apart)";
  LOOM_CHECK(d.overlap_steps >= 0 && d.overlap_steps < d.inner_steps / d.fragments)
      << "config " << path << ": lowcomm.overlap_steps " << d.overlap_steps << " must be in [0, "
      << d.inner_steps / d.fragments << ") (one fragment on the wire at a time)";
  LOOM_CHECK(d.mixing >= 0 && d.mixing < 1)
      << "config " << path << ": lowcomm.mixing must be in [0, 1), got " << d.mixing;
  LOOM_CHECK(c.train.steps % d.inner_steps == 0)
      << "config " << path << ": train.steps " << c.train.steps
      << " is not a multiple of lowcomm.inner_steps " << d.inner_steps
      << " (a DiLoCo run ends on an outer step, its workers agreeing)";
  LOOM_CHECK(c.spec().diloco) << "config " << path << ": lowcomm.method \"diloco\" does not "
                              << "train model.kind " << c.spec().name;
  c.diloco = d;
}

// train.device: the host, or the GPU, for what the CUDA backend covers so far (every parallel
// layout, the mixture of experts, DiLoCo and every precision recipe).
void read_device(ConfigFile& f, Config& c, const std::string& path) {
  const std::string name = f.get_string("train", "device", "cpu");
  LOOM_CHECK(name == "cpu" || name == "cuda")
      << "config " << path << ": train.device \"" << name << "\" is not known (cpu or cuda)";
  c.train.tf32 = f.get_bool("train", "tf32", false);
  LOOM_CHECK(!c.train.tf32 || name == "cuda")
      << "config " << path << ": train.tf32 is for train.device \"cuda\" (the CPU's f32 GEMMs "
      << "are f32)";
  LOOM_CHECK(c.run.device_memory_limit_mb == 0 || name == "cuda")
      << "config " << path << ": run.device_memory_limit_mb is for train.device \"cuda\" "
      << "(run.memory_limit_mb limits the host's)";
  if (name == "cpu") return;
  c.train.device = Device{DeviceType::CUDA, 0};
}

// train.precision "auto": bf16 autocast where it is faster than f32 and as good (its curves are
// within +1%/-2% of f32's, docs/performance.md): on a GPU, and on a CPU whose oneDNN multiplies
// bf16 natively (AVX512-BF16 or AMX); f32 elsewhere, where bf16 is widened to f32 and only
// slower. Returns "f32" or "bf16" and says why in `why`.
std::string auto_precision(const std::string& device, std::string& why) {
  if (device == "cuda") {
    why = "bf16 (train.precision \"auto\": bf16 tensor cores on the GPU)";
    return "bf16";
  }
  if (cpu::native_bf16_gemm()) {
    why = std::string("bf16 (train.precision \"auto\": this CPU multiplies bf16 natively, ") +
          (plan::has_amx_bf16() ? "AMX" : "AVX512-BF16") + ")";
    return "bf16";
  }
  why = "f32 (train.precision \"auto\": this CPU has no native bf16 matmul, AVX512-BF16 or AMX)";
  return "f32";
}

// train.precision: f32, bf16, or a low-precision recipe (bf16 around the recipe's GEMMs), whose
// [precision] keys are read only then.
void read_precision(ConfigFile& f, Config& c) {
  const std::string& path = f.path();
  std::string name = f.get_string("train", "precision", "f32");
  if (name == "auto") {
    name = auto_precision(f.get_string("train", "device", "cpu"), c.train.precision_choice);
    f.record("train", "precision", name);  // a resume elsewhere must not change it silently
  }
  if (name == "f32" || name == "bf16") {
    c.train.precision = dtype_from_name(name);
    return;
  }
  LOOM_CHECK(precision::is_recipe_name(name))
      << "config " << path << ": train.precision \"" << name << "\" is not known (auto, f32, bf16, "
      << "fp8_tensorwise, fp8_delayed, fp8_blockwise, mxfp8 or nvfp4)";
  c.train.precision = DType::BF16;
  precision::RecipeConfig r =
      precision::default_recipe_config(precision::recipe_from_name(name, "config " + path));
  const bool delayed = r.recipe == precision::Recipe::Fp8Delayed;
  const bool blockwise = r.recipe == precision::Recipe::Fp8Blockwise;
  const bool nvfp4 = r.recipe == precision::Recipe::Nvfp4;
  if (delayed) r.amax_history = f.get_int("precision", "amax_history", r.amax_history);
  // The block size is the format's own in MX (32) and NVFP4 (16): a key to refuse, not ignore.
  if (f.has("precision", "block_size") || blockwise) {
    r.block_size = f.get_int("precision", "block_size", r.block_size);
    const int64_t own = r.recipe == precision::Recipe::Mxfp8 ? 32 : nvfp4 ? 16 : 0;
    LOOM_CHECK(blockwise || r.block_size == own)
        << "config " << path << ": precision.block_size " << r.block_size << ": " << name
        << (own ? " blocks are " + std::to_string(own) + " values by the format's definition"
                : " has no blocks (one scale per tensor)");
    LOOM_CHECK(!blockwise || (r.block_size >= 16 && r.block_size <= 1024 &&
                              (r.block_size & (r.block_size - 1)) == 0))
        << "config " << path << ": precision.block_size " << r.block_size
        << ": fp8_blockwise takes a power of two from 16 to 1024 (DeepSeek-V3: 128)";
  }
  if (nvfp4) {
    r.hadamard = f.get_bool("precision", "hadamard", r.hadamard);
    r.stochastic_rounding = f.get_bool("precision", "stochastic_rounding", r.stochastic_rounding);
  }
  r.bf16_blocks = f.get_int_list("precision", "bf16_blocks", r.bf16_blocks);
  LOOM_CHECK(r.amax_history >= 1) << "config " << path
                                  << ": precision.amax_history must be at least 1";
  r.seed = c.run.seed;
  c.train.low_precision = r;
}

}  // namespace

void read_moe(ConfigFile& f, nn::MoeConfig& m) {
  const std::string& path = f.path();
  m.experts = f.get_int("moe", "experts", 0);
  if (m.experts == 0) return;
  m.top_k = f.get_int("moe", "top_k", m.top_k);
  const std::string gating = f.get_string("moe", "gating", "softmax");
  LOOM_CHECK(gating == "softmax" || gating == "sigmoid")
      << "config " << path << ": moe.gating '" << gating << "' (expected softmax or sigmoid)";
  m.gating = gating == "softmax" ? nn::MoeGating::Softmax : nn::MoeGating::Sigmoid;
  m.renormalize = f.get_bool("moe", "renormalize", m.renormalize);
  m.hidden = f.get_int("moe", "hidden", 0);
  m.shared_experts = f.get_int("moe", "shared_experts", m.shared_experts);
  m.aux_loss = f.get_double("moe", "aux_loss", 0.01);
  m.z_loss = f.get_double("moe", "z_loss", 0.001);
  m.bias_rate = f.get_double("moe", "bias_rate", 0.0);
  m.every = f.get_int("moe", "every", m.every);
  LOOM_CHECK(m.hidden >= 0) << "config " << path << ": moe.hidden must be non-negative";
  try {
    nn::MoeConfig filled = m;
    if (filled.hidden == 0) filled.hidden = 1;  // the model's default, known to be positive
    filled.validate();
  } catch (const Error& e) {
    LOOM_FAIL() << "config " << path << ": " << e.what();
  }
}

namespace {
Config read_config(ConfigFile& f);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<ConfigFile::Read>* reads) {
  try {
    ConfigFile f(path, overrides);
    Config c = read_config(f);
    if (reads) *reads = f.reads();
    return c;
  } catch (const Error& e) {
    // A value given by --set is blamed on the override that gave it, not on the file.
    std::string blamed;
    for (const std::string& o : overrides) {
      const std::string key = o.substr(0, o.find('='));
      if (!key.empty() && e.message().find(key) != std::string::npos)
        blamed += (blamed.empty() ? "--set " : ", --set ") + o;
    }
    if (blamed.empty()) throw;
    throw Error(e.message() + " (given by " + blamed + ")", e.where());
  }
}

namespace {

Config read_config(ConfigFile& f) {
  const std::string& path = f.path();
  Config c;
  c.run.name = f.get_string("run", "name", c.run.name);
  c.run.out_dir = f.get_string("run", "out_dir", c.run.out_dir);
  c.run.seed = uint64_t(f.get_int("run", "seed", int64_t(c.run.seed), kAnyStep));
  c.run.memory_limit_mb = f.get_double("run", "memory_limit_mb", c.run.memory_limit_mb);
  c.run.device_memory_limit_mb =
      f.get_double("run", "device_memory_limit_mb", c.run.device_memory_limit_mb);
  c.run.profile_steps = f.get_string("run", "profile_steps", c.run.profile_steps);
  c.run.tensorboard = f.get_bool("run", "tensorboard", c.run.tensorboard);
  c.run.id = f.get_string("run", "id", c.run.id);
  c.run.threads = f.get_int("run", "threads", c.run.threads, 4096);
  LOOM_CHECK(c.run.threads >= 0) << "config " << path
                                 << ": run.threads must be >= 0 (0: the cores this process may "
                                    "use), got "
                                 << c.run.threads;
  // The run directory is out_dir/name: a name is one directory, never a path out of out_dir.
  LOOM_CHECK(!c.run.name.empty() && c.run.name != "." && c.run.name != ".." &&
             c.run.name.find('/') == std::string::npos)
      << "config " << path << ": run.name '" << c.run.name
      << "' must be one directory name (not empty, '.', '..', nor with a '/')";
  LOOM_CHECK(!c.run.out_dir.empty()) << "config " << path << ": run.out_dir must not be empty";
  try {
    parse_profile_steps(c.run.profile_steps);
  } catch (const Error& e) {
    LOOM_FAIL() << "config " << path << ": run.profile_steps: " << e.what();
  }
  LOOM_CHECK(c.run.memory_limit_mb >= 0)
      << "config " << path << ": run.memory_limit_mb must be >= 0 (0: no limit), got "
      << c.run.memory_limit_mb;
  LOOM_CHECK(c.run.device_memory_limit_mb >= 0)
      << "config " << path << ": run.device_memory_limit_mb must be >= 0 (0: no limit), got "
      << c.run.device_memory_limit_mb;

  const ModelSpec& spec =
      model_spec(f.get_string("model", "kind", model_spec(ModelKind::Dit).name), "config " + path);
  c.model_kind = spec.kind;

  auto& t = c.train;
  t.steps = f.get_int("train", "steps", t.steps, kAnyStep);
  t.batch_size = f.get_int("train", "batch_size", t.batch_size, kAnyStep);  // memory decides
  t.grad_accum = f.get_int("train", "grad_accum", t.grad_accum, 65536);
  t.log_every = f.get_int("train", "log_every", t.log_every, kAnyStep);
  t.ckpt_every = f.get_int("train", "ckpt_every", t.ckpt_every, kAnyStep);
  t.keep_checkpoints = f.get_int("train", "keep_checkpoints", t.keep_checkpoints);
  t.async_checkpoint = f.get_bool("train", "async_checkpoint", t.async_checkpoint);
  t.max_minutes = f.get_double("train", "max_minutes", t.max_minutes);
  t.stop_after = f.get_int("train", "stop_after", t.stop_after, kAnyStep);
  t.grad_clip = f.get_double("train", "grad_clip", t.grad_clip);
  read_precision(f, c);
  LOOM_CHECK(t.steps > 0 && t.batch_size > 0 && t.grad_accum > 0 && t.log_every > 0 &&
             t.ckpt_every >= 0 && t.keep_checkpoints > 0 && t.max_minutes >= 0 && t.stop_after >= 0)
      << "config " << path << ": train.steps, batch_size, grad_accum, log_every and "
      << "keep_checkpoints must be positive; ckpt_every, max_minutes and stop_after non-negative";
  const int64_t last_step = t.stop_after > 0 ? std::min(t.steps, t.stop_after) : t.steps;
  LOOM_CHECK(parse_profile_steps(c.run.profile_steps).last <= last_step)
      << "config " << path << ": run.profile_steps " << c.run.profile_steps
      << " ends after the last step (" << last_step << ", from train.steps and train.stop_after)";

  spec.read(f, c);
  const ParallelFacts facts = spec.parallel_facts(c);
  if (c.train.low_precision) {
    const int64_t depth = facts.depth;
    for (int64_t b : c.train.low_precision->bf16_blocks)
      LOOM_CHECK(b >= -depth && b < depth)
          << "config " << path << ": precision.bf16_blocks: block " << b << " does not exist ("
          << "model.depth " << depth << "; negative counts from the last)";
  }

  auto& o = c.adamw;
  o.lr = f.get_double("optim", "lr", 1e-3);
  o.beta1 = f.get_double("optim", "beta1", o.beta1);
  o.beta2 = f.get_double("optim", "beta2", o.beta2);
  o.eps = f.get_double("optim", "eps", o.eps);
  o.weight_decay = f.get_double("optim", "weight_decay", o.weight_decay);
  o.offload = f.get_bool("optim", "offload", false);
  const std::string optimizer = f.get_string("optim", "name", "adamw");
  LOOM_CHECK(optimizer == "adamw" || optimizer == "muon")
      << "config " << path << ": optim.name '" << optimizer << "' is not known (adamw or muon)";
  o.muon = optimizer == "muon";
  if (o.muon) {  // the muon_* keys are unknown to AdamW runs
    o.muon_momentum = f.get_double("optim", "muon_momentum", o.muon_momentum);
    o.muon_steps = int(f.get_int("optim", "muon_steps", o.muon_steps, 100));
    LOOM_CHECK(o.muon_momentum >= 0 && o.muon_momentum < 1 && o.muon_steps > 0)
        << "config " << path << ": optim.muon_momentum must be in [0, 1) and optim.muon_steps "
        << "positive";
  }
  c.parallel.topology.offload_optimizer = o.offload;
  LOOM_CHECK(o.lr >= 0 && o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0 &&
             o.weight_decay >= 0)
      << "config " << path
      << ": optim.lr must be non-negative, eps positive, beta1 and beta2 in [0, 1), "
      << "weight_decay non-negative";
  auto& s = c.schedule;
  s.lr = o.lr;
  s.kind = choice(f, "optim", "schedule", "cosine", optim::schedule_kind_from_name);
  s.warmup_steps = f.get_int("optim", "warmup_steps", s.warmup_steps, kAnyStep);
  s.min_lr_ratio = f.get_double("optim", "min_lr_ratio", s.min_lr_ratio);
  s.decay_fraction = f.get_double("optim", "decay_fraction", s.decay_fraction);
  s.total_steps = t.steps;
  s.validate();

  auto& p = c.parallel.topology;
  p.dims.pp = f.get_int("parallel", "pp", p.dims.pp);
  // DiLoCo's workers are the mesh's dp_replicate groups.
  read_lowcomm(f, c);
  p.dims.dp_replicate =
      f.get_int("parallel", "dp_replicate", c.diloco ? c.diloco->workers : p.dims.dp_replicate);
  LOOM_CHECK(!c.diloco || p.dims.dp_replicate == c.diloco->workers)
      << "config " << path << ": parallel.dp_replicate " << p.dims.dp_replicate
      << " and lowcomm.workers " << c.diloco->workers
      << " differ (DiLoCo's workers are the dp_replicate groups: set lowcomm.workers alone)";
  p.outer_sync = c.diloco.has_value();
  p.dims.dp_shard = f.get_int("parallel", "dp_shard", p.dims.dp_shard);
  p.dims.cp = f.get_int("parallel", "cp", p.dims.cp);
  p.dims.tp = f.get_int("parallel", "tp", p.dims.tp);
  p.data_parallel =
      choice(f, "parallel", "data_parallel", "ddp", parallel::data_parallel_from_name);
  LOOM_CHECK(!o.muon || p.dims.tp == 1)
      << "config " << path << ": optim.name \"muon\" orthogonalises each matrix whole, and "
      << "parallel.tp " << p.dims.tp << " splits them over the ranks of a layer: Muon runs under "
      << "ddp, ZeRO-1/2/3 and HSDP (gathering each matrix's momentum), pp and cp, not yet tp";
  LOOM_CHECK(!o.muon || !o.offload || p.data_parallel == parallel::DataParallel::DDP)
      << "config " << path << ": optim.name \"muon\" with optim.offload under parallel."
      << "data_parallel \"" << parallel::name_of(p.data_parallel) << "\" is not built (the "
      << "gathered matrices are on the device, the offloaded master in host memory)";
  const std::string gather = f.get_string("parallel", "gather_dtype", "f32");
  LOOM_CHECK(gather == "f32" || gather == "bf16")
      << "config " << path << ": parallel.gather_dtype '" << gather << "' (expected f32 or bf16)";
  p.gather_dtype = dtype_from_name(gather);
  p.recompute =
      choice(f, "parallel", "activation_checkpointing", "none", parallel::recompute_from_name);
  p.sequence_parallel = f.get_bool("parallel", "sequence_parallel", p.sequence_parallel);
  p.context_parallel =
      choice(f, "parallel", "context_parallel", "ring", parallel::context_parallel_from_name);
  // USP's Ulysses degree: read only for usp, where it must leave a ring of at least 2.
  const int64_t ulysses = f.get_int("parallel", "ulysses", 0);
  if (p.context_parallel == parallel::ContextParallelKind::Usp) {
    LOOM_CHECK(ulysses > 1 && p.dims.cp % ulysses == 0 && p.dims.cp / ulysses > 1)
        << "config " << path << ": parallel.context_parallel \"usp\" runs parallel.cp " << p.dims.cp
        << " as a ring of Ulysses groups: parallel.ulysses (" << ulysses
        << ") must be at least 2 and divide cp leaving a ring of at least 2";
    p.ulysses = ulysses;
  } else {
    LOOM_CHECK(ulysses == 0) << "config " << path << ": parallel.ulysses is the Ulysses degree of "
                             << "parallel.context_parallel \"usp\" (here \""
                             << parallel::name_of(p.context_parallel) << "\")";
  }
  p.pipeline_schedule =
      choice(f, "parallel", "pipeline_schedule", "1f1b", parallel::schedule_kind_from_name);
  p.pipeline_chunks = f.get_int("parallel", "pipeline_chunks", p.pipeline_chunks);
  p.bucket_mb = f.get_double("parallel", "bucket_mb", p.bucket_mb);
  c.parallel.timeout_s = f.get_double("dist", "timeout_s", c.parallel.timeout_s);
  std::string group = f.get_string("dist", "device_group", "auto");
  LOOM_CHECK(group == "auto" || group == "nccl" || group == "staged")
      << "config " << path << ": dist.device_group '" << group
      << "' is not known (expected auto, nccl or staged)";
  if (group == "auto") {
    group = dist::nccl_available() ? "nccl" : "staged";
    f.record("dist", "device_group", group);  // what this build chose
  }
  c.parallel.device_group = group == "nccl" ? DeviceGroup::Nccl : DeviceGroup::Staged;
  check_model_parallel(c, facts, path);
  p.ep = f.get_int("parallel", "ep", p.ep);
  const nn::MoeConfig* moe = facts.moe;
  if (p.ep != 1) {
    LOOM_CHECK(p.ep > 1) << "config " << path << ": parallel.ep must be at least 1, got " << p.ep;
    LOOM_CHECK(moe && moe->enabled())
        << "config " << path << ": parallel.ep " << p.ep << " splits the experts of a mixture, "
        << "but the model has none (set moe.experts)";
    LOOM_CHECK(moe->experts % p.ep == 0)
        << "config " << path << ": parallel.ep " << p.ep << " does not divide moe.experts "
        << moe->experts << " (each expert-parallel rank holds experts / ep of them)";
    // Under DiLoCo the groups are carved from each worker's ranks (dp_shard).
    const int64_t fixed =
        (c.diloco ? 1 : p.dims.dp_replicate) * std::max<int64_t>(p.dims.dp_shard, 1);
    LOOM_CHECK(p.dims.dp_shard < 0 || fixed % p.ep == 0)
        << "config " << path << ": parallel.ep " << p.ep << " does not divide the " << fixed
        << (c.diloco ? " data-parallel ranks of a DiLoCo worker (dp_shard)"
                     : " data-parallel ranks (dp_replicate x dp_shard)")
        << " it is carved from";
  }
  // A recipe quantises the f32 weights itself; ZeRO-3's bf16 gathers would hide them from it.
  LOOM_CHECK(!c.train.low_precision || p.gather_dtype == DType::F32)
      << "config " << path << ": train.precision \""
      << precision::recipe_name(c.train.low_precision->recipe)
      << "\" quantises the f32 weights; parallel.gather_dtype must stay f32";
  LOOM_CHECK(p.bucket_mb > 0 && c.parallel.timeout_s > 0)
      << "config " << path << ": parallel.bucket_mb and dist.timeout_s must be positive";

  read_device(f, c, path);
  // bf16 parameters on the wire and on the device, where an f32 master is kept elsewhere: ZeRO-3's
  // shard, or (ZeRO-1/2) the host's offloaded master.
  const bool zero12 = p.data_parallel == parallel::DataParallel::Zero1 ||
                      p.data_parallel == parallel::DataParallel::Zero2;
  LOOM_CHECK(p.gather_dtype == DType::F32 || p.data_parallel == parallel::DataParallel::Zero3 ||
             (zero12 && p.offload_optimizer && c.train.device.type == DeviceType::CUDA))
      << "config " << path << ": parallel.gather_dtype \"bf16\" keeps bf16 parameters beside an "
      << "f32 master: it needs zero3, or zero1/zero2 with optim.offload = true on "
      << "train.device \"cuda\" (data parallelism here: " << parallel::name_of(p.data_parallel)
      << ")";

  auto& r = c.resilience;
  r.max_skips_in_row = f.get_int("resilience", "max_skips_in_row", r.max_skips_in_row);
  r.max_rollbacks = f.get_int("resilience", "max_rollbacks", r.max_rollbacks);
  r.skip_spikes = f.get_bool("resilience", "skip_spikes", r.skip_spikes);
  r.spike_rollback = f.get_bool("resilience", "spike_rollback", r.spike_rollback);
  r.straggler_every = f.get_int("resilience", "straggler_every", r.straggler_every);
  r.straggler_factor = f.get_double("resilience", "straggler_factor", r.straggler_factor);
  r.exclude_stragglers_after =
      f.get_int("resilience", "exclude_stragglers_after", r.exclude_stragglers_after);
  r.spike_zscore = f.get_double("resilience", "spike_zscore", r.spike_zscore);
  r.consistency_every = f.get_int("resilience", "consistency_every", r.consistency_every);
  r.preempt_signals = f.get_string("resilience", "preempt_signals", r.preempt_signals);
  r.memory_checkpoint_every =
      f.get_int("resilience", "memory_checkpoint_every", r.memory_checkpoint_every);
  r.memory_store = f.get_string("resilience", "memory_store", r.memory_store);
  LOOM_CHECK(r.memory_checkpoint_every >= 0)
      << "config " << path << ": resilience.memory_checkpoint_every must be >= 0 (0: off)";
  LOOM_CHECK(r.memory_checkpoint_every == 0 || !r.memory_store.empty())
      << "config " << path << ": resilience.memory_store is empty; name the directory of a "
      << "memory file system (/dev/shm)";
  try {
    parse_signal_names(r.preempt_signals);
  } catch (const Error& e) {
    LOOM_FAIL() << "config " << path << ": resilience.preempt_signals: " << e.what();
  }
  LOOM_CHECK(r.max_skips_in_row > 0 && r.max_rollbacks >= 0 && r.straggler_every >= 0 &&
             r.straggler_factor > 1 && r.spike_zscore >= 0 && r.consistency_every >= 0 &&
             r.exclude_stragglers_after >= 0)
      << "config " << path << ": resilience.max_skips_in_row must be positive, max_rollbacks, "
      << "straggler_every, consistency_every, exclude_stragglers_after and spike_zscore "
      << "non-negative, straggler_factor "
      << "above 1";
  // A DiLoCo worker agrees on its losses alone: one would roll back while the others go on.
  LOOM_CHECK(!(r.spike_rollback && c.diloco))
      << "config " << path << ": resilience.spike_rollback with lowcomm.method \"diloco\": "
      << "each worker sees its own spikes, and a rollback needs every rank";
  LOOM_CHECK(!(r.spike_rollback && r.spike_zscore == 0))
      << "config " << path << ": resilience.spike_rollback needs the spike detector "
      << "(resilience.spike_zscore > 0)";

  f.check_all_keys_used();
  c.resolved_toml = f.resolved();
  return c;
}

}  // namespace

const char* name_of(Dataset dataset) {
  switch (dataset) {
    case Dataset::FashionMnist:
      return "fashion_mnist";
    case Dataset::Images:
      return "images";
    case Dataset::Kjv:
      return "kjv";
    case Dataset::Text:
      return "text";
    case Dataset::Tokens:
      return "tokens";
    case Dataset::Canvas:
      return "canvas";
  }
  return "?";
}

Dataset dataset_from_name(const std::string& name, const std::vector<Dataset>& allowed,
                          const std::string& what, const std::string& kind) {
  std::string known;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (name == name_of(allowed[i])) return allowed[i];
    known += (i == 0                    ? ""
              : i + 1 == allowed.size() ? " or "
                                        : ", ") +
             std::string(name_of(allowed[i]));
  }
  LOOM_FAIL() << what << " '" << name << "' is not known for model.kind " << kind << " (expected "
              << known << ")";
  return allowed[0];
}

std::string default_cache_dir(const std::string& out_dir) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != 0) return std::string(xdg) + "/loom";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != 0) return std::string(home) + "/.cache/loom";
  return out_dir + "/cache";
}

std::string resolved_cache_dir(const Config& config) {
  return config.data.cache_dir.empty() ? default_cache_dir(config.run.out_dir)
                                       : config.data.cache_dir;
}

}  // namespace loom::train
