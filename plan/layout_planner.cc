#include "plan/layout_planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/model_dims.h"
#include "observe/flops.h"
#include "parallel/gradient_reducer.h"
#include "pipeline/schedule_checker.h"
#include "pipeline/stage_partition.h"
#include "plan/layout_rules.h"

namespace tetra {
namespace {

// A model's shape, in parameters (observe/flops.h's counts) and activation elements.
struct ModelShape {
  double c, q, kv, vocab;
  ModelConfig model;         // for the padded vocabulary's rows under each tp (PaddedVocabSize)
  int layers, dense_layers;  // the first `dense_layers` have a dense MLP, the rest MoE
  bool moe;
  double attention;  // q, k, v, o projections (MLA: all its projections and latent norms)
  // Of `attention`, what every tensor-parallel rank holds whole: MLA's down
  // projections (q_a_proj, kv_a_proj_with_mqa) and latent norms; 0 for Llama.
  double attention_whole;
  // Activation elements per token the attention keeps for its backward, split
  // over tp (heads) and whole on every rank (MLA's latents and their norms).
  double attention_saved, attention_saved_whole;
  double attention_width;  // head dims of the scores' and values' products (observe/flops.cc)
  double norms;            // two RMSNorm weights
  double dense_mlp;        // gate, up, down
  double router, routed, shared;  // per MoE layer: all routed experts, the shared ones
  double active_moe_mlp;          // per token: router + shared + k routed experts
  int k, experts;
  double moe_intermediate;
  // Multi-token prediction on the last stage: depths, each a layer of the
  // MoE kind in an MoE model, and eh_proj with the three norms (whole on
  // every tensor-parallel rank, as norms are).
  int mtp;
  bool mtp_moe;
  double mtp_join;
};

ModelShape ShapeOf(const ModelConfig& m) {
  const ParameterCounts p = CountParameters(m);
  ModelShape s;
  s.c = m.hidden_size();
  s.q = double{1.0} * m.num_attention_heads() * HeadDim(m);
  s.kv = double{1.0} * KeyValueHeads(m) * HeadDim(m);
  s.vocab = m.vocab_size();
  s.model = m;
  s.layers = p.layers;
  s.moe = p.moe_layers > 0;
  s.dense_layers = p.layers - p.moe_layers;
  s.attention = p.attention;
  s.attention_whole = 0;
  s.attention_saved = 2 * s.q + 2 * s.kv;  // q, attention output; k, v
  s.attention_saved_whole = 0;
  s.attention_width = s.q;
  if (UsesMla(m)) {
    // MlaAttentionLayer: H heads of D = qk_nope + qk_rope (q, k) and Dv (v,
    // the attention output), latents of Rq (0: a plain q_proj) and L.
    const double h = m.num_attention_heads(), d = QkHeadDim(m), dv = m.v_head_dim();
    const double rq = m.q_lora_rank(), l = m.kv_lora_rank();
    s.attention_whole = (rq > 0 ? s.c * rq + rq : 0) + s.c * (l + m.qk_rope_head_dim()) + l;
    // q_latent, q_normed, kv_latent, kv_normed; q, k, v, attention output and lse.
    s.attention_saved_whole = 2 * rq + 2 * l;
    s.attention_saved = 2 * h * d + 2 * h * dv + h;
    s.attention_width = h * (d + dv) / 2;
  }
  s.norms = p.norms;
  s.dense_mlp = p.dense_mlp;
  const bool any_moe = s.moe || (p.mtp_depths > 0 && p.mtp_moe);
  s.experts = any_moe ? m.moe().n_routed_experts() : 0;
  s.k = any_moe ? m.moe().num_experts_per_tok() : 0;
  s.moe_intermediate = any_moe ? m.moe().moe_intermediate_size() : 0;
  s.router = p.router;
  s.routed = p.routed_experts;
  s.shared = p.shared_experts;
  s.active_moe_mlp = p.active_moe_mlp;
  s.mtp = p.mtp_depths;
  s.mtp_moe = p.mtp_moe;
  s.mtp_join = p.mtp_join;
  return s;
}

// Activation elements per token of one layer that its backward reads, on one
// of tp ranks: the two norm inputs, the attention input, q/k/v and the
// attention output (MLA: also its latents and lse), the MLP input and its
// hidden products (SwiGLU: gate, up, their product, which selective
// recompute does not keep); an MoE layer's experts see each token k times
// plus the shared experts, and its dispatch keeps the permuted tokens (in and
// out) and the router scores. Sequence parallelism (tp > 1) splits all of it
// over tp but MLA's latents, which every rank computes whole from the
// gathered input.
double LayerActivations(const ModelShape& s, bool moe_layer, int tp, bool selective) {
  const double common = 4 * s.c + s.attention_saved;
  const double products = selective ? 2 : 3;  // per MLP feature: gate, up (, act)
  double split;
  if (!moe_layer) {
    split = common + products * s.dense_mlp / (3 * s.c);
  } else {
    const double shared_experts = s.shared / (3 * s.c * std::max(1.0, s.moe_intermediate));
    split =
        common + (s.k + shared_experts) * products * s.moe_intermediate + 2 * s.k * s.c + s.experts;
  }
  return split / tp + s.attention_saved_whole;
}

// Key and value elements per token on one of tp ranks, what the ring of
// context-parallel attention passes: its key-value heads' (MLA: its query
// heads' keys of qk_nope + qk_rope dims and values of v_head_dim).
double KeyValueWidth(const ModelShape& s, int tp) {
  const ModelConfig& m = s.model;
  if (UsesMla(m)) return double{1.0} * LocalQueryHeads(m, tp) * (QkHeadDim(m) + m.v_head_dim());
  return 2.0 * LocalKeyValueHeads(m, tp) * HeadDim(m);
}

// Elements per token of one layer, on one of tp ranks, that a schedule
// splitting the backward keeps from its B (input gradients: dX = dY W^T)
// until its W (weight gradients: dW = X^T dY, kernels/weight_gradients.h),
// besides the activations the layer stores anyway (alive until W):
//   - each linear's output gradient dY, as wide as its output: column-
//     parallel outputs (q, k, v or MLA's q_b, kv_b; gate, up; the experts'
//     gate, up) split over tp; row-parallel ones (o, down) c whole (the
//     backward gathers dY over the sequence-parallel ranks before both
//     products); MLA's down projections (q_a, kv_a) whole as their weights
//     are; an MoE layer's experts each of a token's k copies, the shared
//     experts' and the router's logits;
//   - the two RMSNorms' output gradients, c split over tp;
//   - what the backward recomputed and the W reads: under selective
//     recompute the SwiGLU products (the down projections' input). (Full
//     recompute does not run with a split backward: the trainer refuses it,
//     and the search does not propose it.)
// So about the layer's linear inputs again (for Llama the gradients 2c + q +
// 2kv + 2f and the norms' 2c, against the linears' inputs 2c + q + f).
double KeptForWeightGradients(const ModelShape& s, bool moe_layer, int tp,
                              Recompute::Value recompute) {
  const ModelConfig& m = s.model;
  double split = 2 * s.c, whole = 2 * s.c;  // the norms; o and down (the experts' below)
  if (UsesMla(m)) {
    const double h = m.num_attention_heads();
    split += h * QkHeadDim(m) + h * (m.qk_nope_head_dim() + m.v_head_dim());  // q_b (q_proj), kv_b
    whole += m.q_lora_rank() + m.kv_lora_rank() + m.qk_rope_head_dim();       // q_a, kv_a
  } else {
    split += s.q + 2 * s.kv;
  }
  double swiglu;  // the SwiGLU products per token: the down projections' input
  if (!moe_layer) {
    swiglu = s.dense_mlp / (3 * s.c);
    split += 2 * swiglu;  // gate, up; down's c is in `whole`
  } else {
    const double shared_experts = s.shared / (3 * s.c * std::max(1.0, s.moe_intermediate));
    const double copies = s.k + shared_experts;
    swiglu = copies * s.moe_intermediate;
    split += 2 * swiglu;
    whole +=
        (copies - 1) * s.c + s.experts;  // each copy's down output (one counted above), the router
  }
  return split / tp + whole + (recompute == Recompute::SELECTIVE ? swiglu / tp : 0);
}

// The schedule the estimate assumes on `mesh` (LayoutScheduleSpec), or 1F1B
// where the config's cannot run there (CheckLayoutRuns refuses such a
// layout; a caller may still ask).
ScheduleSpec PlannedSchedule(const TrainerConfig& config, const MeshShape& mesh) {
  if (absl::StatusOr<ScheduleSpec> spec = LayoutScheduleSpec(config, mesh); spec.ok()) return *spec;
  const TrainConfig& train = config.train();
  ScheduleSpec spec;
  spec.stages = mesh.pp;
  spec.micro_batches = static_cast<int>(
      std::max<int64_t>(1, train.global_batch_size() /
                               std::max<int64_t>(1, int64_t{train.micro_batch_size()} * mesh.dp)));
  return spec;
}

// Micro-batch chunks whose activations `spec` keeps at once on pipeline
// rank `rank`: the checker's bound, and never more than the step's m x v.
int ChunksInFlight(const ScheduleSpec& spec, int rank) {
  return std::min<int64_t>(ActivationBound(spec, rank),
                           int64_t{spec.micro_batches} * spec.virtual_stages);
}

// For a kind that SplitsBackward, the most micro-batch chunks a rank holds
// between B and W, counted along its table (+1 at each B, -1 at each W): in
// all, of the chunk with the first virtual stage (the embedding's, whose W
// reads the lookup's gradient) and of the one with the last (the head's,
// whose W reads the logits' gradient); 0 for the other kinds. (Rank r's
// count is r + 1 for both kinds.) It comes from the warm-up and cool-down,
// and the steady phase between them repeats blocks that leave it unchanged,
// so more than 4 pp micro-batches (enough for DualPipeV's 2 pp) are counted
// as 4 pp: the tables stay small whatever the batch.
struct PendingWeights {
  int chunks = 0, embedding_chunk = 0, head_chunk = 0;
};
std::vector<PendingWeights> PendingWeightChunks(ScheduleSpec spec) {
  std::vector<PendingWeights> peaks(spec.stages);
  if (!SplitsBackward(spec.kind)) return peaks;
  spec.micro_batches = std::min(spec.micro_batches, 4 * spec.stages);
  using Key = std::tuple<int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::vector<PendingWeights>>* cache =
      new std::map<Key, std::vector<PendingWeights>>;
  const Key key{static_cast<int>(spec.kind), spec.stages, spec.micro_batches, spec.virtual_stages};
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  const int last = spec.stages * spec.virtual_stages - 1;
  const absl::StatusOr<std::vector<std::vector<Action>>> tables = BuildAllSchedules(spec);
  // A spec the schedule cannot build: PlannedSchedule estimates 1F1B.
  for (int r = 0; tables.ok() && r < spec.stages; ++r) {
    int pending = 0, embedding = 0, head = 0;
    for (const Action& a : (*tables)[r]) {
      const int step = a.type == ActionType::kBackward ? 1 : a.type == ActionType::kWeight ? -1 : 0;
      pending += step;
      if (VirtualStage(spec, r, a.chunk) == 0) embedding += step;
      if (VirtualStage(spec, r, a.chunk) == last) head += step;
      peaks[r].chunks = std::max(peaks[r].chunks, pending);
      peaks[r].embedding_chunk = std::max(peaks[r].embedding_chunk, embedding);
      peaks[r].head_chunk = std::max(peaks[r].head_chunk, head);
    }
  }
  return (*cache)[key] = peaks;
}

// A micro-batch's tokens on one rank: T / cp of each of its sequences.
double RankTokens(const TrainConfig& train, const MeshShape& mesh) {
  return double{1.0} * train.micro_batch_size() * train.seq_length() / mesh.cp;
}

struct StageLayers {
  int dense = 0, moe = 0;
  bool embedding = false, head = false;
};

// Per-token weights touched (observe/flops.h's counts: 2x them is the
// forward's FLOPs) of decoder layer `layer`, and of what the first virtual
// stage adds (the embedding lookup: a row copy) and the last (the final
// norm, the LM head and each MTP depth: its join, its layer and the head again).
double LayerCost(const ModelShape& s, int layer) {
  return s.attention + s.norms + (layer < s.dense_layers ? s.dense_mlp : s.active_moe_mlp);
}
double EmbeddingCost(const ModelShape& s) { return s.c; }
double HeadCost(const ModelShape& s) {
  const double head = s.vocab * s.c + s.c;
  return head + s.mtp * (s.mtp_join + s.attention + s.norms +
                         (s.mtp_moe ? s.active_moe_mlp : s.dense_mlp) + head);
}

// The cost of each virtual stage (model order) holding `layers`.
std::vector<double> StageCosts(const ModelShape& s, const std::vector<int>& layers) {
  std::vector<double> costs;
  int first = 0;
  for (size_t v = 0; v < layers.size(); ++v) {
    double cost = v == 0 ? EmbeddingCost(s) : 0;
    if (v + 1 == layers.size()) cost += HeadCost(s);
    for (int i = first; i < first + layers[v]; ++i) cost += LayerCost(s, i);
    costs.push_back(cost);
    first += layers[v];
  }
  return costs;
}

// Megatron-LM's split of s.layers over `stages` virtual stages that balances
// them: the first stage's layers f and the last's l chosen (each 0 or more),
// the others m each, minimising the costliest stage; the first stage also
// runs the embedding, the last the head and any MTP depths, so with a large
// vocabulary or MTP the last takes fewer layers. f stays at most m: the
// first stage keeps the most micro-batches' activations in flight (1F1B: all
// pp) beside the embedding table. Of splits as costly, the most even one:
// the least sum of squared stage costs.
std::vector<int> BalancedStageLayers(const ModelShape& s, int stages) {
  if (stages == 1) return {s.layers};
  const int middle = stages - 2;
  std::vector<int> best;
  double best_cost = 0, best_squares = 0;
  for (int m = 0; middle == 0 ? m == 0 : m * middle <= s.layers; ++m) {
    const int rest = s.layers - m * middle;
    for (int f = 0; f <= std::min(rest, middle == 0 ? rest : m); ++f) {
      std::vector<int> layers(stages, m);
      layers.front() = f;
      layers.back() = rest - f;
      const std::vector<double> costs = StageCosts(s, layers);
      const double cost = *std::max_element(costs.begin(), costs.end());
      double squares = 0;
      for (double c : costs) squares += c * c;
      if (best.empty() || cost < best_cost || (cost == best_cost && squares < best_squares)) {
        best = layers;
        best_cost = cost;
        best_squares = squares;
      }
    }
  }
  return best;
}

// The layers of each virtual stage of `spec` (model order): the config's own
// split where it has one for this pipeline (PartitionStages), else the
// balanced one.
std::vector<int> PlannedStageLayers(const TrainerConfig& config, const ModelShape& s,
                                    const ScheduleSpec& spec) {
  const ParallelConfig& p = config.parallel();
  if (p.pipeline() == spec.stages && p.virtual_stages() == spec.virtual_stages) {
    if (absl::StatusOr<StagePartition> own = PartitionStages(config); own.ok()) {
      std::vector<int> layers;
      for (const PipelineStage& stage : own->stages) layers.push_back(stage.num_layers);
      return layers;
    }
  }
  return BalancedStageLayers(s, spec.stages * spec.virtual_stages);
}

// What each pipeline rank holds: the layers of its chunks (DualPipeV's in a
// V, rank 0 holding the first and the last virtual stage; else
// interleaved), the embedding with virtual stage 0, the head with the last.
std::vector<StageLayers> Stages(const ModelShape& s, const ScheduleSpec& spec,
                                const std::vector<int>& layers) {
  const StagePlacement placement = spec.kind == ScheduleKind::kDualPipeV
                                       ? StagePlacement::kVShape
                                       : StagePlacement::kInterleaved;
  std::vector<StageLayers> stages(spec.stages);
  int first = 0;
  for (size_t v = 0; v < layers.size(); ++v) {
    StageLayers& st =
        stages[LocateVirtualStage(static_cast<int>(v), spec.stages, placement).pp_rank];
    const int dense = std::max(0, std::min(first + layers[v], s.dense_layers) - first);
    st.dense += dense;
    st.moe += layers[v] - dense;
    st.embedding = st.embedding || v == 0;
    st.head = st.head || v + 1 == layers.size();
    first += layers[v];
  }
  return stages;
}

DeviceParameters StageParameters(const ModelShape& s, const StageLayers& st, const PlanLayout& l) {
  DeviceParameters p;
  const int layers = st.dense + st.moe;
  // Matrices split over tp; norms, the router and MLA's down projections replicated.
  const double attention = (s.attention - s.attention_whole) / l.mesh.tp + s.attention_whole;
  p.dense = layers * (attention + s.norms) + st.dense * s.dense_mlp / l.mesh.tp +
            st.moe * (s.shared / l.mesh.tp + s.router);
  p.expert = st.moe * s.routed / (l.mesh.ep * l.mesh.tp);
  // The embedding and the head hold the padded vocabulary's rows.
  const double vocab_rows = static_cast<double>(PaddedVocabSize(s.model, l.mesh.tp)) / l.mesh.tp;
  if (st.embedding) p.dense += vocab_rows * s.c;
  if (st.head) {
    p.dense += vocab_rows * s.c + s.c;
    // The prediction depths, and their own copy of the input table where it
    // lives on another stage and is not the head's already.
    p.dense += s.mtp * (attention + s.norms + s.mtp_join +
                        (s.mtp_moe ? s.shared / l.mesh.tp + s.router : s.dense_mlp / l.mesh.tp));
    p.expert += s.mtp_moe ? s.mtp * s.routed / (l.mesh.ep * l.mesh.tp) : 0;
    if (s.mtp > 0 && !st.embedding && !s.model.tie_word_embeddings()) p.dense += vocab_rows * s.c;
  }
  return p;
}

// Ring collectives over n ranks.
double AllReduceSeconds(double bytes, int n, double gbps, double latency_us) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / (gbps * 1e9) + 2.0 * (n - 1) * latency_us * 1e-6;
}
double AllToAllSeconds(double bytes, int n, double gbps, double latency_us) {
  if (n <= 1) return 0;
  return 1.0 * (n - 1) / n * bytes / (gbps * 1e9) + (n - 1) * latency_us * 1e-6;
}

// What one rank gets of its node: all of a device, or with shared_compute
// a share of the node's cores (proto/cluster.proto).
struct SharedNode {
  double compute_share = 1, memory_share = 1, peak_share = 1;
  int ranks = 1, cores = 1;
  bool shared = false;
  // Fraction of the bubble the node spends idle: a device idles through it;
  // shared cores idle only when fewer ranks than cores still have work.
  double idle_in_bubble(int pp) const {
    if (!shared) return 1;
    const double busy_ranks = ranks - double{1.0} * ranks / pp;  // all stages but one
    return std::max(0.0, 1 - busy_ranks / cores);
  }
};

SharedNode SharedNodeFor(const ClusterConfig& c, int world) {
  SharedNode node;
  if (!c.shared_compute()) return node;
  node.shared = true;
  node.ranks = std::min(world, c.devices_per_node());
  node.cores = std::max(1, c.cores_per_node());
  node.peak_share = 1.0 / node.ranks;
  node.memory_share = 1.0 / node.ranks;
  if (node.ranks >= node.cores) {
    node.compute_share = 1.0 / node.ranks;
  } else {
    const int threads = node.cores / node.ranks;
    node.compute_share =
        double{1.0} * threads / node.cores * (threads > 1 ? c.thread_efficiency() : 1.0);
  }
  return node;
}

struct Link {
  double gbps, latency_us;
};
// A group of `span` consecutive ranks' worth of devices stays in a node while
// it fits in one.
Link LinkFor(const ClusterConfig& c, int span) {
  if (span <= c.devices_per_node()) return {c.nvlink_gbps(), c.nvlink_latency_us()};
  return {c.ib_gbps(), c.ib_latency_us()};
}
// One send to a neighbour (pipeline stages, the context-parallel ring).
double SendSeconds(double bytes, const Link& link) {
  return bytes / (link.gbps * 1e9) + link.latency_us * 1e-6;
}

// n's divisors, ascending.
std::vector<int> Divisors(int n) {
  std::vector<int> low, high;
  for (int d = 1; int64_t{d} * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

ElementBytes ClusterElementBytes(const ClusterConfig& cluster) {
  return {.weight = double{1.0} * cluster.weight_bytes(),
          .grad = double{1.0} * cluster.grad_bytes(),
          .optimizer = double{1.0} * cluster.optimizer_bytes(),
          .activation = double{1.0} * cluster.activation_bytes()};
}

// Why the best layout splits sequences: the best layout without context
// parallelism and its step, or the leanest one and the memory it lacks.
// `plans` ranked as PlanLayouts ranks them.
std::string WithoutContextParallelism(const std::vector<LayoutPrediction>& plans,
                                      const ClusterConfig& cluster) {
  std::vector<const LayoutPrediction*> whole;  // each sequence on one rank
  for (const LayoutPrediction& p : plans) {
    if (p.layout.mesh.cp == 1) whole.push_back(&p);
  }
  if (whole.empty()) return "Without context parallelism no layout runs this model and batch.\n";
  if (whole.front()->fits) {
    return absl::StrFormat("Without context parallelism the best is %s: step %.4g s, MFU %.1f%%.\n",
                           LayoutName(whole.front()->layout), whole.front()->time.step_s(),
                           whole.front()->mfu * 100);
  }
  const LayoutPrediction& leanest =
      **std::min_element(whole.begin(), whole.end(),
                         [](auto* a, auto* b) { return a->memory.total() < b->memory.total(); });
  return absl::StrFormat("Without context parallelism no layout fits: the leanest, %s, needs %s.\n",
                         LayoutName(leanest.layout), MemoryText(leanest.memory, cluster));
}

DeviceParameters LargestStageParameters(const ModelShape& s, const PlanLayout& layout,
                                        const std::vector<StageLayers>& stages) {
  DeviceParameters best;
  for (const StageLayers& st : stages) {
    const DeviceParameters p = StageParameters(s, st, layout);
    if (p.dense + p.expert > best.dense + best.expert) best = p;
  }
  return best;
}

// What every pipeline rank's memory estimate reads: the model, the layout
// and its schedule, a micro-batch's tokens on one rank, and the bytes per
// element of each kind.
struct MemoryInputs {
  const ModelShape& s;
  const PlanLayout& l;
  const ScheduleSpec& schedule;
  double tokens;
  const ElementBytes& bytes;
};

// Per token, on one of tp ranks, what a dense and an MoE layer keep: their
// activations for the backward (LayerActivations) and, from B to W, what
// their W reads besides (KeptForWeightGradients).
struct LayerKeeps {
  double dense_layer, moe_layer;
  double dense_grads, moe_grads;
};

// The weights, gradients and optimizer state of a stage holding `p` (ZeRO-1
// shards the state over the replicas).
MemoryEstimate StateMemory(const DeviceParameters& p, const PlanLayout& l,
                           const ElementBytes& bytes) {
  const double edp = l.mesh.edp;
  MemoryEstimate mem;
  mem.weights = (p.dense + p.expert) * bytes.weight;
  mem.grads = (p.dense + p.expert) * bytes.grad;
  mem.optimizer = (l.zero_stage >= 1 ? p.dense / l.mesh.dense_replicas() + p.expert / edp
                                     : p.dense + p.expert) *
                  bytes.optimizer;
  return mem;
}

// Adds to `activations` what the stage with the head keeps besides its
// layers: the prediction depths' activations and gradients, and the logits.
// `in_flight` micro-batches' worth of activations are in flight.
void AddHeadActivations(const MemoryInputs& in, double in_flight, const LayerKeeps& keep,
                        const PendingWeights& pending_w, double* activations) {
  const ModelShape& s = in.s;
  const PlanLayout& l = in.l;
  const double tokens = in.tokens;
  const int tp = l.mesh.tp;
  // Each prediction depth keeps its layer's activations and its join
  // (the two norm inputs, [e | h], the projection and the shared norm's
  // input) for each micro-batch in flight.
  const double depth = (s.mtp_moe ? keep.moe_layer : keep.dense_layer) + 6 * s.c / tp;
  *activations += in_flight * tokens * s.mtp * depth * in.bytes.activation;
  // Waiting for W, the head's chunk keeps each depth's layer's and
  // eh_proj's (c) output gradients, and the logits' gradient of the
  // main head and each depth (fp32, as the logits; in the micro-batch's
  // slot until its W, so beside the one being computed).
  const double head_pending = pending_w.head_chunk;
  *activations += head_pending * tokens * s.mtp *
                  ((s.mtp_moe ? keep.moe_grads : keep.dense_grads) + s.c) * in.bytes.activation;
  *activations += head_pending * (1 + s.mtp) * tokens *
                  static_cast<double>(PaddedVocabSize(s.model, l.mesh.tp)) / l.mesh.tp * 4;
  // fp32 logits of the padded vocabulary and their gradient, in place:
  // the main head's and each depth's.
  *activations += (1 + s.mtp) * tokens * static_cast<double>(PaddedVocabSize(s.model, l.mesh.tp)) /
                  l.mesh.tp * 4;
}

// The activations pipeline rank `r`, holding `st`, keeps at its peak.
double StageActivations(const MemoryInputs& in, int r, const StageLayers& st,
                        const PendingWeights& pending_w) {
  const ModelShape& s = in.s;
  const PlanLayout& l = in.l;
  const double tokens = in.tokens;
  const ElementBytes& bytes = in.bytes;
  const int layers = st.dense + st.moe;
  // Micro-batches' worth of the stage's activations in flight: chunks of
  // 1 / v of its layers each (1F1B: min(m, pp - r) micro-batches).
  const double in_flight =
      static_cast<double>(ChunksInFlight(in.schedule, r)) / in.schedule.virtual_stages;
  // Per rank; sequence parallelism (tp > 1) splits a recomputed layer's input over tp.
  const int tp = l.mesh.tp;
  const bool full = l.recompute == Recompute::FULL, selective = l.recompute == Recompute::SELECTIVE;
  const LayerKeeps keep = {.dense_layer = LayerActivations(s, false, tp, selective),
                           .moe_layer = LayerActivations(s, true, tp, selective),
                           .dense_grads = KeptForWeightGradients(s, false, tp, l.recompute),
                           .moe_grads = KeptForWeightGradients(s, true, tp, l.recompute)};
  const double per_token_layer =
      std::max(st.dense ? keep.dense_layer : 0.0, st.moe ? keep.moe_layer : 0.0);
  const double stored_per_token =
      full ? layers * s.c / tp : st.dense * keep.dense_layer + st.moe * keep.moe_layer;
  double activations = in_flight * tokens * stored_per_token * bytes.activation;
  if (full) activations += tokens * per_token_layer * bytes.activation;
  // B to W: the chunks waiting for their W (PendingWeightChunks; their
  // activations live until then, so they are among those in flight) keep
  // what their W reads besides (KeptForWeightGradients), 1 / v of the
  // stage's layers each. Added to the activations' peak as if both peaked
  // at once: an upper bound.
  const double pending = static_cast<double>(pending_w.chunks) / in.schedule.virtual_stages;
  activations +=
      pending * tokens * (st.dense * keep.dense_grads + st.moe * keep.moe_grads) * bytes.activation;
  // The embedding's W reads the lookup's gradient, (tokens, c).
  if (st.embedding) activations += pending_w.embedding_chunk * tokens * s.c * bytes.activation;
  // The ring's receive buffers while a layer's attention runs: a second
  // K/V block, and in the backward a dK/dV block.
  if (l.mesh.cp > 1) activations += tokens * 2 * KeyValueWidth(s, tp) * bytes.activation;
  if (st.head) AddHeadActivations(in, in_flight, keep, pending_w, &activations);
  return activations;
}

// What the time estimates of a layout read: the config, the cluster, the
// layout, the model, a micro-batch's tokens on one rank and its sequence
// length, and what a rank gets of its node, with its FLOP rate.
struct TimeInputs {
  const TrainerConfig& config;
  const ClusterConfig& cluster;
  const PlanLayout& l;
  const ModelShape& s;
  double tokens, seq;
  SharedNode node;
  double flops_rate;
};

// One micro-batch's time on one pipeline stage, by what it is spent on.
struct StageTime {
  double compute = 0, tp = 0, ep = 0, cp = 0;
  double total() const { return compute + tp + ep + cp; }
};

// A micro-batch's forward and backward FLOPs on one of tp ranks of a stage
// holding `st`, before recompute.
double StageFlops(const ModelShape& s, const StageLayers& st, double tokens, double seq, int tp) {
  const int layers = st.dense + st.moe;
  const double layer_flops = st.dense * (s.attention + s.norms + s.dense_mlp) +
                             st.moe * (s.attention + s.norms + s.active_moe_mlp);
  // Attention: a rank's T / cp queries, load-balanced, see as many keys
  // as the average query of the sequence.
  double flops = 6 * tokens * layer_flops + 6.0 * layers * tokens * seq * s.attention_width;
  // The head, and each prediction depth's layer, attention and head.
  const int depths = st.head ? s.mtp : 0;
  if (st.head) flops += 6 * tokens * s.vocab * s.c;
  flops += 6 * tokens * depths *
           (s.attention + s.norms + (s.mtp_moe ? s.active_moe_mlp : s.dense_mlp) + s.vocab * s.c +
            seq * s.attention_width);
  flops /= tp;
  // MLA's down projections and latent norms run whole on every rank, as do
  // the depths' joins.
  flops += 6 * tokens * (layers + depths) * s.attention_whole * (1 - 1.0 / tp);
  flops += 6 * tokens * depths * s.mtp_join;
  return flops;
}

// CP: each attention's ring, over `ring_layers` layers. The forward computes
// cp blocks (each 1 / cp of the rank's attention) while passing its K/V
// block on cp - 1 times; the backward's cp blocks (twice the work) pass K/V
// and dK/dV, the last only dK/dV. A transfer waits only for what its block
// does not hide; full recompute runs the forward's ring again.
double RingSeconds(const TimeInputs& in, int ring_layers, bool full) {
  const int tp = in.l.mesh.tp, cp = in.l.mesh.cp;
  if (cp <= 1) return 0;
  const ModelShape& s = in.s;
  const double tokens = in.tokens, seq = in.seq;
  const double act_bytes = in.cluster.activation_bytes();
  const Link cp_link = LinkFor(in.cluster, tp * cp);
  const double block = SendSeconds(tokens * KeyValueWidth(s, tp) * act_bytes, cp_link);
  const double forward_block = 2 * tokens * seq * s.attention_width / tp / cp / in.flops_rate;
  const double backward_block = 2 * forward_block;
  const double forward = (cp - 1) * std::max(0.0, block - forward_block);
  const double backward =
      (cp - 1) * std::max(0.0, 2 * block - backward_block) + std::max(0.0, block - backward_block);
  return ring_layers * ((full ? 2 : 1) * forward + backward);
}

// The time of one micro-batch on the stage holding `st`.
StageTime MicroBatchTime(const TimeInputs& in, const StageLayers& st) {
  const ModelShape& s = in.s;
  const double tokens = in.tokens;
  const double act_bytes = in.cluster.activation_bytes();
  const int tp = in.l.mesh.tp;
  const int layers = st.dense + st.moe;
  const int depths = st.head ? s.mtp : 0;
  const bool full = in.l.recompute == Recompute::FULL;
  StageTime time;
  const double flops = StageFlops(s, st, tokens, in.seq, tp);
  const double recompute_flops = full ? flops / 3 : 0;  // one more forward
  time.compute = (flops + recompute_flops) / in.flops_rate;
  // TP: per layer 2 collectives forward (+2 recomputed) and 2 backward of
  // the (tokens, c) activation; the embedding and the loss add two, and
  // each prediction depth its layer's four, a lookup's and a loss's.
  const double tp_count = layers * (full ? 6 : 4) + 2 + 6 * depths;
  const Link tp_link = LinkFor(in.cluster, tp);
  time.tp =
      tp_count * AllReduceSeconds(tokens * s.c * act_bytes, tp, tp_link.gbps, tp_link.latency_us);
  // EP: dispatch and combine, forward and backward, of the k copies of each token.
  const Link ep_link = LinkFor(in.cluster, tp * in.l.mesh.ep);
  time.ep = (st.moe + (s.mtp_moe ? depths : 0)) * 4 *
            AllToAllSeconds(tokens * s.k * s.c * act_bytes / tp, in.l.mesh.ep, ep_link.gbps,
                            ep_link.latency_us) *
            (1 - in.cluster.ep_overlap());
  time.cp = RingSeconds(in, layers + depths, full);
  return time;
}

// Gradient reduction in dp_bucket_mb buckets (dense over dp x cp, experts over edp);
// ZeRO-1 reduce-scatters then all-gathers the weights: the same volume.
double GradientReductionSeconds(const TimeInputs& in, const DeviceParameters& p) {
  const ClusterConfig& cluster = in.cluster;
  const MeshShape& mesh = in.l.mesh;
  const Link dp_link = LinkFor(cluster, mesh.tp * mesh.cp * mesh.dp);
  const double edp = mesh.edp;
  auto reduce = [&](double params, int n) {
    if (n <= 1 || params == 0) return 0.0;
    const double bytes = params * cluster.grad_bytes();
    const double buckets =
        std::ceil(bytes / (in.config.parallel().dp_bucket_mb() * GradientReducer::kBytesPerMb));
    return AllReduceSeconds(bytes, n, dp_link.gbps, 0) +
           buckets * 2.0 * (n - 1) * dp_link.latency_us * 1e-6;
  };
  return reduce(p.dense, mesh.dense_replicas()) + reduce(p.expert, static_cast<int>(edp));
}

// The step's time: m micro-batches of the `slowest` stage, the schedule's
// bubble, the pipeline's sends, the gradient reduction the backward does
// not hide, the optimizer on the largest stage's parameters `p`, and the
// fixed overhead.
TimeEstimate StepTime(const TimeInputs& in, const ScheduleSpec& schedule, int m,
                      const StageTime& slowest, const DeviceParameters& p) {
  const ClusterConfig& cluster = in.cluster;
  const PlanLayout& l = in.l;
  TimeEstimate t;
  t.compute_s = m * slowest.compute;
  t.tp_s = m * slowest.tp;
  t.ep_s = m * slowest.ep;
  t.cp_s = m * slowest.cp;
  // The schedule's idle fraction f of the step with equal stage times: idle
  // = busy x f / (1 - f), busy m slots (1F1B: (pp - 1) slots).
  const double f = l.mesh.pp > 1 ? IdealBubbleFraction(schedule) : 0;
  t.bubble_s = f < 1 ? m * slowest.total() * f / (1 - f) * in.node.idle_in_bubble(l.mesh.pp) : 0;
  // Each slot's activation (forward) and gradient (backward) send to the next stage.
  if (l.mesh.pp > 1) {
    const double act_bytes = cluster.activation_bytes();
    const Link pp_link = LinkFor(cluster, l.mesh.world);
    t.pp_s =
        2 * (m + l.mesh.pp - 1) * SendSeconds(in.tokens * in.s.c * act_bytes / l.mesh.tp, pp_link);
  }
  const double slowest_bwd = slowest.compute * 2 / 3;
  t.dp_s = std::max(0.0, GradientReductionSeconds(in, p) - cluster.dp_overlap() * slowest_bwd);
  // AdamW reads and writes weights, gradient and state of the parameters it owns.
  const double edp = l.mesh.edp;
  const double owned =
      l.zero_stage >= 1 ? p.dense / l.mesh.dense_replicas() + p.expert / edp : p.dense + p.expert;
  const double memory_rate = cluster.memory_gbps() * 1e9 * in.node.memory_share;
  t.optimizer_s = 2 * owned *
                  (cluster.weight_bytes() + cluster.grad_bytes() + cluster.optimizer_bytes()) /
                  memory_rate;
  t.overhead_s = cluster.step_overhead_s();
  return t;
}

}  // namespace

DeviceParameters ParametersPerDevice(const ModelConfig& model, const PlanLayout& layout) {
  const ModelShape s = ShapeOf(model);
  const ScheduleSpec one_chunk{.stages = layout.mesh.pp};
  return LargestStageParameters(s, layout,
                                Stages(s, one_chunk, BalancedStageLayers(s, layout.mesh.pp)));
}

MemoryEstimate EstimateMemory(const TrainerConfig& config, const PlanLayout& l,
                              const ElementBytes& bytes) {
  const ModelShape s = ShapeOf(config.model());
  const TrainConfig& train = config.train();
  // The config's schedule on this layout (one stage: the one-stage table).
  const ScheduleSpec schedule = PlannedSchedule(config, l.mesh);
  const std::vector<PendingWeights> pending_w = PendingWeightChunks(schedule);
  const std::vector<StageLayers> stages =
      Stages(s, schedule, PlannedStageLayers(config, s, schedule));
  const MemoryInputs in{s, l, schedule, RankTokens(train, l.mesh), bytes};
  MemoryEstimate most;
  for (int r = 0; r < l.mesh.pp; ++r) {
    MemoryEstimate mem = StateMemory(StageParameters(s, stages[r], l), l, bytes);
    mem.activations = StageActivations(in, r, stages[r], pending_w[r]);
    if (mem.total() > most.total()) most = mem;
  }
  return most;
}

LayoutPrediction PredictLayout(const TrainerConfig& config, const ClusterConfig& cluster,
                               const PlanLayout& l) {
  const ModelShape s = ShapeOf(config.model());
  const TrainConfig& train = config.train();
  const double tokens = RankTokens(train, l.mesh), seq = train.seq_length();
  const int world = l.mesh.world;
  LayoutPrediction out;
  out.layout = l;
  out.micro_batches =
      static_cast<int>(train.global_batch_size() / (int64_t{train.micro_batch_size()} * l.mesh.dp));
  out.memory = EstimateMemory(config, l, ClusterElementBytes(cluster));
  out.schedule = PlannedSchedule(config, l.mesh);
  const SharedNode node = SharedNodeFor(cluster, world);
  const double flops_rate =
      cluster.peak_tflops() * 1e12 * cluster.compute_efficiency() * node.compute_share;
  const TimeInputs in{config, cluster, l, s, tokens, seq, node, flops_rate};

  out.stage_layers = PlannedStageLayers(config, s, out.schedule);
  const std::vector<StageLayers> stages = Stages(s, out.schedule, out.stage_layers);
  StageTime slowest;
  for (int r = 0; r < l.mesh.pp; ++r) {
    const StageTime stage = MicroBatchTime(in, stages[r]);
    if (stage.total() > slowest.total()) slowest = stage;
  }
  out.time =
      StepTime(in, out.schedule, out.micro_batches, slowest, LargestStageParameters(s, l, stages));
  const TimeEstimate& t = out.time;

  const double model_flops = TrainingFlopsPerToken(config.model(), train.seq_length()) *
                             train.global_batch_size() * seq / world;
  out.mfu = model_flops / t.step_s() / (cluster.peak_tflops() * 1e12 * node.peak_share);
  out.bubble_fraction = t.bubble_s / t.step_s();
  out.fits = out.memory.total() <= cluster.hbm_bytes() * cluster.usable_memory_fraction();
  return out;
}

std::vector<LayoutPrediction> PlanLayouts(const TrainerConfig& config, const ClusterConfig& cluster,
                                          int world) {
  const ModelConfig& m = config.model();
  const bool experts = m.has_moe() && m.moe().n_routed_experts() > 0;
  std::vector<LayoutPrediction> plans;
  // Each axis a divisor of what the axes before it leave; the rules keep the
  // layouts the trainer runs.
  for (int tp : Divisors(world)) {
    if (tp > cluster.devices_per_node()) break;
    for (int cp : Divisors(world / tp)) {
      for (int pp : Divisors(world / tp / cp)) {
        const int dp = world / tp / cp / pp;
        for (int ep : experts ? Divisors(dp * cp) : std::vector<int>{1}) {
          const MeshShape mesh = MeshShape::Of(tp, pp, dp, ep, cp);
          if (!CheckLayoutRuns(config, mesh).ok()) continue;
          // A split backward's W reads activations full recompute does not keep.
          const bool full_recompute_runs = !SplitsBackward(PlannedSchedule(config, mesh).kind);
          for (int zero : {0, 1}) {
            for (Recompute::Value recompute :
                 {Recompute::NONE, Recompute::SELECTIVE, Recompute::FULL}) {
              if (recompute == Recompute::FULL && !full_recompute_runs) continue;
              plans.push_back(PredictLayout(config, cluster, {mesh, zero, recompute}));
            }
          }
        }
      }
    }
  }
  std::stable_sort(plans.begin(), plans.end(),
                   [](const LayoutPrediction& a, const LayoutPrediction& b) {
                     if (a.fits != b.fits) return a.fits;
                     return a.time.step_s() < b.time.step_s();
                   });
  return plans;
}

std::string LayoutName(const PlanLayout& l) {
  std::string name =
      absl::StrFormat("tp %d x cp %d x pp %d x dp %d", l.mesh.tp, l.mesh.cp, l.mesh.pp, l.mesh.dp);
  if (l.mesh.ep > 1) absl::StrAppendFormat(&name, " (ep %d)", l.mesh.ep);
  if (l.zero_stage >= 1) absl::StrAppend(&name, ", ZeRO-1");
  if (l.recompute == Recompute::FULL) absl::StrAppend(&name, ", recompute");
  if (l.recompute == Recompute::SELECTIVE) absl::StrAppend(&name, ", selective recompute");
  return name;
}

std::string MemoryText(const MemoryEstimate& memory, const ClusterConfig& cluster) {
  return absl::StrFormat(
      "%.1f GB per device (weights %.1f, gradients %.1f, optimizer %.1f, activations %.1f) of %.1f "
      "usable",
      memory.total() / 1e9, memory.weights / 1e9, memory.grads / 1e9, memory.optimizer / 1e9,
      memory.activations / 1e9, cluster.hbm_bytes() * cluster.usable_memory_fraction() / 1e9);
}

std::string ScheduleSummary(const ScheduleSpec& spec) {
  std::string text = absl::StrFormat("%d micro-batch%s per step", spec.micro_batches,
                                     spec.micro_batches == 1 ? "" : "es");
  if (spec.stages == 1) return text + ", no pipeline";
  absl::StrAppendFormat(&text, ", %s over %d stages", ScheduleKindName(spec.kind), spec.stages);
  if (spec.virtual_stages > 1) absl::StrAppendFormat(&text, " x %d chunks", spec.virtual_stages);
  absl::StrAppendFormat(&text, " (ideal bubble %.1f%%)", 100 * IdealBubbleFraction(spec));
  return text;
}

// The settings that give a split of layers over virtual stages, or "" for
// an even one: Megatron-LM's first and last stages' counts where the others
// are even, else the whole list.
std::string SplitSettings(const std::vector<int>& layers) {
  if (std::adjacent_find(layers.begin(), layers.end(), std::not_equal_to<>()) == layers.end())
    return "";
  const bool middle_even =
      layers.size() < 4 || std::adjacent_find(layers.begin() + 1, layers.end() - 1,
                                              std::not_equal_to<>()) == layers.end() - 1;
  if (!middle_even) {
    return absl::StrFormat(" Layers per virtual stage: --set parallel.pipeline_layers=%s.",
                           absl::StrJoin(layers, ","));
  }
  return absl::StrFormat(
      " Layers: %d on the first virtual stage, %d on the last, %d on each other (--set "
      "parallel.pipeline_first_stage_layers=%d --set parallel.pipeline_last_stage_layers=%d).",
      layers.front(), layers.back(), layers.size() > 2 ? layers[1] : 0, layers.front(),
      layers.back());
}

std::string PlanReport(const std::vector<LayoutPrediction>& plans, const ClusterConfig& cluster,
                       int top) {
  const double usable = cluster.hbm_bytes() * cluster.usable_memory_fraction();
  const int rows = std::min<int>(top, static_cast<int>(plans.size()));
  size_t width = std::string("layout").size();
  for (int i = 0; i < rows; ++i) width = std::max(width, LayoutName(plans[i].layout).size());
  std::string text = absl::StrFormat(
      "cluster %s: %d nodes x %d devices, %.4g TFLOP/s peak %s (%.0f%% achieved), %.1f GB usable "
      "of %.1f GB\n",
      cluster.name(), cluster.nodes(), cluster.devices_per_node(), cluster.peak_tflops(),
      cluster.shared_compute() ? "per node, shared" : "each", cluster.compute_efficiency() * 100,
      usable / 1e9, cluster.hbm_bytes() / 1e9);
  // The config's schedule, which every pipelined layout runs.
  const auto pipelined =
      std::find_if(plans.begin(), plans.end(), [](auto& p) { return p.schedule.stages > 1; });
  if (pipelined != plans.end()) {
    const ScheduleSpec& spec = pipelined->schedule;
    absl::StrAppendFormat(
        &text, "pipeline schedule: %s%s (the bubble column is its idle time with equal stages)\n",
        ScheduleKindName(spec.kind),
        spec.virtual_stages > 1 ? absl::StrFormat(", %d chunks per rank", spec.virtual_stages)
                                : std::string());
  }
  absl::StrAppendFormat(&text, "%-*s %9s %10s %8s %7s %8s %7s %8s %8s %8s %7s\n", width, "layout",
                        "memory GB", "step s", "compute", "tp", "ep", "cp", "bubble", "dp+pp",
                        "opt", "MFU");
  for (int i = 0; i < rows; ++i) {
    const LayoutPrediction& p = plans[i];
    const TimeEstimate& t = p.time;
    absl::StrAppendFormat(&text,
                          "%-*s %9.1f %10.4g %8.3g %7.3g %8.3g %7.3g %8.3g %8.3g %8.3g %6.1f%%%s\n",
                          width, LayoutName(p.layout), p.memory.total() / 1e9, t.step_s(),
                          t.compute_s, t.tp_s, t.ep_s, t.cp_s, t.bubble_s, t.dp_s + t.pp_s,
                          t.optimizer_s, p.mfu * 100, p.fits ? "" : "  (does not fit)");
  }
  const int fitting =
      static_cast<int>(std::count_if(plans.begin(), plans.end(), [](auto& p) { return p.fits; }));
  absl::StrAppendFormat(&text, "%d of %d layouts fit in memory.\n", fitting, plans.size());
  if (fitting == 0) {
    return text + "No layout fits: add devices, enable recompute, or shrink the micro-batch.\n";
  }
  const LayoutPrediction& best = plans.front();
  const TimeEstimate& t = best.time;
  absl::StrAppendFormat(
      &text,
      "best: %s, %s.%s Memory %s. Step %.4g s: compute %.0f%%, TP %.0f%%, EP %.0f%%, "
      "CP %.0f%%, bubble %.0f%%, DP+PP %.0f%%, optimizer %.0f%%; MFU %.1f%%.\n",
      LayoutName(best.layout), ScheduleSummary(best.schedule), SplitSettings(best.stage_layers),
      MemoryText(best.memory, cluster), t.step_s(), 100 * t.compute_s / t.step_s(),
      100 * t.tp_s / t.step_s(), 100 * t.ep_s / t.step_s(), 100 * t.cp_s / t.step_s(),
      100 * t.bubble_s / t.step_s(), 100 * (t.dp_s + t.pp_s) / t.step_s(),
      100 * t.optimizer_s / t.step_s(), best.mfu * 100);
  if (best.layout.mesh.cp > 1) absl::StrAppend(&text, WithoutContextParallelism(plans, cluster));
  return text;
}

}  // namespace tetra
