#include "kernels/op_contracts.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace tetra::ops {
namespace {

// Grid dims y and z take at most this many blocks (CUDA's limit).
constexpr int64_t kMaxGridYz = 65535;
// DecoupledRope runs a thread per rotated pair, one block per head row.
constexpr int64_t kMaxRotaryPairs = 1024;

// "x BF16[37, 48]", or "x (none)".
std::string Operand(const char* name, const Tensor& t) {
  if (!t.defined() && t.numel() == 0 && t.rank() == 0) return absl::StrCat(name, " (none)");
  return absl::StrCat(name, " ", DTypeName(t.dtype()), ShapeString(t.shape()));
}

bool IsFloat(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

struct Named {
  const char* name;
  const Tensor& t;
};

// Fatal unless every defined operand shares the first's dtype, fp32 or bf16:
// the device's kernel (or cuBLASLt's GEMM) reads them all through one type.
void SameFloatDtype(const char* op, std::initializer_list<Named> operands) {
  const Named& first = *operands.begin();
  TETRA_CHECK(IsFloat(first.t.dtype()))
      << op << ": " << Operand(first.name, first.t) << " is not fp32 or bf16";
  for (const Named& o : operands) {
    TETRA_CHECK(!o.t.defined() || o.t.dtype() == first.t.dtype())
        << op << ": " << Operand(o.name, o.t) << " but " << Operand(first.name, first.t)
        << "; the device reads them through one type (one dtype for all of them)";
  }
}

// Fatal unless `o` (when defined) is `dtype`.
void ExactDtype(const char* op, const Named& o, DType dtype, const char* why) {
  TETRA_CHECK(!o.t.defined() || o.t.dtype() == dtype)
      << op << ": " << Operand(o.name, o.t) << " must be " << DTypeName(dtype) << " (" << why
      << ")";
}

// A GEMM's output (when defined): cuBLASLt with fp32 compute writes fp32
// from fp32 or bf16 inputs, or bf16 from bf16 inputs, never bf16 from fp32.
void GemmOutput(const char* op, const Named& out, DType inputs) {
  TETRA_CHECK(!out.t.defined() || out.t.dtype() == DType::kF32 || out.t.dtype() == inputs)
      << op << ": " << Operand(out.name, out.t) << " from " << DTypeName(inputs)
      << " inputs; cuBLASLt writes fp32, or the inputs' dtype";
}

void GridYz(const char* op, const char* what, int64_t blocks) {
  TETRA_CHECK(blocks <= kMaxGridYz)
      << op << ": " << blocks << " " << what << " exceed the device's grid limit of " << kMaxGridYz
      << " (the kernel takes one grid row per " << what << ")";
}

int64_t Rows(const Tensor& t) {
  return t.rank() == 0 || t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1);
}

}  // namespace

void CheckLinear(const Tensor& x, const Tensor& w, const Tensor& y) {
  // Checked before dispatch: cuBLASLt reads and writes whatever sizes it is told.
  TETRA_CHECK(w.rank() == 2 && w.dim(1) > 0 && x.numel() % w.dim(1) == 0 &&
              y.numel() == x.numel() / w.dim(1) * w.dim(0))
      << "linear " << ShapeString(x.shape()) << " x " << ShapeString(w.shape()) << "^T -> "
      << ShapeString(y.shape());
  SameFloatDtype("linear", {{"x", x}, {"w", w}});
  GemmOutput("linear", {"y", y}, x.dtype());
}

void CheckLinearBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                         const Tensor& dw, int64_t real_out) {
  const bool fits = w.rank() == 2 && w.dim(1) > 0 && x.numel() % w.dim(1) == 0;
  const int64_t rows = fits ? x.numel() / w.dim(1) : -1;
  TETRA_CHECK(fits && dy.numel() == rows * w.dim(0) && (!dw.defined() || dw.numel() == w.numel()) &&
              (!dx.defined() || dx.numel() == x.numel()) && real_out <= w.dim(0))
      << "linear backward " << ShapeString(dy.shape()) << ", " << ShapeString(x.shape()) << ", "
      << ShapeString(w.shape()) << ", " << real_out << " real outputs";
  // dw += dy^T x and dx = dy w: each GEMM's two inputs share a dtype.
  SameFloatDtype("linear backward", {{"dy", dy}, {"x", x}, {"w", w}});
  GemmOutput("linear backward", {"dx", dx}, dy.dtype());
  GemmOutput("linear backward", {"dw", dw}, dy.dtype());
}

void CheckAddBias(const Tensor& bias, const Tensor& y) {
  TETRA_CHECK(bias.rank() == 1 && y.rank() >= 1 && y.dim(-1) == bias.dim(0))
      << "add bias: " << Operand("bias", bias) << " to the rows of " << Operand("y", y);
  SameFloatDtype("add bias", {{"y", y}, {"bias", bias}});
}

void CheckBiasGradient(const Tensor& dy, const Tensor& dbias) {
  TETRA_CHECK(dbias.rank() == 1 && dy.rank() >= 1 && dy.dim(-1) == dbias.dim(0))
      << "bias gradient: " << Operand("dy", dy) << " -> " << Operand("dbias", dbias);
  SameFloatDtype("bias gradient", {{"dy", dy}});
  ExactDtype("bias gradient", {"dbias", dbias}, DType::kF32,
             "a parameter gradient, summed in fp32");
}

void CheckEmbedding(const Tensor& tokens, const Tensor& table, const Tensor& out) {
  TETRA_CHECK(table.rank() == 2 && tokens.dtype() == DType::kI32 &&
              out.numel() == tokens.numel() * table.dim(1))
      << "embedding: " << Operand("tokens", tokens) << " (int32) in " << Operand("table", table)
      << " -> " << Operand("out", out);
  SameFloatDtype("embedding", {{"table", table}, {"out", out}});
}

void CheckEmbeddingBackward(const Tensor& tokens, const Tensor& dout, const Tensor& dtable) {
  TETRA_CHECK(dtable.rank() == 2 && tokens.dtype() == DType::kI32 &&
              dout.numel() == tokens.numel() * dtable.dim(1))
      << "embedding backward: " << Operand("tokens", tokens) << " (int32), "
      << Operand("dout", dout) << " into " << Operand("dtable", dtable);
  ExactDtype("embedding backward", {"dtable", dtable}, DType::kF32,
             "the device adds rows into it atomically");
  SameFloatDtype("embedding backward", {{"dout", dout}});
}

void CheckRmsNorm(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd) {
  const int64_t dim = x.rank() == 0 ? 0 : x.dim(-1);
  TETRA_CHECK(w.numel() == dim && y.numel() == x.numel() && rstd.numel() == Rows(x))
      << "rmsnorm: " << Operand("x", x) << ", " << Operand("w", w) << " -> " << Operand("y", y)
      << ", " << Operand("rstd", rstd);
  SameFloatDtype("rmsnorm", {{"x", x}, {"w", w}, {"y", y}});
  ExactDtype("rmsnorm", {"rstd", rstd}, DType::kF32, "a statistic");
}

void CheckAddRmsNorm(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& sum,
                     const Tensor& y, const Tensor& rstd) {
  TETRA_CHECK(delta.numel() == x.numel() && sum.numel() == x.numel())
      << "add-rmsnorm: " << Operand("x", x) << ", " << Operand("delta", delta) << ", "
      << Operand("sum", sum);
  SameFloatDtype("add-rmsnorm", {{"x", x}, {"delta", delta}, {"sum", sum}});
  CheckRmsNorm(sum, w, y, rstd);
}

void CheckRmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                          const Tensor& dx, const Tensor& dw, const Tensor& dx_add) {
  const int64_t dim = x.rank() == 0 ? 0 : x.dim(-1);
  TETRA_CHECK(dy.numel() == x.numel() && w.numel() == dim && rstd.numel() == Rows(x) &&
              (!dx.defined() || dx.numel() == x.numel()) && (!dw.defined() || dw.numel() == dim) &&
              (!dx_add.defined() || (dx.defined() && dx_add.numel() == x.numel())))
      << "rmsnorm backward: " << Operand("dy", dy) << ", " << Operand("x", x) << ", "
      << Operand("w", w) << ", " << Operand("rstd", rstd) << " -> " << Operand("dx", dx) << " plus "
      << Operand("dx_add", dx_add) << ", " << Operand("dw", dw);
  SameFloatDtype("rmsnorm backward",
                 {{"x", x}, {"dy", dy}, {"w", w}, {"dx", dx}, {"dx_add", dx_add}});
  ExactDtype("rmsnorm backward", {"rstd", rstd}, DType::kF32, "a statistic");
  ExactDtype("rmsnorm backward", {"dw", dw}, DType::kF32, "a parameter gradient, summed in fp32");
}

void CheckRope(const char* op, const Tensor& x, const RopeTable& table, bool whole_heads) {
  const bool fits = x.rank() == 4 && x.dim(1) <= table.seq &&
                    (whole_heads ? x.dim(3) == 2 * table.half_dim : x.dim(3) >= 2 * table.half_dim);
  TETRA_CHECK(fits) << op << ": " << Operand("x", x) << " vs table (" << table.seq << ", "
                    << table.half_dim << "): (B, T, H, D) with T <= the table's positions and "
                    << (whole_heads ? "D = " : "D >= ") << "2 x its half dim";
  SameFloatDtype(op, {{"x", x}});
  TETRA_CHECK(whole_heads || table.half_dim <= kMaxRotaryPairs)
      << op << ": " << table.half_dim
      << " rotary pairs per head; the device's kernel takes at most " << kMaxRotaryPairs
      << " (a thread each)";
}

void CheckQkvRope(const char* op, const Tensor& qkv, const RopeTable& table, const Tensor& q,
                  const Tensor& k, const Tensor& v) {
  TETRA_CHECK(q.rank() == 4 && k.shape() == v.shape() && k.rank() == 4 && k.dim(0) == q.dim(0) &&
              k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3) &&
              qkv.numel() == q.numel() + k.numel() + v.numel() &&
              qkv.dim(-1) == (q.dim(2) + 2 * k.dim(2)) * q.dim(3))
      << op << ": " << Operand("qkv", qkv) << ", " << Operand("q", q) << ", " << Operand("k", k)
      << ", " << Operand("v", v);
  CheckRope(op, q, table, /*whole_heads=*/true);
  SameFloatDtype(op, {{"qkv", qkv}, {"q", q}, {"k", k}, {"v", v}});
}

void CheckColumnBlocks(const char* op, const Tensor& wide, const Tensor& a, const Tensor& b) {
  TETRA_CHECK(wide.rank() == 2 && a.rank() == 2 && b.rank() == 2 && a.dim(0) == wide.dim(0) &&
              b.dim(0) == wide.dim(0) && a.dim(1) + b.dim(1) == wide.dim(1) &&
              a.dtype() == wide.dtype() && b.dtype() == wide.dtype())
      << op << ": " << Operand("whole", wide) << " of " << Operand("a", a) << " and "
      << Operand("b", b);
}

cpu::MlaKeyValueDims CheckMlaKeyValue(const char* op, const Tensor& kv, const Tensor& k_pe,
                                      const Tensor& key, const Tensor& value) {
  const bool ranks =
      key.rank() == 4 && value.rank() == 4 && key.dim(2) == value.dim(2) && key.dim(2) > 0;
  const int64_t heads = ranks ? key.dim(2) : 1, rows = ranks ? key.dim(0) * key.dim(1) : 0;
  const int64_t v_dim = ranks ? value.dim(3) : 0;
  const int64_t nope = ranks ? kv.dim(-1) / heads - v_dim : -1;
  const int64_t rope = ranks ? key.dim(3) - nope : -1;
  TETRA_CHECK(ranks && nope >= 0 && rope >= 0 && value.numel() == rows * heads * v_dim &&
              kv.numel() == rows * heads * (nope + v_dim) && kv.dim(-1) % heads == 0 &&
              k_pe.numel() == rows * rope)
      << op << ": " << Operand("kv", kv) << ", " << Operand("k_pe", k_pe) << ", "
      << Operand("key", key) << ", " << Operand("value", value);
  SameFloatDtype(op, {{"key", key}, {"kv", kv}, {"k_pe", k_pe}, {"value", value}});
  return {.rows = rows, .heads = heads, .nope = nope, .rope = rope, .value = v_dim};
}

void CheckAttention(const char* op, const AttentionShape& s, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout,
                    const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  TETRA_CHECK(!s.causal || s.keys() == s.seq)
      << op << ": causal attention of " << s.seq << " queries over " << s.keys()
      << " keys; the causal mask needs as many keys as queries"
      << "\nhint: set kv_seq to 0 (or " << s.seq << "), or causal to false";
  const int64_t keys = s.keys(), dv_dim = s.value_dim();
  const bool backward = dout.defined();
  TETRA_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0 && s.head_dim > 0 && dv_dim > 0 &&
              keys > 0)
      << op << ": " << s.q_heads << " query heads over " << s.kv_heads << " key-value heads, D "
      << s.head_dim << ", Dv " << dv_dim << ", " << keys
      << " keys: query heads a multiple of the key-value heads, sizes positive";
  TETRA_CHECK(q.numel() == s.batch * s.seq * s.q_heads * s.head_dim &&
              k.numel() == s.batch * keys * s.kv_heads * s.head_dim &&
              v.numel() == s.batch * keys * s.kv_heads * dv_dim &&
              out.numel() == s.batch * s.seq * s.q_heads * dv_dim &&
              lse.numel() == s.batch * s.q_heads * s.seq &&
              (!backward || (dout.numel() == out.numel() && dq.numel() == q.numel() &&
                             dk.numel() == k.numel() && dv.numel() == v.numel())))
      << op << ": tensors q " << ShapeString(q.shape()) << ", k " << ShapeString(k.shape())
      << ", v " << ShapeString(v.shape()) << ", out " << ShapeString(out.shape()) << ", lse "
      << ShapeString(lse.shape()) << " do not fit (B " << s.batch << ", T " << s.seq << ", Tk "
      << keys << ", Hq " << s.q_heads << ", Hkv " << s.kv_heads << ", D " << s.head_dim << ", Dv "
      << dv_dim << ")";
  SameFloatDtype(op, {{"q", q},
                      {"k", k},
                      {"v", v},
                      {"out", out},
                      {"dout", dout},
                      {"dq", dq},
                      {"dk", dk},
                      {"dv", dv}});
  ExactDtype(op, {"lse", lse}, DType::kF32, "a statistic");
  // The device's grid: a row of blocks per (query or key-value) head, a layer per sequence.
  GridYz(op, "query heads", s.q_heads);
  GridYz(op, "sequences", s.batch);
}

void CheckAttentionMerge(const Tensor& part_out, const Tensor& part_lse, const Tensor& out,
                         const Tensor& lse) {
  const bool fits = out.rank() == 4 && part_out.numel() == out.numel() &&
                    lse.numel() == out.dim(0) * out.dim(1) * out.dim(2) &&
                    part_lse.numel() == lse.numel();
  TETRA_CHECK(fits && out.dtype() == DType::kF32 && lse.dtype() == DType::kF32 &&
              part_lse.dtype() == DType::kF32 && IsFloat(part_out.dtype()))
      << "attention_merge: " << Operand("part_out", part_out) << ", "
      << Operand("part_lse", part_lse) << " into " << Operand("out", out) << ", "
      << Operand("lse", lse)
      << ": out (B, T, H, Dv) and the lse (B, H, T) fp32, part_out as out in fp32 or bf16";
}

void CheckSwiglu(const char* op, const std::vector<const Tensor*>& operands) {
  const Tensor& first = *operands.front();
  static constexpr const char* kNames[] = {"first", "second", "third", "fourth", "fifth"};
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = *operands[i];
    TETRA_CHECK(t.numel() == first.numel()) << op << ": " << Operand(kNames[i], t) << " but "
                                            << Operand(kNames[0], first) << "; one size for all";
    SameFloatDtype(op, {{kNames[0], first}, {kNames[i], t}});
  }
}

std::pair<int64_t, int64_t> CheckSwigluPacked(const char* op, const Tensor& gate_up,
                                              const Tensor& out, const Tensor& dgate_up) {
  const int64_t width = out.rank() == 0 ? 0 : out.dim(-1);
  const int64_t rows = width == 0 ? 0 : out.numel() / width;
  TETRA_CHECK(gate_up.rank() >= 1 && gate_up.dim(-1) == 2 * width &&
              gate_up.numel() == 2 * out.numel() &&
              (!dgate_up.defined() || dgate_up.numel() == gate_up.numel()))
      << op << ": " << Operand("gate_up", gate_up) << " is not (rows, 2 x " << width << ") for "
      << Operand("out", out) << " (and " << Operand("dgate_up", dgate_up) << ")";
  SameFloatDtype(op, {{"gate_up", gate_up}, {"out", out}, {"dgate_up", dgate_up}});
  return {rows, width};
}

void CheckCrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits,
                       int64_t vocab_size) {
  TETRA_CHECK(logits.rank() >= 1 && vocab_size > 0 && vocab_size <= logits.dim(-1))
      << "cross-entropy over " << vocab_size << " of the columns of " << Operand("logits", logits);
  TETRA_CHECK(targets.dtype() == DType::kI32 && targets.numel() == Rows(logits) &&
              (!dlogits.defined() || dlogits.numel() == logits.numel()))
      << "cross-entropy: " << Operand("logits", logits) << ", " << Operand("targets", targets)
      << " (int32, a row each), " << Operand("dlogits", dlogits);
  SameFloatDtype("cross-entropy", {{"logits", logits}, {"dlogits", dlogits}});
}

void CheckCrossEntropyRowStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                               const Tensor& row_max, const Tensor& target_logit) {
  const int64_t rows = Rows(logits);
  TETRA_CHECK(logits.rank() >= 1 && logits.dim(-1) > 0 && targets.dtype() == DType::kI32 &&
              targets.numel() == rows && row_max.numel() == rows && target_logit.numel() == rows &&
              row_max.dtype() == DType::kF32 && target_logit.dtype() == DType::kF32 &&
              vocab_begin >= 0)
      << "cross-entropy row stats: " << Operand("logits", logits) << " of ids from " << vocab_begin
      << ", " << Operand("targets", targets) << ", " << Operand("row_max", row_max) << ", "
      << Operand("target_logit", target_logit);
  SameFloatDtype("cross-entropy row stats", {{"logits", logits}});
}

void CheckCrossEntropySumExp(const Tensor& logits, int64_t vocab_begin, const Tensor& row_max,
                             const Tensor& sum_exp) {
  const int64_t rows = Rows(logits);
  TETRA_CHECK(logits.rank() >= 1 && logits.dim(-1) > 0 && row_max.numel() == rows &&
              row_max.dtype() == DType::kF32 && sum_exp.numel() == rows &&
              sum_exp.dtype() == DType::kF64 && vocab_begin >= 0)
      << "cross-entropy sum of exps: " << Operand("logits", logits) << " of ids from "
      << vocab_begin << ", " << Operand("row_max", row_max) << ", sums "
      << Operand("sum_exp", sum_exp) << " (fp64)";
  SameFloatDtype("cross-entropy sum of exps", {{"logits", logits}});
}

void CheckCrossEntropyLoss(const Tensor& targets, const Tensor& row_max, const Tensor& target_logit,
                           const Tensor& sum_exp) {
  TETRA_CHECK(targets.numel() == row_max.numel() && targets.dtype() == DType::kI32 &&
              target_logit.numel() == row_max.numel() && sum_exp.numel() == row_max.numel() &&
              row_max.dtype() == DType::kF32 && target_logit.dtype() == DType::kF32 &&
              sum_exp.dtype() == DType::kF64)
      << "cross-entropy loss: " << Operand("targets", targets) << ", "
      << Operand("row_max", row_max) << ", " << Operand("target_logit", target_logit) << ", "
      << Operand("sum_exp", sum_exp);
}

void CheckCrossEntropyGradient(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                               const Tensor& row_max, const Tensor& sum_exp,
                               const Tensor& dlogits) {
  const int64_t rows = Rows(logits);
  TETRA_CHECK(logits.rank() >= 1 && logits.dim(-1) > 0 && targets.numel() == rows &&
              targets.dtype() == DType::kI32 && row_max.numel() == rows &&
              row_max.dtype() == DType::kF32 && sum_exp.numel() == rows &&
              sum_exp.dtype() == DType::kF64 && dlogits.numel() == logits.numel() &&
              vocab_begin >= 0)
      << "cross-entropy gradient: " << Operand("logits", logits) << " of ids from " << vocab_begin
      << ", " << Operand("dlogits", dlogits);
  SameFloatDtype("cross-entropy gradient", {{"logits", logits}, {"dlogits", dlogits}});
}

void CheckRouter(const char* op, const RouterSpec& spec, const Tensor& scores,
                 const Tensor& expert) {
  TETRA_CHECK(spec.num_experts > 0 && spec.num_experts <= kMaxRouterExperts && spec.top_k > 0 &&
              spec.top_k <= spec.num_experts && spec.n_group >= 1 &&
              spec.num_experts % spec.n_group == 0 && spec.topk_group >= 1 &&
              spec.topk_group <= spec.n_group)
      << op << ": " << spec.num_experts << " experts (at most " << kMaxRouterExperts
      << ", a device thread each), top " << spec.top_k << ", " << spec.n_group << " groups, top "
      << spec.topk_group << " groups";
  TETRA_CHECK(scores.rank() == 2 && scores.dim(1) == spec.num_experts &&
              scores.dtype() == DType::kF32 &&
              (!expert.defined() ||
               (expert.dtype() == DType::kI32 && expert.numel() == scores.dim(0) * spec.top_k)))
      << op << ": " << Operand("scores", scores) << " for " << spec.num_experts
      << " experts (fp32: the router runs in "
      << "fp32), " << Operand("choices", expert) << " of top " << spec.top_k << " (int32)";
}

void CheckRouterTopK(const RouterSpec& spec, const Tensor& scores, const Tensor& bias,
                     const Tensor& expert, const Tensor& weights) {
  CheckRouter("router top-k", spec, scores, expert);
  TETRA_CHECK(bias.numel() == spec.num_experts && weights.numel() == expert.numel())
      << "router top-k: " << Operand("bias", bias) << ", " << Operand("weights", weights);
  ExactDtype("router top-k", {"bias", bias}, DType::kF32, "the router runs in fp32");
  ExactDtype("router top-k", {"weights", weights}, DType::kF32, "the router runs in fp32");
}

void CheckRouterWeightsBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& expert,
                                const Tensor& dweights, const Tensor& dscores) {
  CheckRouter("router weights backward", spec, scores, expert);
  TETRA_CHECK(dweights.numel() == expert.numel() && dscores.shape() == scores.shape())
      << "router weights backward: " << Operand("dweights", dweights) << ", "
      << Operand("dscores", dscores);
  ExactDtype("router weights backward", {"dweights", dweights}, DType::kF32,
             "the router runs in fp32");
  ExactDtype("router weights backward", {"dscores", dscores}, DType::kF32,
             "the router runs in fp32");
}

void CheckRouterScoresBackward(const RouterSpec& spec, const Tensor& scores, const Tensor& dscores,
                               const Tensor& dlogits) {
  CheckRouter("router scores backward", spec, scores, Tensor());
  TETRA_CHECK(dscores.shape() == scores.shape() && dlogits.shape() == scores.shape())
      << "router scores backward: " << Operand("dscores", dscores) << ", "
      << Operand("dlogits", dlogits);
  ExactDtype("router scores backward", {"dscores", dscores}, DType::kF32,
             "the router runs in fp32");
  ExactDtype("router scores backward", {"dlogits", dlogits}, DType::kF32,
             "the router runs in fp32");
}

void CheckSequenceBalance(const char* op, const RouterSpec& spec, const Tensor& scores,
                          const Tensor& expert, int64_t batch, int64_t seq, int64_t whole_seq,
                          const Tensor& stats, const Tensor& dscores) {
  CheckRouter(op, spec, scores, expert);
  TETRA_CHECK(batch >= 0 && seq >= 0 && whole_seq >= seq && scores.dim(0) == batch * seq)
      << op << " over " << scores.dim(0) << " tokens, not " << batch << " x " << seq
      << " of sequences of " << whole_seq;
  TETRA_CHECK(stats.dtype() == DType::kF64 && stats.rank() == 2 && stats.dim(0) == batch &&
              stats.dim(1) == 2 * spec.num_experts)
      << op << ": " << Operand("stats", stats) << ", not fp64 (" << batch << ", "
      << 2 * spec.num_experts << ")";
  TETRA_CHECK(!dscores.defined() || dscores.shape() == scores.shape())
      << op << ": " << Operand("dscores", dscores) << " for " << Operand("scores", scores);
  ExactDtype(op, {"dscores", dscores}, DType::kF32, "the router runs in fp32");
}

void CheckCountExpertLoads(const RouterSpec& spec, const Tensor& expert, const Tensor& loads) {
  TETRA_CHECK(spec.top_k > 0 && expert.dtype() == DType::kI32 && expert.numel() % spec.top_k == 0 &&
              loads.dtype() == DType::kI32 && loads.numel() == spec.num_experts)
      << "expert loads: " << Operand("choices", expert) << ", " << Operand("loads", loads)
      << " (int32)";
}

void CheckUpdateRouterBias(const Tensor& loads, const Tensor& bias) {
  TETRA_CHECK(loads.dtype() == DType::kI32 && bias.dtype() == DType::kF32 &&
              loads.numel() == bias.numel())
      << "router bias update: " << Operand("loads", loads) << " (int32), " << Operand("bias", bias)
      << " (fp32)";
}

void CheckDispatchOrder(const Tensor& expert, const Tensor& weights, const Tensor& send_row,
                        const Tensor& send_token, const Tensor& expert_counts) {
  TETRA_CHECK(expert.rank() == 2 && expert.dtype() == DType::kI32 &&
              weights.shape() == expert.shape() && send_row.numel() == expert.numel() &&
              send_token.numel() == expert.numel() && send_row.dtype() == DType::kI32 &&
              send_token.dtype() == DType::kI32 && expert_counts.dtype() == DType::kI32 &&
              (expert.numel() == 0 || expert_counts.numel() > 0))
      << "dispatch order: " << Operand("choices", expert) << ", " << Operand("send rows", send_row)
      << ", " << Operand("send tokens", send_token) << ", "
      << Operand("expert counts", expert_counts) << " (int32)";
  ExactDtype("dispatch order", {"weights", weights}, DType::kF32, "the router runs in fp32");
  TETRA_CHECK(expert.numel() <= std::numeric_limits<int32_t>::max())
      << "dispatch order: " << expert.numel() << " (token, choice) pairs; rows are int32 indices";
}

void CheckGatherRows(const Tensor& src, const Tensor& index, const Tensor& dst) {
  TETRA_CHECK(src.rank() >= 1 && index.dtype() == DType::kI32 &&
              dst.numel() == index.numel() * src.dim(-1))
      << "gather rows: " << Operand("index", index) << " rows of " << Operand("src", src)
      << " into " << Operand("dst", dst);
  SameFloatDtype("gather rows", {{"src", src}, {"dst", dst}});
}

void CheckCombineRows(const Tensor& src, const Tensor& index, const Tensor& weights,
                      const Tensor& dst) {
  const int64_t c = dst.rank() == 0 ? 0 : dst.dim(-1);
  TETRA_CHECK(c > 0 && index.rank() == 2 && index.dim(0) == Rows(dst) &&
              index.dtype() == DType::kI32 && src.rank() >= 1 && src.dim(-1) == c &&
              (!weights.defined() || weights.shape() == index.shape()))
      << "combine rows: " << Operand("src", src) << " by " << Operand("index", index) << " into "
      << Operand("dst", dst);
  SameFloatDtype("combine rows", {{"src", src}, {"dst", dst}});
  ExactDtype("combine rows", {"weights", weights}, DType::kF32, "routing weights stay fp32");
}

void CheckCombineRowsBackward(const Tensor& ddst, const Tensor& src, const Tensor& index,
                              const Tensor& weights, const Tensor& dsrc, const Tensor& dweights) {
  const int64_t c = ddst.rank() == 0 ? 0 : ddst.dim(-1);
  TETRA_CHECK(c > 0 && index.dtype() == DType::kI32 && index.rank() == 2 &&
              index.dim(0) == Rows(ddst) && weights.shape() == index.shape() &&
              dweights.numel() == index.numel() && dsrc.shape() == src.shape() && src.rank() >= 1 &&
              src.dim(-1) == c)
      << "combine rows backward: " << Operand("d out", ddst) << ", " << Operand("rows", src) << ", "
      << Operand("index", index);
  SameFloatDtype("combine rows backward", {{"d out", ddst}, {"rows", src}, {"d rows", dsrc}});
  ExactDtype("combine rows backward", {"weights", weights}, DType::kF32,
             "routing weights stay fp32");
  ExactDtype("combine rows backward", {"dweights", dweights}, DType::kF32,
             "routing weights stay fp32");
}

void CheckAdamW(const AdamWTensors& t) {
  const int64_t n = t.param.numel();
  TETRA_CHECK(t.grad.numel() == n && t.m.numel() == n && t.v.numel() == n &&
              (!t.param_bf16.defined() || t.param_bf16.numel() == n))
      << "adamw: " << Operand("param", t.param) << ", " << Operand("grad", t.grad) << ", "
      << Operand("m", t.m) << ", " << Operand("v", t.v) << ", "
      << Operand("bf16 copy", t.param_bf16) << ": one size";
  for (const Named& o :
       {Named{"param", t.param}, Named{"grad", t.grad}, Named{"m", t.m}, Named{"v", t.v}}) {
    ExactDtype("adamw", o, DType::kF32, "master weights, gradients and moments are fp32");
  }
  ExactDtype("adamw", {"bf16 copy", t.param_bf16}, DType::kBF16,
             "the compute copy of mixed precision");
}

void CheckFloat(const char* op, const Tensor& x) { SameFloatDtype(op, {{"x", x}}); }

void CheckAdd(const Tensor& x, const Tensor& y, const Tensor& out) {
  TETRA_CHECK(x.numel() == y.numel() && x.dtype() == y.dtype() && out.numel() == x.numel() &&
              out.dtype() == x.dtype() && (IsFloat(x.dtype()) || x.dtype() == DType::kF64))
      << "add " << Operand("x", x) << " and " << Operand("y", y) << " into " << Operand("out", out)
      << ": one size and one dtype, fp32, bf16 or fp64";
}

void CheckCast(const Tensor& src, const Tensor& dst) {
  TETRA_CHECK(src.numel() == dst.numel() && IsFloat(src.dtype()) && IsFloat(dst.dtype()))
      << "cast " << Operand("src", src) << " into " << Operand("dst", dst)
      << ": one size, each fp32 or bf16 (the device converts only those)";
}

}  // namespace tetra::ops
