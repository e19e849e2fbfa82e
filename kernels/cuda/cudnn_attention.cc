// cuDNN's fused attention graphs (kernels/cuda/cudnn_attention.h). Our
// tensors are (B, T, H, D) row-major; cuDNN's graphs name dims (B, H, T, D),
// so each tensor is described by strides over our layout and nothing moves.
// The log-sum-exp (cuDNN's "Stats", natural log, of the scaled scores) is
// our lse (B, Hq, T), so a forward of either implementation pairs with a
// backward of the other.
#include "kernels/cuda/cudnn_attention.h"

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <compare>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/cuda/stream.h"
#include "core/device_work.h"
#include "core/logging.h"
#include "kernels/cuda/context.h"

// The frontend's dynamic loading resolves every cuDNN call through this
// handle, which the program that includes it defines and opens.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace tetra::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The graphs' tensors, named by uid when device pointers are bound.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct GraphKey {
  int64_t batch, seq, kv_seq, q_heads, kv_heads, qk_dim, v_dim;  // kv_seq: AttentionShape::keys()
  float scale;                                                   // AttentionShape::scale()
  bool causal;
  bool backward;
  bool deterministic;  // the backward's algorithm (true for every forward)
  auto operator<=>(const GraphKey&) const = default;
};

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN has no engine for the key
  int64_t workspace_bytes = 0;
};

// cuDNN's handle for this process's GPU, or null where cuDNN is turned off
// or cannot be loaded or started (said once, with the reason).
cudnnHandle_t Load() {
  const char* setting = std::getenv("TETRA_CUDNN_ATTENTION");
  if (setting != nullptr && std::string(setting) == "0") {
    TETRA_LOG() << "TETRA_CUDNN_ATTENTION=0: attention runs on tetra's own CUDA kernel";
    return nullptr;
  }
  const char* fallback = "attention runs on tetra's own CUDA kernel, several times slower";
  // The frontend opens a CUDA runtime of its own, the first of several
  // majors it finds: point it at the one tetra is linked against (unless the
  // user already chose).
  const std::string runtime = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", runtime.c_str(), /*overwrite=*/0);
  fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
  if (fe::cudnn_dlhandle == nullptr) {
    TETRA_LOG() << "warning: libcudnn.so.9 cannot be loaded (" << dlerror() << "): " << fallback
                << "; install cuDNN 9 (e.g. `pip install nvidia-cudnn-cu13`) and put its lib "
                   "directory on LD_LIBRARY_PATH";
    return nullptr;
  }
  cudnnHandle_t handle = nullptr;
  try {
    const cudnnStatus_t status = fe::detail::create_handle(&handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      TETRA_LOG() << "warning: cudnnCreate failed (" << fe::detail::get_error_string(status)
                  << "): " << fallback;
      return nullptr;
    }
  } catch (const std::exception& e) {  // the frontend throws when a cuDNN symbol is missing
    TETRA_LOG() << "warning: the libcudnn.so.9 found cannot start (" << e.what()
                << "): " << fallback;
    return nullptr;
  }
  return handle;
}

cudnnHandle_t Handle() {
  static const cudnnHandle_t handle = Load();
  return handle;
}

// A (B, T, H, D) row-major tensor as cuDNN's (B, H, T, D).
fe::graph::Tensor_attributes Bthd(const char* name, Uid uid, int64_t b, int64_t t, int64_t h,
                                  int64_t d) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({b, h, t, d})
      .set_stride({t * h * d, d, h * d, 1});
}

void MarkOutput(const TensorAttr& tensor, const fe::graph::Tensor_attributes& like) {
  tensor->set_output(true)
      .set_uid(like.get_uid())
      .set_dim(like.get_dim())
      .set_stride(like.get_stride());
}

// The log-sum-exp (B, Hq, T) fp32.
fe::graph::Tensor_attributes Stats(const GraphKey& k) {
  return fe::graph::Tensor_attributes()
      .set_name("lse")
      .set_uid(kStats)
      .set_dim({k.batch, k.q_heads, k.seq, 1})
      .set_stride({k.q_heads * k.seq, k.seq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

std::shared_ptr<fe::graph::Graph> Describe(const GraphKey& k) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const TensorAttr q = graph->tensor(Bthd("q", kQ, k.batch, k.seq, k.q_heads, k.qk_dim));
  const TensorAttr key = graph->tensor(Bthd("k", kK, k.batch, k.kv_seq, k.kv_heads, k.qk_dim));
  const TensorAttr v = graph->tensor(Bthd("v", kV, k.batch, k.kv_seq, k.kv_heads, k.v_dim));
  const auto out_like = Bthd("out", kO, k.batch, k.seq, k.q_heads, k.v_dim);
  if (!k.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("attention")
                       .set_generate_stats(true)
                       .set_causal_mask(k.causal)
                       .set_attn_scale(k.scale);
    auto [out, stats] = graph->sdpa(q, key, v, options);
    MarkOutput(out, out_like);
    const auto stats_like = Stats(k);
    stats->set_output(true)
        .set_uid(kStats)
        .set_dim(stats_like.get_dim())
        .set_stride(stats_like.get_stride())
        .set_data_type(fe::DataType_t::FLOAT);
    return graph;
  }
  const TensorAttr out = graph->tensor(out_like);
  const TensorAttr dout = graph->tensor(Bthd("dout", kDO, k.batch, k.seq, k.q_heads, k.v_dim));
  const TensorAttr stats = graph->tensor(Stats(k));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(k.causal)
                     .set_attn_scale(k.scale)
                     .set_deterministic_algorithm(k.deterministic);
  auto [dq, dk, dv] = graph->sdpa_backward(q, key, v, out, dout, stats, options);
  MarkOutput(dq, Bthd("dq", kDQ, k.batch, k.seq, k.q_heads, k.qk_dim));
  MarkOutput(dk, Bthd("dk", kDK, k.batch, k.kv_seq, k.kv_heads, k.qk_dim));
  MarkOutput(dv, Bthd("dv", kDV, k.batch, k.kv_seq, k.kv_heads, k.v_dim));
  return graph;
}

// The graph for `key`, built and planned, or why cuDNN cannot run it.
CachedGraph Build(const GraphKey& key, std::string* why) {
  try {
    std::shared_ptr<fe::graph::Graph> graph = Describe(key);
    const cudnnHandle_t handle = Handle();
    CachedGraph built{.graph = graph};
    fe::error_t status = graph->build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
    if (status.is_good()) status = graph->get_workspace_size(built.workspace_bytes);
    if (status.is_bad()) {
      *why = status.get_message();
      return {};
    }
    return built;
  } catch (const std::exception& e) {  // the frontend throws when a cuDNN symbol is missing
    *why = e.what();
    return {};
  }
}

struct Built {
  CachedGraph graph;
  std::string why;  // why cuDNN has no engine, when graph.graph is null
};

// The cached graph for `key` (built on first use), or why cuDNN cannot run it.
const Built& Graph(const GraphKey& key) {
  static std::mutex mutex;
  static std::map<GraphKey, Built> graphs;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = graphs.find(key);
  if (it != graphs.end()) return it->second;
  Built built;
  built.graph = Build(key, &built.why);
  return graphs.emplace(key, std::move(built)).first->second;
}

bool Eligible(const Tensor& t, DType dtype) {
  return t.device() == DeviceType::kCUDA && t.dtype() == dtype &&
         reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
}

// The graph to run (the deterministic backward first, else cuDNN's
// non-deterministic one, said once per shape), or null with *why set when
// these tensors must go elsewhere.
const CachedGraph* Usable(const AttentionShape& s, bool backward, const Tensor& lse,
                          std::initializer_list<const Tensor*> bf16, std::string* why) {
  if (!CudnnLoaded()) {
    *why = "cuDNN is not loaded (the log says why)";
    return nullptr;
  }
  if (!Eligible(lse, DType::kF32)) {
    *why = "cuDNN's fused attention takes a 16-byte aligned fp32 lse";
    return nullptr;
  }
  for (const Tensor* t : bf16) {
    if (!Eligible(*t, DType::kBF16)) {
      *why = "cuDNN's fused attention takes 16-byte aligned bf16 tensors";
      return nullptr;
    }
  }
  const int64_t v_dim = s.value_dim();
  if (s.head_dim % 8 != 0 || v_dim % 8 != 0) {
    *why = "cuDNN's fused attention takes head dims that are multiples of 8";
    return nullptr;
  }
  GraphKey key{.batch = s.batch,
               .seq = s.seq,
               .kv_seq = s.keys(),
               .q_heads = s.q_heads,
               .kv_heads = s.kv_heads,
               .qk_dim = s.head_dim,
               .v_dim = v_dim,
               .scale = s.scale(),
               .causal = s.causal,
               .backward = backward,
               .deterministic = true};
  const Built* built = &Graph(key);
  if (built->graph.graph == nullptr && backward) {
    const std::string deterministic_why = built->why;
    key.deterministic = false;
    built = &Graph(key);
    if (built->graph.graph != nullptr) {
      static std::mutex mutex;
      static std::map<GraphKey, bool> said;
      std::lock_guard<std::mutex> lock(mutex);
      if (!said[key]) {
        said[key] = true;
        TETRA_LOG() << "warning: cuDNN has no deterministic attention backward for B " << s.batch
                    << " T " << s.seq << " Tk " << s.keys() << " Hq " << s.q_heads << " Hkv "
                    << s.kv_heads << " D " << s.head_dim << "/" << v_dim << " ("
                    << deterministic_why
                    << "): its non-deterministic one runs (gradients may differ in the last bits "
                       "from run to run)";
      }
    }
  }
  if (built->graph.graph == nullptr) {
    *why = "cuDNN has no engine for it: " + built->why;
    return nullptr;
  }
  return &built->graph;
}

void Execute(const CachedGraph& graph, std::unordered_map<int64_t, void*> pointers) {
  const cudnnHandle_t handle = Handle();
  TETRA_CHECK(fe::detail::set_stream(handle, CurrentStream()) == CUDNN_STATUS_SUCCESS);
  void* workspace = graph.workspace_bytes > 0 ? Scratch(graph.workspace_bytes) : nullptr;
  CountDeviceWork(DeviceWork::kLaunch);
  fe::error_t status = graph.graph->execute(handle, pointers, workspace);
  TETRA_CHECK(status.is_good()) << "cuDNN attention failed to launch: " << status.get_message();
}

}  // namespace

bool CudnnLoaded() { return Handle() != nullptr; }

bool CudnnAttention(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& out, const Tensor& lse, std::string* why) {
  const CachedGraph* graph = Usable(shape, /*backward=*/false, lse, {&q, &k, &v, &out}, why);
  if (graph == nullptr) return false;
  Execute(*graph,
          {{kQ, q.raw()}, {kK, k.raw()}, {kV, v.raw()}, {kO, out.raw()}, {kStats, lse.raw()}});
  return true;
}

bool CudnnAttentionBackward(const AttentionShape& shape, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            std::string* why) {
  const CachedGraph* graph =
      Usable(shape, /*backward=*/true, lse, {&dout, &q, &k, &v, &out, &dq, &dk, &dv}, why);
  if (graph == nullptr) return false;
  Execute(*graph, {{kQ, q.raw()},
                   {kK, k.raw()},
                   {kV, v.raw()},
                   {kO, out.raw()},
                   {kStats, lse.raw()},
                   {kDO, dout.raw()},
                   {kDQ, dq.raw()},
                   {kDK, dk.raw()},
                   {kDV, dv.raw()}});
  return true;
}

}  // namespace tetra::cuda
