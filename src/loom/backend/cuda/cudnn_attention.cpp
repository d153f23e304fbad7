// cuDNN's fused attention through its frontend's graph API: one graph per problem (shapes,
// strides, dtype, scale, causality), built once and kept; each call binds the tensors' device
// pointers and a workspace from the device allocator and runs on the backend's stream.
//
// cuDNN is opened with dlopen when first needed (the frontend's dynamic loading), not linked:
// the library (hundreds of MB with its kernels) may be missing, or come from PyTorch's wheels,
// and either way the rest of Loom runs. A problem cuDNN cannot take is declined once, with the
// reason kept, and every later call of that problem goes straight to the own kernels.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "loom/backend/cuda/cudnn_attention.h"

#include <dlfcn.h>

#include <cudnn_frontend.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "loom/core/error.h"

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend looks every cuDNN symbol up in this library
}

namespace loom::cuda {

namespace fe = cudnn_frontend;

// From runtime.cu (device_code.h, which declares them for the kernels, is device code).
cudaStream_t stream();
Tensor scratch_f64(int64_t n, Device device);

namespace {

// Tensor uids of the graphs' variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

struct Graph {
  std::shared_ptr<fe::graph::Graph> graph;  // nullptr: cuDNN declined this problem
  int64_t workspace = 0;
};

struct State {
  std::mutex mutex;
  bool opened = false;
  cudnnHandle_t handle = nullptr;
  CudnnAttentionStatus status;
  std::map<std::vector<int64_t>, Graph> graphs;
};

State& state() {
  static State* s = new State();  // used until exit, never torn down after CUDA's runtime
  return *s;
}

// Opens cuDNN and makes a handle, once; false (the reason kept) if it cannot.
bool open_cudnn(State& s) {
  if (s.opened) return s.handle != nullptr;
  s.opened = true;
  // The frontend opens the CUDA runtime by name too: this process's, never another major
  // version that a Python environment puts on the library path.
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", "libcudart.so.13", /*overwrite=*/0);
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    s.status.last_refusal = std::string("libcudnn.so.9 not loaded: ") + (why ? why : "not found");
    return false;
  }
  fe::cudnn_dlhandle = lib;
  try {
    const int64_t version = int64_t(fe::detail::get_backend_version());
    if (version < 90500) {  // the deterministic fused backward on Hopper comes with 9.5
      s.status.last_refusal = "cuDNN " + std::to_string(version) + " is older than 9.5";
      return false;
    }
    cudnnHandle_t handle = nullptr;
    if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
      s.status.last_refusal = "cudnnCreate failed";
      return false;
    }
    s.handle = handle;
    s.status.version = version;
  } catch (const std::exception& e) {
    s.status.last_refusal = std::string("cuDNN not usable: ") + e.what();
    return false;
  }
  return true;
}

// (B, H, S, D) dims and strides in elements, as cuDNN's tensors take them.
std::vector<int64_t> dims_of(const Tensor& t) {
  return {t.size(0), t.size(1), t.size(2), t.size(3)};
}
std::vector<int64_t> strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}
// lse (B, H, S) f32 as cuDNN's stats (B, H, S, 1).
std::vector<int64_t> stats_dims(const Tensor& lse) {
  return {lse.size(0), lse.size(1), lse.size(2), 1};
}
std::vector<int64_t> stats_strides(const Tensor& lse) {
  return {lse.stride(0), lse.stride(1), lse.stride(2), 1};
}

// Whether cuDNN can be asked at all: a tensor-core dtype, rows of D contiguous, D a multiple
// of 8 and at most 256, every operand 16-byte aligned. The reason if not. operands[0] is q,
// operands[1] k.
std::string unsupported(bool causal, const std::vector<const Tensor*>& operands) {
  const Tensor& q = *operands[0];
  const Tensor& k = *operands[1];
  // Causal with more queries than keys leaves the first rows no key; the own kernels define it.
  if (causal && q.size(2) > k.size(2)) return "causal with more queries than keys";
  if (q.dtype() != DType::BF16 && q.dtype() != DType::F16)
    return std::string("dtype ") + dtype_name(q.dtype()) + " (cuDNN attention takes bf16, f16)";
  const int64_t d = q.size(3);
  if (d % 8 != 0 || d > 256) return "head dim " + std::to_string(d);
  for (const Tensor* t : operands) {
    if (t->stride(3) != 1) return "rows not contiguous";
    for (int i = 0; i < 3; ++i)
      if (t->stride(i) % 8 != 0) return "strides not multiples of 8 elements";
    if (reinterpret_cast<uintptr_t>(t->raw_ptr()) % 16 != 0) return "operand not 16-byte aligned";
  }
  return "";
}

void set_causal(bool causal, int64_t seq_q, int64_t seq_kv, auto& attributes) {
  if (!causal) return;
  // Loom's causality is bottom-right aligned (query i sees keys j <= i + Skv - Sq), which is
  // cuDNN's top-left mask when the lengths are equal.
  if (seq_q == seq_kv)
    attributes.set_causal_mask(true);
  else
    attributes.set_causal_mask_bottom_right(true);
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name,
                                                    int64_t uid, const Tensor& t) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(dims_of(t))
                      .set_stride(strides_of(t)));
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The graph for `key`, built by `build` the first time (nullptr kept if cuDNN declines it).
const Graph& graph_for(State& s, std::vector<int64_t> key,
                       const std::function<std::shared_ptr<fe::graph::Graph>()>& build) {
  auto it = s.graphs.find(key);
  if (it != s.graphs.end()) return it->second;
  Graph entry;
  std::string refusal;
  try {
    auto g = build();
    fe::error_t built = g->build(s.handle, {fe::HeurMode_t::A});
    if (built.is_good()) {
      entry.graph = g;
      entry.workspace = g->get_workspace_size();
    } else {
      refusal = built.get_message();
    }
  } catch (const std::exception& e) {
    refusal = e.what();
  }
  if (!entry.graph) s.status.last_refusal = "cuDNN declined the problem: " + refusal;
  return s.graphs.emplace(std::move(key), std::move(entry)).first->second;
}

// Runs a built graph on the backend's stream.
void execute(State& s, const Graph& g, Device device, std::unordered_map<int64_t, void*>& pack,
             const char* what) {
  Tensor workspace;
  if (g.workspace > 0) workspace = scratch_f64((g.workspace + 7) / 8, device);
  LOOM_CHECK(fe::detail::set_stream(s.handle, stream()) == CUDNN_STATUS_SUCCESS)
      << "cudnnSetStream failed";
  fe::error_t run =
      g.graph->execute(s.handle, pack, workspace.defined() ? workspace.raw_ptr() : nullptr);
  LOOM_CHECK(run.is_good()) << "cuDNN " << what << " failed: " << run.get_message();
}

// The key of a problem: which pass, dtype, scale, causality, and every operand's shape and
// strides.
std::vector<int64_t> key_of(int64_t pass, float scale, bool causal,
                            const std::vector<const Tensor*>& operands) {
  int32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  std::vector<int64_t> key{pass, int64_t(operands[0]->dtype()), scale_bits, causal};
  for (const Tensor* t : operands)
    for (int i = 0; i < t->dim(); ++i) {
      key.push_back(t->size(i));
      key.push_back(t->stride(i));
    }
  return key;
}

// Whether cuDNN is open and can be asked this problem (the reason kept if not).
bool usable(State& s, bool causal, const std::vector<const Tensor*>& operands) {
  if (const std::string why = unsupported(causal, operands); !why.empty()) {
    s.status.last_refusal = why;
    return false;
  }
  return open_cudnn(s);
}

}  // namespace

bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                             bool causal, const Tensor& out, const Tensor& lse) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::vector<const Tensor*> operands{&q, &k, &v, &out};
  if (!usable(s, causal, operands)) return false;
  std::vector<const Tensor*> keyed = operands;
  keyed.push_back(&lse);
  const Graph& g = graph_for(s, key_of(0, scale, causal, keyed), [&] {
    auto graph = new_graph(q.dtype());
    auto Q = input(*graph, "Q", kQ, q), K = input(*graph, "K", kK, k),
         V = input(*graph, "V", kV, v);
    auto attributes =
        fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(
            scale);
    set_causal(causal, q.size(2), k.size(2), attributes);
    auto [O, stats] = graph->sdpa(Q, K, V, attributes);
    O->set_output(true).set_uid(kO).set_dim(dims_of(out)).set_stride(strides_of(out));
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims(lse))
        .set_stride(stats_strides(lse));
    return graph;
  });
  if (!g.graph) return false;
  std::unordered_map<int64_t, void*> pack{{kQ, q.raw_ptr()},
                                          {kK, k.raw_ptr()},
                                          {kV, v.raw_ptr()},
                                          {kO, out.raw_ptr()},
                                          {kStats, lse.raw_ptr()}};
  execute(s, g, q.device(), pack, "attention forward");
  ++s.status.forward_runs;
  return true;
}

bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                              bool causal, const Tensor& out, const Tensor& lse, const Tensor& gout,
                              const Tensor& gq, const Tensor& gk, const Tensor& gv) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const std::vector<const Tensor*> operands{&q, &k, &v, &out, &gout, &gq, &gk, &gv};
  if (!usable(s, causal, operands)) return false;
  std::vector<const Tensor*> keyed = operands;
  keyed.push_back(&lse);
  const Graph& g = graph_for(s, key_of(1, scale, causal, keyed), [&] {
    auto graph = new_graph(q.dtype());
    auto Q = input(*graph, "Q", kQ, q), K = input(*graph, "K", kK, k),
         V = input(*graph, "V", kV, v);
    auto O = input(*graph, "O", kO, out), dO = input(*graph, "dO", kdO, gout);
    auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                   .set_name("stats")
                                   .set_uid(kStats)
                                   .set_dim(stats_dims(lse))
                                   .set_stride(stats_strides(lse))
                                   .set_data_type(fe::DataType_t::FLOAT));
    auto attributes = fe::graph::SDPA_backward_attributes()
                          .set_name("sdpa_backward")
                          .set_attn_scale(scale)
                          .set_deterministic_algorithm(true);
    set_causal(causal, q.size(2), k.size(2), attributes);
    auto [dQ, dK, dV] = graph->sdpa_backward(Q, K, V, O, dO, stats, attributes);
    dQ->set_output(true).set_uid(kdQ).set_dim(dims_of(gq)).set_stride(strides_of(gq));
    dK->set_output(true).set_uid(kdK).set_dim(dims_of(gk)).set_stride(strides_of(gk));
    dV->set_output(true).set_uid(kdV).set_dim(dims_of(gv)).set_stride(strides_of(gv));
    return graph;
  });
  if (!g.graph) return false;
  std::unordered_map<int64_t, void*> pack{
      {kQ, q.raw_ptr()},   {kK, k.raw_ptr()},       {kV, v.raw_ptr()},
      {kO, out.raw_ptr()}, {kStats, lse.raw_ptr()}, {kdO, gout.raw_ptr()},
      {kdQ, gq.raw_ptr()}, {kdK, gk.raw_ptr()},     {kdV, gv.raw_ptr()}};
  execute(s, g, q.device(), pack, "attention backward");
  ++s.status.backward_runs;
  return true;
}

CudnnAttentionStatus cudnn_attention_status() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.status;
}

}  // namespace loom::cuda
