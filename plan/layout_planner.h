// The layout planner behind `tetra plan --cluster`: an analytic model that
// predicts, for a config's model and batch on a described cluster
// (proto/cluster.proto), each layout's memory per device, step time and MFU,
// and ranks the layouts that fit.
//
// Context parallelism (cp) gives each rank T / cp tokens of every sequence
// (2 chunks of T / 2cp, the causal load balance), so every per-token cost
// below is for a micro-batch's B x T / cp tokens on one rank.
//
// Memory per device, for the stage that needs most: weights, gradients and
// optimizer state (sharded over the dp x cp ranks that share the dense
// weights with ZeRO-1; expert weights' over the expert-data-parallel ranks),
// and activations. The config's pipeline schedule on the layout keeps
// ActivationBound micro-batch chunks in flight on a stage (at most all m x v;
// a chunk holds 1 / v of the stage's layers: 1F1B pp - stage micro-batches,
// GPipe all, ZB-H1 pp, DualPipeV 2 pp + 1 chunks), each with, per layer,
// everything the backward reads, or with selective recompute all but the
// MLPs' SwiGLU activations (train.recompute SELECTIVE, computed again in the
// backward at a cost the model neglects), or with full recompute only the
// layer input plus one layer's working set (one more forward of compute and
// of tensor collectives). Under cp > 1 the ring attention adds its receive
// buffers: a second K/V block, and in the backward a dK/dV block. Schedules
// that split the backward into B (input gradient) and W (weight gradient),
// ZB-H1 and DualPipeV, also keep for each chunk waiting for its W (counted
// along the schedule's tables) what the W reads besides the activations:
// the linears' and norms' output gradients, about the layer's linear inputs
// again. DualPipeV's V puts the head on the first stage, with the embedding.
//
// Step time: each stage runs m slots of one micro-batch's forward + backward
// on the slowest stage (compute at peak x efficiency, the blocking TP
// collectives, the exposed share of EP all-to-alls and of the ring's K/V
// exchanges); the bubble is the schedule's ideal idle fraction f of the step
// with equal stages (IdealBubbleFraction: 1F1B's (pp - 1) / (m + pp - 1),
// pp - 1 more slots; interleaving's v-th of them; ZB-H1's a third, its W's
// filling the rest), so m slots x f / (1 - f). Then the
// exposed pipeline sends, the gradient reduction over dp x cp that the last
// backward did not hide, the optimizer (memory bound) and a fixed overhead.
// Collectives are rings: all-reduce 2(n-1)/n x bytes / bandwidth + 2(n-1) x
// latency, on NVLink while the group fits in a node, else InfiniBand. Ranks
// are laid out tp fastest, then cp, dp, pp (Megatron's "tp-cp-ep-dp-pp"), so
// a group of an axis spans the product of the sizes up to and including it.
#ifndef TETRA_PLAN_LAYOUT_PLANNER_H_
#define TETRA_PLAN_LAYOUT_PLANNER_H_

#include <string>
#include <vector>

#include "parallel/mesh.h"
#include "pipeline/schedule.h"
#include "proto/cluster.pb.h"
#include "proto/config.pb.h"

namespace tetra {

struct PlanLayout {
  MeshShape mesh;
  int zero_stage = 0;
  Recompute::Value recompute = Recompute::NONE;  // train.recompute

  // `config`'s run on `mesh`: its ZeRO stage and recompute. The estimates
  // model full recompute of every block; the first train.recompute_layers
  // of them only is estimated as none, an upper bound.
  static PlanLayout Of(const MeshShape& mesh, const TrainerConfig& config) {
    const TrainConfig& train = config.train();
    const bool partial = train.recompute() == Recompute::FULL && train.recompute_layers() != 0;
    return {.mesh = mesh,
            .zero_stage = config.optimizer().zero_stage(),
            .recompute = partial ? Recompute::NONE : train.recompute()};
  }
};

// Bytes per device on the stage that needs most.
struct MemoryEstimate {
  double weights = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return weights + grads + optimizer + activations; }
};

// Seconds of one optimizer step; step_s is their sum.
struct TimeEstimate {
  double compute_s = 0;  // m micro-batches' forward + backward (+ recompute) on the slowest stage
  double tp_s = 0, ep_s = 0;  // exposed TP collectives and EP all-to-alls over the m micro-batches
  double cp_s = 0;            // exposed ring attention exchanges over the m micro-batches
  double bubble_s = 0;        // the schedule's idle time (1F1B: pp - 1 slots)
  double pp_s = 0, dp_s = 0;  // exposed pipeline sends and data-parallel reduction
  double optimizer_s = 0, overhead_s = 0;
  double step_s() const {
    return compute_s + tp_s + ep_s + cp_s + bubble_s + pp_s + dp_s + optimizer_s + overhead_s;
  }
};

struct LayoutPrediction {
  PlanLayout layout;
  int micro_batches = 0;  // per data-parallel rank and step
  // The pipeline schedule the estimate assumes: the config's on this layout
  // (plan/layout_rules.h's LayoutScheduleSpec), or 1F1B where it cannot run.
  ScheduleSpec schedule;
  // The layers of each virtual stage (model order) the estimate assumes: the
  // config's split for its own pipeline, else the one that balances the
  // stages' compute (the embedding on the first, the head and MTP on the last).
  std::vector<int> stage_layers;
  MemoryEstimate memory;
  TimeEstimate time;
  double mfu = 0;              // model FLOPs (no recompute) per device over step time and peak
  double bubble_fraction = 0;  // bubble_s / step
  bool fits = false;           // memory.total() <= usable HBM
};

// Bytes per element of what a device holds: weights (with any compute copy),
// gradients, optimizer state (AdamW moments, and master weights where the
// weights are not fp32) and stored activations; a cluster file's *_bytes
// fields, or a run's own dtypes.
struct ElementBytes {
  double weight = 0, grad = 0, optimizer = 0, activation = 0;
};

// Parameters per device of the largest stage (the planner's memory basis):
// `dense` counts weights replicated over expert-parallel ranks (attention,
// dense MLPs, shared experts, router, norms, embedding, head), `expert` the
// routed experts held locally.
struct DeviceParameters {
  double dense = 0, expert = 0;
};
DeviceParameters ParametersPerDevice(const ModelConfig& model, const PlanLayout& layout);

// Memory per device of the stage that needs most under `layout` (as the
// header's opening describes), for `config`'s model, batch and schedule.
MemoryEstimate EstimateMemory(const TrainerConfig& config, const PlanLayout& layout,
                              const ElementBytes& bytes);

// The prediction for one layout; `config` gives the model, batch, micro-batch
// and schedule.
LayoutPrediction PredictLayout(const TrainerConfig& config, const ClusterConfig& cluster,
                               const PlanLayout& layout);

// Every layout of `world` devices the trainer runs (plan/layout_rules.h),
// with tp within a node, each of ZeRO 0/1 and the three recompute modes
// (not full recompute where the config's schedule splits the backward: the
// trainer refuses it), fitting ones first, each group fastest first.
std::vector<LayoutPrediction> PlanLayouts(const TrainerConfig& config, const ClusterConfig& cluster,
                                          int world);

// "tp 1 x cp 1 x pp 16 x dp 128 (ep 64), ZeRO-1, recompute" (full; "selective recompute")
std::string LayoutName(const PlanLayout& layout);
// "95.3 GB per device (weights 8.8, gradients 17.6, optimizer 1.1,
// activations 67.8) of 72.0 usable"
std::string MemoryText(const MemoryEstimate& memory, const ClusterConfig& cluster);
// "8 micro-batches per step, ZB-H1 over 4 stages (ideal bubble 8.6%)",
// "1 micro-batch per step, no pipeline".
std::string ScheduleSummary(const ScheduleSpec& spec);
// The pipeline schedule the layouts assume, the ranked table (up to `top`
// rows), why the best wins and, where it uses
// context parallelism, what the best layout without it would be or why none
// fits.
std::string PlanReport(const std::vector<LayoutPrediction>& plans, const ClusterConfig& cluster,
                       int top);

}  // namespace tetra

#endif  // TETRA_PLAN_LAYOUT_PLANNER_H_
