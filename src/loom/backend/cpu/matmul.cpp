// CPU GEMM through oneDNN's matmul primitive.
//
// Operands reach oneDNN with their real strides, so a transpose (a stride swap), a padded row
// stride or an interleaved batch costs nothing. Creating a primitive costs about a millisecond,
// so one is created per geometry (shapes, strides, dtypes, bias) and kept for the life of the
// process; each thread also keeps its own memory objects for every geometry it has run, so a
// call in the steady state only binds data pointers and executes (no allocation on our side
// beyond the scratchpad oneDNN asks for, which comes from the caching allocator). Products with
// a narrow output and many rows, or a wide output and few rows, are cut into chunks that our
// threads share, and products with a long inner dimension are split along it between the
// threads (run_in_chunks, run_in_inner_parts).
//
// Layouts oneDNN cannot address (no unit stride in the matrix, overlapping matrices) are
// packed into a dense temporary first. bf16 without a native oneDNN kernel (CPUs without
// AVX-512: oneDNN has no bf16 matmul there, or only its reference kernel, a naive loop) is
// widened to f32, multiplied by the f32 kernel and rounded back: bf16 values are
// exact in f32 and the products are accumulated in f32 either way, so only speed differs.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "loom/backend/cpu/cpu_backend.h"
#include "loom/backend/cpu/gemm.h"
#include "loom/backend/cpu/parallel.h"
#include "loom/backend/kernel_checks.h"

namespace loom {
namespace {

// --- operand geometry ---

using cpu::MatrixView;

struct BiasView {
  char* data = nullptr;  // null: no bias
  DType dtype = DType::F32;
  int64_t n = 0, stride = 1;
};

// One GEMM after validation: out (batch) = a @ b + bias, a or b may have batch 1.
struct Problem {
  MatrixView a, b, out;
  BiasView bias;
};

MatrixView view_of(const Tensor& t) {
  MatrixView v;
  v.data = static_cast<char*>(t.data_ptr());
  v.dtype = t.dtype();
  const Shape &shape = t.shape(), &strides = t.strides();  // 3-D, checked by the caller
  v.batch = shape[0], v.rows = shape[1], v.cols = shape[2];
  v.bs = strides[0], v.rs = strides[1], v.cs = strides[2];
  return v;
}

// Strides of size-1 dims address nothing, but oneDNN reads them when it classifies a layout
// (and so do our cache keys): rewrite them to the dense value. A batch of stride 0 is a
// broadcast, i.e. batch 1 (only for inputs: an output batch of stride 0 stays and is refused).
void canonicalize(MatrixView& v, bool batch_may_broadcast) {
  if (v.cols == 1) v.cs = 1;
  if (v.rows == 1) v.rs = v.cs == 1 ? v.cols : 1;
  if (batch_may_broadcast && v.bs == 0) v.batch = 1;
  if (v.batch == 1) v.bs = v.cs == 1 ? v.rows * v.rs : v.cols * v.cs;
}

// Whether oneDNN's jit GEMM can address the view in place: one matrix dim of unit stride and
// no two elements at the same address (oneDNN refuses overlapping strides).
bool addressable(const MatrixView& v) {
  if (v.rs != 1 && v.cs != 1) return false;
  std::pair<int64_t, int64_t> dims[3] = {{v.bs, v.batch}, {v.rs, v.rows}, {v.cs, v.cols}};
  // (stride, size) sorted by stride; three elements, so three compare-swaps.
  if (dims[1] < dims[0]) std::swap(dims[0], dims[1]);
  if (dims[2] < dims[1]) std::swap(dims[1], dims[2]);
  if (dims[1] < dims[0]) std::swap(dims[0], dims[1]);
  int64_t need = 1;  // the smallest stride the next (larger-stride) dim may have
  for (const auto& [stride, size] : dims) {
    if (size == 1) continue;
    if (stride < need) return false;
    need = stride * size;
  }
  return true;
}

// The dense layout a packed copy of v gets: column-major when v is closer to that (so the
// copy streams through memory), row-major otherwise. Batch (1 = broadcast) is kept.
MatrixView dense_like(const MatrixView& v, DType dtype) {
  MatrixView d = v;
  d.data = nullptr;
  d.dtype = dtype;
  const bool col_major = v.rows > 1 && v.cols > 1 && std::abs(v.rs) < std::abs(v.cs);
  d.rs = col_major ? 1 : v.cols;
  d.cs = col_major ? v.rows : 1;
  d.bs = v.rows * v.cols;
  canonicalize(d, false);
  return d;
}

// A leading dimension that is a multiple of 4 KB puts every row (or column) of a panel into
// the same few cache sets, and oneDNN's packing then runs at half speed or worse (the weight
// gradient of a 256 -> 1024 linear over 12544 rows: 69 GFLOP/s, 162 with 16 elements of
// padding). Such an operand is copied with a padded leading dimension when the copy is small
// next to the product: at least 64 products per element copied.
// (Producers can avoid the copy: gemm_operand_row_stride below.)
constexpr int64_t kLeadingDimPadding = 16;

bool ld_aliases(int64_t ld, DType dtype, int64_t elements, int64_t other_dim) {
  return ld * int64_t(dtype_size(dtype)) % 4096 == 0 && elements >= 65536 && other_dim >= 64;
}

bool aliases_cache_sets(const MatrixView& v, int64_t other_dim) {
  if (v.batch != 1 || v.rows < 2 || v.cols < 2) return false;
  return ld_aliases(v.cs == 1 ? v.rs : v.cs, v.dtype, v.rows * v.cols, other_dim);
}

// v's layout (row- or column-major, as it is) with the leading dimension padded.
MatrixView padded_like(const MatrixView& v) {
  MatrixView d = v;
  d.data = nullptr;
  if (v.cs == 1) {
    d.rs = v.cols + kLeadingDimPadding;
  } else {
    d.cs = v.rows + kLeadingDimPadding;
  }
  d.bs = v.cs == 1 ? v.rows * d.rs : v.cols * d.cs;
  return d;
}

int64_t elements(const MatrixView& v) {
  return v.batch * v.rows * v.cols;
}

// --- element copies for packing, widening bf16 and narrowing the output ---

template <typename S, typename D>
void convert_typed(const MatrixView& src, const MatrixView& dst) {
  // The inner loop runs along dst's unit-stride dim; dst is dense or a row-major output.
  const bool by_cols = dst.cs != 1;
  const int64_t outer = by_cols ? dst.cols : dst.rows, inner = by_cols ? dst.rows : dst.cols;
  const int64_t s_outer = by_cols ? src.cs : src.rs, s_inner = by_cols ? src.rs : src.cs;
  const int64_t d_outer = by_cols ? dst.cs : dst.rs;
  const S* s0 = reinterpret_cast<const S*>(src.data);
  D* d0 = reinterpret_cast<D*>(dst.data);
  cpu::parallel_for(dst.batch * outer, inner, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t bi = i / outer, oi = i % outer;
      const S* s = s0 + (src.batch == 1 ? 0 : bi * src.bs) + oi * s_outer;
      D* d = d0 + bi * dst.bs + oi * d_outer;
      if (s_inner == 1) {
        for (int64_t j = 0; j < inner; ++j) d[j] = from_f32<D>(to_f32(s[j]));
      } else {
        for (int64_t j = 0; j < inner; ++j) d[j] = from_f32<D>(to_f32(s[j * s_inner]));
      }
    }
  });
}

// dst = src elementwise (same batch/rows/cols), converting between f32 and bf16.
void convert(const MatrixView& src, const MatrixView& dst) {
  const bool sf = src.dtype == DType::F32, df = dst.dtype == DType::F32;
  if (sf && df) return convert_typed<float, float>(src, dst);
  if (sf) return convert_typed<float, bf16>(src, dst);
  if (df) return convert_typed<bf16, float>(src, dst);
  convert_typed<bf16, bf16>(src, dst);
}

// Temporary host memory (packed operands, oneDNN's scratchpad) from the caching allocator:
// no system call once warm, and counted under MemCategory::Other. Not a Tensor, which would
// cost a few heap allocations per call.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t nbytes) { reset(nbytes); }
  ~HostBuffer() { release(); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  char* reset(size_t nbytes) {
    release();
    if (nbytes) {
      ptr_ = allocator_for(DeviceType::CPU).allocate(nbytes, MemCategory::Other);
      nbytes_ = nbytes;
    }
    return static_cast<char*>(ptr_);
  }
  void* get() const { return ptr_; }

 private:
  void release() {
    if (nbytes_) allocator_for(DeviceType::CPU).deallocate(ptr_, nbytes_, MemCategory::Other);
    ptr_ = nullptr;
    nbytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
};

// v copied into the padded layout of padded_like, held by `storage`.
MatrixView padded(const MatrixView& v, HostBuffer& storage) {
  MatrixView d = padded_like(v);
  d.data = storage.reset(size_t(d.bs) * dtype_size(v.dtype));
  convert(v, d);
  return d;
}

// A dense copy of v in `dtype`, held by `storage`.
MatrixView packed(const MatrixView& v, DType dtype, HostBuffer& storage) {
  MatrixView d = dense_like(v, dtype);
  d.data = storage.reset(size_t(elements(d)) * dtype_size(dtype));
  convert(v, d);
  return d;
}

BiasView packed_bias(const BiasView& bias, DType dtype, HostBuffer& storage) {
  char* data = storage.reset(size_t(bias.n) * dtype_size(dtype));
  MatrixView src{bias.data, bias.dtype, 1, 1, bias.n, bias.n * bias.stride, 1, bias.stride};
  MatrixView dst{data, dtype, 1, 1, bias.n, bias.n, 1, 1};
  convert(src, dst);
  return BiasView{dst.data, dtype, bias.n, 1};
}

float load(const char* base, DType dtype, int64_t i) {
  return dtype == DType::F32 ? reinterpret_cast<const float*>(base)[i]
                             : to_f32(reinterpret_cast<const bf16*>(base)[i]);
}

void store(char* base, DType dtype, int64_t i, float x) {
  if (dtype == DType::F32) {
    reinterpret_cast<float*>(base)[i] = x;
  } else {
    reinterpret_cast<bf16*>(base)[i] = to_bf16(x);
  }
}

// K == 0: the product is empty, so out is the bias (or zero) on every row. Rare; scalar.
void fill_with_bias(const MatrixView& out, const BiasView& bias) {
  for (int64_t bi = 0; bi < out.batch; ++bi)
    for (int64_t m = 0; m < out.rows; ++m)
      for (int64_t n = 0; n < out.cols; ++n)
        store(out.data, out.dtype, bi * out.bs + m * out.rs + n * out.cs,
              bias.data ? load(bias.data, bias.dtype, n * bias.stride) : 0.0f);
}

// --- oneDNN primitives, cached per geometry ---

dnnl::memory::data_type dnnl_type(DType dtype) {
  return dtype == DType::F32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

struct PlanKey {
  std::array<int64_t, 15> v;
  bool operator==(const PlanKey& o) const { return v == o.v; }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int64_t x : k.v) {
      h ^= uint64_t(x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return size_t(h);
  }
};

PlanKey key_of(const Problem& p) {
  const int64_t dtypes = int64_t(p.a.dtype) | int64_t(p.out.dtype) << 8 |
                         (p.bias.data ? int64_t(p.bias.dtype) + 1 : 0) << 16;
  return PlanKey{{p.out.batch, p.a.batch, p.b.batch, p.a.rows, p.a.cols, p.b.cols, p.a.bs, p.a.rs,
                  p.a.cs, p.b.bs, p.b.rs, p.b.cs, p.out.bs, p.out.rs, dtypes}};
}

std::string describe(const Problem& p) {
  std::ostringstream os;
  auto one = [&](const char* name, const MatrixView& v) {
    os << name << " " << dtype_name(v.dtype) << shape_str({v.batch, v.rows, v.cols}) << " strides "
       << shape_str({v.bs, v.rs, v.cs}) << " ";
  };
  one("a", p.a);
  one("b", p.b);
  one("out", p.out);
  os << (p.bias.data ? "with bias" : "without bias");
  return os.str();
}

struct Plan {
  // No usable native kernel for these dtypes (bf16 on a CPU without one): widen to f32.
  bool widen = false;
  dnnl::matmul primitive;
  dnnl::memory::desc src_md, wei_md, bias_md, dst_md, scratch_md;
  size_t scratch_bytes = 0;
};

// One engine for the process. Leaked on purpose: primitives cached in a static map must not
// outlive the engine, and oneDNN's own statics may already be gone at exit.
const dnnl::engine& cpu_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// The geometry's primitive, created on first use. Creation happens under the lock, so two
// threads meeting a new shape create it once.
const Plan& shared_plan(const PlanKey& key, const Problem& p) {
  static std::mutex* mutex = new std::mutex;
  static auto* plans = new std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>;
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = plans->find(key);
  if (it != plans->end()) return *it->second;

  using dims = dnnl::memory::dims;
  auto plan = std::make_unique<Plan>();
  const MatrixView &a = p.a, &b = p.b, &out = p.out;
  plan->src_md =
      dnnl::memory::desc(dims{a.batch, a.rows, a.cols}, dnnl_type(a.dtype), dims{a.bs, a.rs, a.cs});
  plan->wei_md =
      dnnl::memory::desc(dims{b.batch, b.rows, b.cols}, dnnl_type(b.dtype), dims{b.bs, b.rs, b.cs});
  plan->dst_md = dnnl::memory::desc(dims{out.batch, out.rows, out.cols}, dnnl_type(out.dtype),
                                    dims{out.bs, out.rs, out.cs});
  if (p.bias.data) {
    plan->bias_md = dnnl::memory::desc(dims{1, 1, out.cols}, dnnl_type(p.bias.dtype),
                                       dims{out.cols, out.cols, 1});
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // ours comes from the allocator
  const bool is_bf16 = a.dtype == DType::BF16;
  try {
    dnnl::matmul::primitive_desc pd(cpu_engine(), plan->src_md, plan->wei_md, plan->bias_md,
                                    plan->dst_md, attr);
    const std::string impl = pd.impl_info_str();
    if (is_bf16 && impl.find("ref") != std::string::npos) {
      plan->widen = true;  // the reference kernel is a naive loop: f32 jit GEMM beats it
    } else {
      plan->primitive = dnnl::matmul(pd);
      plan->scratch_md = pd.scratchpad_desc();
      plan->scratch_bytes = plan->scratch_md.get_size();
    }
  } catch (const dnnl::error& e) {
    LOOM_CHECK(is_bf16) << "matmul: oneDNN has no kernel for " << describe(p) << ": " << e.what();
    plan->widen = true;  // no bf16 matmul on this CPU (oneDNN needs AVX-512 for it)
  }
  return *plans->emplace(key, std::move(plan)).first->second;
}

// A thread's handles for one geometry: the shared plan and memory objects whose data pointers
// are rebound on every call (memory objects are not safe to rebind from two threads at once).
struct Binding {
  const Plan* plan = nullptr;
  dnnl::memory src, wei, bias, dst, scratch;
};

Binding& binding_for(const PlanKey& key, const Problem& p) {
  thread_local std::unordered_map<PlanKey, Binding, PlanKeyHash> bindings;
  auto it = bindings.find(key);
  if (it != bindings.end()) return it->second;
  Binding bind;
  bind.plan = &shared_plan(key, p);
  if (!bind.plan->widen) {
    const Plan& plan = *bind.plan;
    const dnnl::engine& engine = cpu_engine();
    bind.src = dnnl::memory(plan.src_md, engine, DNNL_MEMORY_NONE);
    bind.wei = dnnl::memory(plan.wei_md, engine, DNNL_MEMORY_NONE);
    bind.dst = dnnl::memory(plan.dst_md, engine, DNNL_MEMORY_NONE);
    if (p.bias.data) bind.bias = dnnl::memory(plan.bias_md, engine, DNNL_MEMORY_NONE);
    if (plan.scratch_bytes) bind.scratch = dnnl::memory(plan.scratch_md, engine, DNNL_MEMORY_NONE);
  }
  return bindings.emplace(key, std::move(bind)).first->second;
}

// One stream per thread: oneDNN streams are not meant to be shared by concurrent callers, and
// a CPU stream is only a handle (execution is synchronous), so this costs nothing.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

void execute(Binding& bind, const Problem& p) {
  const Plan& plan = *bind.plan;
  HostBuffer scratch(plan.scratch_bytes);
  bind.src.set_data_handle(p.a.data);
  bind.wei.set_data_handle(p.b.data);
  bind.dst.set_data_handle(p.out.data);
  // The C API takes the arguments as an array; the C++ one would build a hash map per call.
  dnnl_exec_arg_t args[5];
  int n = 0;
  args[n++] = {DNNL_ARG_SRC, bind.src.get()};
  args[n++] = {DNNL_ARG_WEIGHTS, bind.wei.get()};
  args[n++] = {DNNL_ARG_DST, bind.dst.get()};
  if (p.bias.data) {
    bind.bias.set_data_handle(p.bias.data);
    args[n++] = {DNNL_ARG_BIAS, bind.bias.get()};
  }
  if (plan.scratch_bytes) {
    bind.scratch.set_data_handle(scratch.get());
    args[n++] = {DNNL_ARG_SCRATCHPAD, bind.scratch.get()};
  }
  dnnl::stream& stream = thread_stream();
  dnnl_status_t status = dnnl_primitive_execute(plan.primitive.get(), stream.get(), n, args);
  if (status == dnnl_success) status = dnnl_stream_wait(stream.get());
  LOOM_CHECK(status == dnnl_success)
      << "matmul: oneDNN failed (status " << int(status) << ") on " << describe(p);
}

void run(const Problem& p);

// bf16 without a native kernel: widen to f32, multiply, round the output back to bf16.
void run_widened(const Problem& p) {
  HostBuffer a32_storage, b32_storage, bias32_storage, out32_storage;
  Problem q;
  q.a = packed(p.a, DType::F32, a32_storage);
  q.b = packed(p.b, DType::F32, b32_storage);
  if (p.bias.data) q.bias = packed_bias(p.bias, DType::F32, bias32_storage);
  q.out = p.out;
  if (p.out.dtype != DType::F32) {
    q.out = dense_like(p.out, DType::F32);
    q.out.data = out32_storage.reset(size_t(elements(q.out)) * sizeof(float));
  }
  run(q);
  if (p.out.dtype != DType::F32) convert(q.out, p.out);
}

// Some products run faster cut into chunks of 256 output rows or columns that the threads
// take in turn, each chunk one sequential oneDNN call (oneDNN runs sequentially inside our
// parallel region), than as one call that oneDNN threads itself. Measured in one process,
// alternating, against one oneDNN call (median of 8-12):
//   rows: a narrow output (128-256 columns) with many rows: x1.19-1.26 on 12544 x 1024 @
//     1024 x 256 and 12544 x 768 @ 768 x 256 (DiT-small's fc2 forward, fc1 and qkv input
//     gradients), x1.13 on 12544 x 256 @ 256 x 256, x1.12 with 128 columns; but x0.80-0.99
//     with 768-1536 columns (at the GEMM ceiling already) or 64 and fewer.
//   columns: a wide output (at least 1024 columns) with few rows (at most 512): x1.25 on
//     256 x 768 @ 768 x 3072 (GPT-2's fc1), x1.31 on its vocabulary head (50304 columns),
//     x1.03-1.17 with 2304 columns; but x0.7-0.8 with 4096 rows.
// Training steps (median of 5-6 alternating rounds): DiT-small x1.057 from the row chunks,
// GPT-2 124M x1.059 from the column chunks.
// One piece of a product cut up below, run sequentially on the calling thread (oneDNN inside our
// parallel region), with its own cached primitive: pieces differ in shape and offsets only.
void execute_part(Problem part) {
  canonicalize(part.a, true);
  canonicalize(part.b, true);
  canonicalize(part.out, false);
  const PlanKey key = key_of(part);
  execute(binding_for(key, part), part);
}

// An exception cannot leave an OpenMP region: the first one is kept and rethrown after it.
void keep_first_error(std::exception_ptr& error) {
#pragma omp critical(loom_matmul_error)
  if (!error) error = std::current_exception();
}

enum class Chunks { None, Rows, Cols };
constexpr int64_t kChunk = 256;

Chunks chunking(const Problem& p) {
  if (p.a.dtype != DType::F32 || p.out.batch != 1 || omp_in_parallel() || omp_get_max_threads() < 2)
    return Chunks::None;
  const int64_t m = p.out.rows, n = p.out.cols, k = p.a.cols;
  if (n >= 128 && n <= 256 && m >= 8 * kChunk) return Chunks::Rows;
  if (m <= 512 && n >= 4 * kChunk && m * n * k >= (int64_t(1) << 26)) return Chunks::Cols;
  return Chunks::None;
}

void run_in_chunks(const Problem& p, Chunks along) {
  const bool rows = along == Chunks::Rows;
  const int64_t extent = rows ? p.out.rows : p.out.cols;
  const int64_t chunks = (extent + kChunk - 1) / kChunk;
  const int64_t in_elem = int64_t(dtype_size(p.a.dtype)),
                out_elem = int64_t(dtype_size(p.out.dtype));
  std::exception_ptr error;
  // Dynamic: a thread slowed by the machine's other load takes fewer chunks.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    try {
      Problem part = p;
      const int64_t first = c * kChunk, size = std::min(kChunk, extent - first);
      if (rows) {
        part.a.rows = part.out.rows = size;
        part.a.data += first * p.a.rs * in_elem;
        part.out.data += first * p.out.rs * out_elem;
      } else {
        part.b.cols = part.out.cols = size;
        part.b.data += first * p.b.cs * in_elem;
        part.out.data += first * p.out.cs * out_elem;
        if (p.bias.data) {
          part.bias.n = size;
          part.bias.data += first * p.bias.stride * int64_t(dtype_size(p.bias.dtype));
        }
      }
      execute_part(part);
    } catch (...) {
      keep_first_error(error);
    }
  }
  if (error) std::rethrow_exception(error);
}

// A product whose inner dimension is long next to its output (K at least 8 x M and 8 x N: the
// weight gradients, summed over every token) is split along K between the threads: each
// multiplies its share of K sequentially, the first into out (with the bias), the others into
// buffers of their own, which are then added to out. Measured in one process, alternating,
// against one oneDNN call: x1.03-1.15 (median of 8) on DiT-small's four weight gradients
// (K = 12544 tokens, M x N of 256-1024 x 256-1024), x1.05-1.17 on the small GPT's projection
// and head; shapes with K under 4 x max(M, N) gain nothing. The bits depend on the thread count.
bool split_inner_dim(const Problem& p) {
  const int64_t m = p.out.rows, n = p.out.cols, k = p.a.cols;
  return p.a.dtype == DType::F32 && p.out.dtype == DType::F32 && p.out.batch == 1 &&
         k >= 8 * std::max(m, n) && m * n * k >= (int64_t(1) << 26) && !omp_in_parallel() &&
         omp_get_max_threads() > 1;
}

void run_in_inner_parts(const Problem& p) {
  const int threads = omp_get_max_threads();
  const int64_t m = p.out.rows, n = p.out.cols, k = p.a.cols;
  const int64_t elem = int64_t(dtype_size(p.a.dtype));
  HostBuffer partial_storage(size_t(threads - 1) * size_t(m * n) * sizeof(float));
  float* partials = reinterpret_cast<float*>(partial_storage.get());
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    // The runtime may grant fewer threads than asked for: the team splits K.
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    try {
      const int64_t k0 = k * t / team, k1 = k * (t + 1) / team;
      Problem part = p;
      part.a.data += k0 * p.a.cs * elem;
      part.a.cols = k1 - k0;
      part.b.data += k0 * p.b.rs * elem;
      part.b.rows = k1 - k0;
      if (t > 0) {
        part.out = MatrixView{
            reinterpret_cast<char*>(partials + (t - 1) * m * n), DType::F32, 1, m, n, m * n, n, 1};
        part.bias = BiasView{};
      }
      execute_part(part);
    } catch (...) {
      keep_first_error(error);
    }
    // Every thread reaches the barrier, a failed one too, or the others would wait forever.
#pragma omp barrier
    if (!error) {
      float* out = reinterpret_cast<float*>(p.out.data);
#pragma omp for
      for (int64_t i = 0; i < m; ++i) {
        float* row = out + i * p.out.rs;
        for (int u = 1; u < team; ++u) {
          const float* part_row = partials + (u - 1) * m * n + i * n;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) row[j] += part_row[j];
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

void run(const Problem& p) {
  // Operands oneDNN cannot address in place are packed; the key describes them as packed.
  const bool pack_a = !addressable(p.a), pack_b = !addressable(p.b);
  const bool pad_a = !pack_a && aliases_cache_sets(p.a, p.b.cols);
  const bool pad_b = !pack_b && aliases_cache_sets(p.b, p.a.rows);
  const bool pack_bias = p.bias.data && p.bias.stride != 1 && p.bias.n > 1;
  Problem q = p;
  if (pack_a) q.a = dense_like(p.a, p.a.dtype);
  if (pack_b) q.b = dense_like(p.b, p.b.dtype);
  if (pad_a) q.a = padded_like(p.a);
  if (pad_b) q.b = padded_like(p.b);
  if (pack_bias) q.bias.stride = 1;
  const Chunks chunks = chunking(q);
  const bool split = chunks == Chunks::None && split_inner_dim(q);
  Binding* bind = nullptr;
  if (chunks == Chunks::None && !split) {
    bind = &binding_for(key_of(q), q);
    if (bind->plan->widen) return run_widened(p);
  }

  HostBuffer a_storage, b_storage, bias_storage;
  if (pack_a) q.a = packed(p.a, p.a.dtype, a_storage);
  if (pack_b) q.b = packed(p.b, p.b.dtype, b_storage);
  if (pad_a) q.a = padded(p.a, a_storage);
  if (pad_b) q.b = padded(p.b, b_storage);
  if (pack_bias) q.bias = packed_bias(p.bias, p.bias.dtype, bias_storage);
  if (chunks != Chunks::None) return run_in_chunks(q, chunks);
  if (split) return run_in_inner_parts(q);
  execute(*bind, q);
}

}  // namespace

void cpu::gemm(MatrixView a, MatrixView b, MatrixView out) {
  Problem p;
  p.a = a, p.b = b, p.out = out;
  canonicalize(p.a, true);
  canonicalize(p.b, true);
  canonicalize(p.out, false);
  run(p);
}

bool cpu::native_bf16_gemm() {
  static const bool native = [] {
    MatrixView a{nullptr, DType::BF16, 1, 32, 32, 1024, 32, 1};
    MatrixView out{nullptr, DType::F32, 1, 32, 32, 1024, 32, 1};
    Problem p;
    p.a = p.b = a, p.out = out;
    return !shared_plan(key_of(p), p).widen;
  }();
  return native;
}

int64_t CpuBackend::gemm_operand_row_stride(int64_t rows, int64_t cols, DType dtype) {
  // Rows of the matrix are the leading dimension both ways it is used (as is, transposed);
  // the product's other side is at least as long as `rows` in the layers this serves.
  return ld_aliases(cols, dtype, rows * cols, rows) ? cols + kLeadingDimPadding : cols;
}

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const MatmulDims d = check_matmul(a, b, out);
  const int64_t batch = d.batch, m = d.m, k = d.k, n = d.n;
  LOOM_CHECK(a.dtype() == DType::F32 || a.dtype() == DType::BF16)
      << "matmul: " << dtype_name(a.dtype()) << " operands are not supported on the CPU (f32 or "
      << "bf16; a " << a.shape() << ", b " << b.shape() << ")";
  LOOM_CHECK(out.dtype() == DType::F32 || out.dtype() == a.dtype())
      << "matmul: out " << out.shape() << " is " << dtype_name(out.dtype()) << "; expected f32 or "
      << dtype_name(a.dtype()) << " like the operands";
  const bool cpu_only = a.device().type == DeviceType::CPU && b.device().type == DeviceType::CPU &&
                        out.device().type == DeviceType::CPU &&
                        (!bias.defined() || bias.device().type == DeviceType::CPU);
  LOOM_CHECK(cpu_only) << "matmul: the CPU kernel got a tensor on another device (a "
                       << a.device().str() << ", b " << b.device().str() << ", out "
                       << out.device().str() << ")";

  Problem p;
  p.a = view_of(a);
  p.b = view_of(b);
  p.out = view_of(out);
  if (bias.defined()) {
    LOOM_CHECK(bias.dim() == 1 && bias.shape()[0] == n)
        << "matmul: bias " << bias.shape() << " does not match out " << out.shape()
        << " (expected (" << n << "))";
    LOOM_CHECK(bias.dtype() == out.dtype() || bias.dtype() == DType::F32)
        << "matmul: bias is " << dtype_name(bias.dtype()) << "; expected f32 or "
        << dtype_name(out.dtype()) << " like out " << out.shape();
    p.bias = BiasView{static_cast<char*>(bias.data_ptr()), bias.dtype(), n, bias.strides()[0]};
  }
  if (batch == 0 || m == 0 || n == 0) return;
  canonicalize(p.a, true);
  canonicalize(p.b, true);
  canonicalize(p.out, false);
  LOOM_CHECK(p.out.cs == 1 && addressable(p.out))
      << "matmul: out " << out.shape() << " with strides " << out.strides()
      << " must be row-major in its last two dims, with no overlapping elements";
  if (k == 0) return fill_with_bias(p.out, p.bias);

  if (p.a.batch > 1 || p.b.batch > 1 || batch == 1) return run(p);

  // Both operands broadcast: every output matrix is the same product; compute it once.
  Problem first = p;
  first.out.batch = 1;
  canonicalize(first.out, false);
  run(first);
  const int64_t elem = int64_t(dtype_size(out.dtype()));
  for (int64_t bi = 1; bi < batch; ++bi)
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(p.out.data + (bi * p.out.bs + r * p.out.rs) * elem,
                  p.out.data + r * p.out.rs * elem, size_t(n * elem));
}

}  // namespace loom
