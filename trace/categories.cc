#include "trace/categories.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

namespace braid {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
bool has(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

CollOp coll_from_nccl_token(std::string_view t) {
  if (t == "AllReduce") return CollOp::AllReduce;
  if (t == "AllGather") return CollOp::AllGather;
  if (t == "ReduceScatter") return CollOp::ReduceScatter;
  if (t == "Broadcast") return CollOp::Broadcast;
  if (t == "Reduce") return CollOp::Reduce;
  if (t == "SendRecv" || t == "Send" || t == "Recv") return CollOp::SendRecv;
  if (t == "AllToAll" || t == "AlltoAll") return CollOp::AllToAll;
  return CollOp::Unknown;
}

// The ordered table of name rules: the first rule whose every needle is found (in the lower-cased
// name) decides. Order matters: attention before GEMM (flash kernels call into MMA code),
// memory before elementwise.
struct Rule {
  std::array<std::string_view, 2> needles;  // both must occur; "" matches anything
  Category category;
};
constexpr Rule kRules[] = {
    {{"flash", ""}, Category::Attention},
    {{"fmha", ""}, Category::Attention},
    {{"attention", ""}, Category::Attention},
    {{"attn", ""}, Category::Attention},
    {{"sdpa", ""}, Category::Attention},
    {{"mha", "fwd"}, Category::Attention},
    {{"mha", "bwd"}, Category::Attention},
    {{"memcpy", ""}, Category::Memory},
    {{"memset", ""}, Category::Memory},
    {{"copy_kernel", ""}, Category::Memory},
    {{"cat_array", ""}, Category::Memory},
    {{"catarraybatchedcopy", ""}, Category::Memory},
    {{"nchwtonhwc", ""}, Category::Memory},
    {{"nhwctonchw", ""}, Category::Memory},
    {{"gemm", ""}, Category::Gemm},
    {{"sm80_xmma", ""}, Category::Gemm},
    {{"sm90_xmma", ""}, Category::Gemm},
    {{"xmma_", ""}, Category::Gemm},
    {{"cutlass", ""}, Category::Gemm},
    {{"cublas", ""}, Category::Gemm},
    {{"matmul", ""}, Category::Gemm},
    {{"nvjet", ""}, Category::Gemm},
    {{"wgmma", ""}, Category::Gemm},
    {{"s884", ""}, Category::Gemm},
    {{"s1688", ""}, Category::Gemm},
    {{"s16816", ""}, Category::Gemm},
    {{"h884", ""}, Category::Gemm},
    {{"h1688", ""}, Category::Gemm},
    {{"h16816", ""}, Category::Gemm},
    {{"conv", "fprop"}, Category::Gemm},
    {{"conv", "dgrad"}, Category::Gemm},
    {{"conv", "wgrad"}, Category::Gemm},
    {{"transpose", ""}, Category::Memory},
    {{"elementwise", ""}, Category::Elementwise},
    {{"vectorized", ""}, Category::Elementwise},
    {{"norm", ""}, Category::Elementwise},
    {{"bn_fw", ""}, Category::Elementwise},
    {{"bn_bw", ""}, Category::Elementwise},
    {{"multi_tensor_apply", ""}, Category::Elementwise},
    {{"pool", ""}, Category::Elementwise},
    {{"unrolled_elementwise", ""}, Category::Elementwise},
    {{"index", "kernel"}, Category::Elementwise},
    {{"embedding", ""}, Category::Elementwise},
    {{"cross_entropy", ""}, Category::Elementwise},
    {{"softmax", ""}, Category::Elementwise},
    {{"reduce_kernel", ""}, Category::Elementwise},
    {{"activation", ""}, Category::Elementwise},
    {{"gelu", ""}, Category::Elementwise},
    {{"silu", ""}, Category::Elementwise},
    {{"relu", ""}, Category::Elementwise},
    {{"dropout", ""}, Category::Elementwise},
    {{"adam", ""}, Category::Elementwise},
    {{"triton_poi", ""}, Category::Elementwise},
    {{"triton_per", ""}, Category::Elementwise},
    {{"triton_red", ""}, Category::Elementwise},
};

}  // namespace

std::optional<NcclKernelName> parse_nccl_kernel_name(std::string_view name) {
  std::string_view rest;
  bool dev_form = false;
  if (name.rfind("ncclDevKernel_", 0) == 0) {
    rest = name.substr(14);
    dev_form = true;
  } else if (name.rfind("ncclKernel_", 0) == 0) {
    rest = name.substr(11);
  } else {
    return std::nullopt;
  }
  if (auto paren = rest.find('('); paren != std::string_view::npos) rest = rest.substr(0, paren);
  // Tokens separated by '_': Coll, ALGO, PROTO, [RedOp, type...]
  std::vector<std::string_view> tok;
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t u = rest.find('_', pos);
    if (u == std::string_view::npos) u = rest.size();
    tok.push_back(rest.substr(pos, u - pos));
    pos = u + 1;
  }
  if (tok.empty() || tok[0].empty()) return std::nullopt;
  NcclKernelName out;
  out.op = coll_from_nccl_token(tok[0]);
  // The remaining tokens come in either order: <ALGO>_<PROTO>_<RedOp>_<type> (old) or
  // <RedOp>_<type>_<ALGO>_<PROTO> (2.19+ reduction kernels), so classify each by vocabulary.
  static const std::string_view kAlgos[] = {"RING", "TREE", "NVLS", "COLLNET", "PAT", "DIRECT", "CHAIN"};
  static const std::string_view kProtos[] = {"LL", "LL128", "SIMPLE"};
  static const std::string_view kRedOps[] = {"Sum", "Prod", "Max", "Min", "PreMulSum", "SumPostDiv", "MinMax"};
  std::string type;
  for (size_t i = 1; i < tok.size(); ++i) {
    std::string_view t = tok[i];
    if (std::find(std::begin(kAlgos), std::end(kAlgos), t) != std::end(kAlgos)) {
      out.algo += out.algo.empty() ? std::string(t) : "_" + std::string(t);  // NVLS_TREE, COLLNET_DIRECT
    } else if (std::find(std::begin(kProtos), std::end(kProtos), t) != std::end(kProtos)) {
      out.proto = std::string(t);
    } else if (std::find(std::begin(kRedOps), std::end(kRedOps), t) != std::end(kRedOps)) {
      out.redop = std::string(t);
    } else if (!t.empty()) {
      if (!type.empty()) type += '_';
      type += t;  // int8_t arrives as "int8" + "t"
    }
  }
  if (type.size() > 2 && type.substr(type.size() - 2) == "_t") type.resize(type.size() - 2);
  if (type == "half" || type == "f16") type = "float16";
  if (type == "__nv_bfloat16" || type == "_nv_bfloat16" || type == "bf16") type = "bfloat16";
  if (type == "f32") type = "float32";
  if (type == "f64") type = "float64";
  if (type == "i8") type = "int8";
  if (type == "u8") type = "uint8";
  if (type == "i32") type = "int32";
  if (type == "u32") type = "uint32";
  if (type == "i64") type = "int64";
  if (type == "u64") type = "uint64";
  if (!type.empty()) out.dtype = normalize_dtype(type);
  (void)dev_form;
  return out;
}

Category classify_kernel(std::string_view name) {
  if (auto nccl = parse_nccl_kernel_name(name)) return comm_category(nccl->op);
  std::string l = lower(name);
  if (has(l, "nccl")) return Category::CommOther;
  for (const auto& r : kRules) {
    if (has(l, r.needles[0]) && (r.needles[1].empty() || has(l, r.needles[1]))) return r.category;
  }
  return Category::Other;
}

CollOp coll_op_from_framework_name(std::string_view name) {
  std::string l = lower(name);
  // Strip namespaces and decorations: "nccl:all_reduce", "c10d::allreduce_", "_allgather_base".
  if (auto c = l.rfind(':'); c != std::string::npos) l = l.substr(c + 1);
  std::string s;
  for (char ch : l)
    if (ch != '_') s += ch;
  if (s.rfind("allreduce", 0) == 0) return CollOp::AllReduce;
  if (s.rfind("allgather", 0) == 0 || s == "allgatherbase" || s == "allgatherintotensor")
    return CollOp::AllGather;
  if (s.rfind("reducescatter", 0) == 0) return CollOp::ReduceScatter;
  if (s.rfind("alltoall", 0) == 0 || s.rfind("all2all", 0) == 0) return CollOp::AllToAll;
  if (s.rfind("broadcast", 0) == 0) return CollOp::Broadcast;
  if (s.rfind("reduce", 0) == 0) return CollOp::Reduce;
  if (s.rfind("gather", 0) == 0) return CollOp::Gather;
  if (s.rfind("scatter", 0) == 0) return CollOp::Scatter;
  if (s.rfind("barrier", 0) == 0) return CollOp::Barrier;
  if (s == "send") return CollOp::Send;
  if (s == "recv" || s == "recvanysource") return CollOp::Recv;
  if (s == "sendrecv" || s.rfind("batchisendirecv", 0) == 0) return CollOp::SendRecv;
  // "_allgather_base" became "allgatherbase" above; other suffixed forms start with the base.
  return CollOp::Unknown;
}

}  // namespace braid
