#include "kernels/op_list.h"

#include "core/logging.h"

namespace tetra::ops {
namespace {

constexpr OpEntry kOps[] = {
    {"Linear", OpKind::kGemm},
    {"LinearBackward", OpKind::kGemm},
    {"Attention", OpKind::kAttention},
    {"AttentionBackward", OpKind::kAttention},
    {"AttentionMerge", OpKind::kAttention},
    {"RmsNorm", OpKind::kNorm},
    {"AddRmsNorm", OpKind::kNorm},
    {"RmsNormBackward", OpKind::kNorm},
    {"CrossEntropy", OpKind::kCrossEntropy},
    {"CrossEntropyRowStats", OpKind::kCrossEntropy},
    {"CrossEntropySumExp", OpKind::kCrossEntropy},
    {"CrossEntropyLoss", OpKind::kCrossEntropy},
    {"CrossEntropyGradient", OpKind::kCrossEntropy},
    {"AdamW", OpKind::kOptimizer},
    {"AdamWMultiTensor", OpKind::kOptimizer},
    {"SumOfSquares", OpKind::kOptimizer},
    {"WeightedSumOfSquares", OpKind::kOptimizer},
    {"Scale", OpKind::kOptimizer},             // gradient clipping
    {"ScaleMultiTensor", OpKind::kOptimizer},  // gradient clipping
    {"RouterScores", OpKind::kMoe},
    {"RouterTopK", OpKind::kMoe},
    {"RouterWeightsBackward", OpKind::kMoe},
    {"RouterScoresBackward", OpKind::kMoe},
    {"SequenceBalanceStats", OpKind::kMoe},
    {"SequenceBalanceLoss", OpKind::kMoe},
    {"CountExpertLoads", OpKind::kMoe},
    {"UpdateRouterBias", OpKind::kMoe},
    {"DispatchOrder", OpKind::kMoe},
    {"GatherRows", OpKind::kMoe},
    {"CombineRows", OpKind::kMoe},
    {"CombineRowsBackward", OpKind::kMoe},
    {"Embedding", OpKind::kElementwise},
    {"EmbeddingBackward", OpKind::kElementwise},
    {"EmbeddingShard", OpKind::kElementwise},
    {"EmbeddingShardBackward", OpKind::kElementwise},
    {"Rope", OpKind::kElementwise},
    {"RopeBackward", OpKind::kElementwise},
    {"SplitQkvRope", OpKind::kElementwise},
    {"MergeQkvRopeBackward", OpKind::kElementwise},
    {"DecoupledRope", OpKind::kElementwise},
    {"DecoupledRopeBackward", OpKind::kElementwise},
    {"ConcatColumns", OpKind::kElementwise},
    {"SplitColumns", OpKind::kElementwise},
    {"MlaSplitKeyValue", OpKind::kElementwise},
    {"MlaMergeKeyValueBackward", OpKind::kElementwise},
    {"AddBias", OpKind::kElementwise},
    {"BiasGradient", OpKind::kElementwise},
    {"Swiglu", OpKind::kElementwise},
    {"SwigluBackward", OpKind::kElementwise},
    {"SwigluPacked", OpKind::kElementwise},
    {"SwigluPackedBackward", OpKind::kElementwise},
    {"Add", OpKind::kElementwise},
    {"Cast", OpKind::kElementwise},
    {"FillNormal", OpKind::kElementwise},
};

}  // namespace

absl::Span<const OpEntry> OpList() { return kOps; }

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kGemm:
      return "GEMM";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kNorm:
      return "norms";
    case OpKind::kCrossEntropy:
      return "cross-entropy";
    case OpKind::kOptimizer:
      return "optimizer";
    case OpKind::kMoe:
      return "MoE routing and dispatch";
    case OpKind::kElementwise:
      return "elementwise";
  }
  TETRA_CHECK(false) << "unknown OpKind " << static_cast<int>(kind);
  return "";
}

OpKind KindOfOp(std::string_view name) {
  for (const OpEntry& op : kOps) {
    if (op.name == name) return op.kind;
  }
  TETRA_CHECK(false) << "op " << name << " is missing from kernels/op_list.cc";
  return OpKind::kElementwise;
}

}  // namespace tetra::ops
