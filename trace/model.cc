#include "trace/model.h"

#include <array>
#include <cctype>
#include <utility>

namespace braid {
namespace {

template <typename E, size_t N>
std::optional<E> lookup(const std::array<std::pair<E, std::string_view>, N>& table,
                        std::string_view s) {
  for (const auto& [e, name] : table)
    if (name == s) return e;
  return std::nullopt;
}
template <typename E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E e) {
  for (const auto& [v, name] : table)
    if (v == e) return name;
  return "unknown";
}

constexpr std::array<std::pair<RunKind, std::string_view>, 4> kRunKinds{{
    {RunKind::Captured, "captured"},
    {RunKind::Imported, "imported"},
    {RunKind::Replayed, "replayed"},
    {RunKind::Simulated, "simulated"},
}};

constexpr std::array<std::pair<CollOp, std::string_view>, kNumCollOps> kCollOps{{
    {CollOp::Unknown, "unknown"},
    {CollOp::AllReduce, "allreduce"},
    {CollOp::AllGather, "allgather"},
    {CollOp::ReduceScatter, "reducescatter"},
    {CollOp::Broadcast, "broadcast"},
    {CollOp::Reduce, "reduce"},
    {CollOp::AllToAll, "alltoall"},
    {CollOp::Send, "send"},
    {CollOp::Recv, "recv"},
    {CollOp::SendRecv, "sendrecv"},
    {CollOp::Gather, "gather"},
    {CollOp::Scatter, "scatter"},
    {CollOp::Barrier, "barrier"},
    {CollOp::ManyToMany, "manytomany"},
}};

constexpr std::array<std::pair<Category, std::string_view>, 13> kCategories{{
    {Category::Other, "other"},
    {Category::Gemm, "gemm"},
    {Category::Attention, "attention"},
    {Category::Elementwise, "elementwise"},
    {Category::Memory, "memory"},
    {Category::CommAllReduce, "comm.allreduce"},
    {Category::CommAllGather, "comm.allgather"},
    {Category::CommReduceScatter, "comm.reducescatter"},
    {Category::CommBroadcast, "comm.broadcast"},
    {Category::CommReduce, "comm.reduce"},
    {Category::CommAllToAll, "comm.alltoall"},
    {Category::CommSendRecv, "comm.sendrecv"},
    {Category::CommOther, "comm.other"},
}};

}  // namespace

std::string_view to_string(RunKind k) { return name_of(kRunKinds, k); }
std::optional<RunKind> run_kind_from_string(std::string_view s) { return lookup(kRunKinds, s); }
std::string_view to_string(CollOp op) { return name_of(kCollOps, op); }
std::optional<CollOp> coll_op_from_string(std::string_view s) { return lookup(kCollOps, s); }
std::string_view to_string(Category c) { return name_of(kCategories, c); }
std::optional<Category> category_from_string(std::string_view s) {
  return lookup(kCategories, s);
}

Category comm_category(CollOp op) {
  switch (op) {
    case CollOp::AllReduce: return Category::CommAllReduce;
    case CollOp::AllGather: return Category::CommAllGather;
    case CollOp::ReduceScatter: return Category::CommReduceScatter;
    case CollOp::Broadcast: return Category::CommBroadcast;
    case CollOp::Reduce: return Category::CommReduce;
    case CollOp::AllToAll: return Category::CommAllToAll;
    case CollOp::Send:
    case CollOp::Recv:
    case CollOp::SendRecv:
    case CollOp::ManyToMany: return Category::CommSendRecv;
    default: return Category::CommOther;
  }
}

std::string_view to_string(ApiKind k) {
  switch (k) {
    case ApiKind::CpuOp: return "cpu_op";
    case ApiKind::Runtime: return "runtime";
    case ApiKind::Driver: return "driver";
    case ApiKind::Python: return "python";
    default: return "other";
  }
}

std::string_view to_string(MemKind k) {
  switch (k) {
    case MemKind::HtoD: return "HtoD";
    case MemKind::DtoH: return "DtoH";
    case MemKind::DtoD: return "DtoD";
    case MemKind::HtoH: return "HtoH";
    case MemKind::PtoP: return "PtoP";
    case MemKind::Memset: return "memset";
    default: return "unknown";
  }
}

std::string_view to_string(EtJoin j) {
  switch (j) {
    case EtJoin::RecordId:
      return "rf_id";
    case EtJoin::Sequence:
      return "seq";
    case EtJoin::Order:
      return "order";
    default:
      return "none";
  }
}

std::optional<EtJoin> et_join_from_string(std::string_view s) {
  for (EtJoin j : {EtJoin::None, EtJoin::RecordId, EtJoin::Sequence, EtJoin::Order})
    if (to_string(j) == s) return j;
  return std::nullopt;
}

std::string_view to_string(EtOpKind k) {
  switch (k) {
    case EtOpKind::View:
      return "view";
    case EtOpKind::Alloc:
      return "alloc";
    case EtOpKind::Comm:
      return "comm";
    case EtOpKind::Annotation:
      return "annotation";
    default:
      return "op";
  }
}

std::optional<EtOpKind> et_op_kind_from_string(std::string_view s) {
  for (EtOpKind k :
       {EtOpKind::Op, EtOpKind::View, EtOpKind::Alloc, EtOpKind::Comm, EtOpKind::Annotation})
    if (to_string(k) == s) return k;
  return std::nullopt;
}

std::string_view to_string(EtExtent e) {
  switch (e) {
    case EtExtent::Strides:
      return "strides";
    case EtExtent::View:
      return "view";
    case EtExtent::Bound:
      return "bound";
    default:
      return "dense";
  }
}

std::optional<EtExtent> et_extent_from_string(std::string_view s) {
  for (EtExtent e : {EtExtent::Strides, EtExtent::View, EtExtent::Dense, EtExtent::Bound})
    if (to_string(e) == s) return e;
  return std::nullopt;
}

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    default: return "error";
  }
}

// Framework spellings (PyTorch scalar types, NCCL types, Chakra) to one vocabulary.
std::string normalize_dtype(std::string_view name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n.rfind("c10::", 0) == 0) n = n.substr(5);
  if (n.rfind("torch.", 0) == 0) n = n.substr(6);
  if (n.rfind("nccl", 0) == 0) n = n.substr(4);
  if (n == "unsigned char") return "uint8";  // Kineto's "Input type" names
  if (n == "signed char") return "int8";
  if (n == "long int" || n == "long long" || n == "long long int") return "int64";  // ET types
  if (n == "short int") return "int16";
  if (n == "unsigned int") return "uint32";
  static const std::pair<std::string_view, std::string_view> kAliases[] = {
      {"float", "float32"},   {"float32", "float32"}, {"float16", "float16"},
      {"half", "float16"},    {"bfloat16", "bfloat16"}, {"double", "float64"},
      {"float64", "float64"}, {"long", "int64"},      {"int64", "int64"},
      {"int", "int32"},       {"int32", "int32"},     {"short", "int16"},
      {"char", "int8"},       {"int8", "int8"},       {"byte", "uint8"},
      {"uint8", "uint8"},     {"bool", "bool"},       {"uint32", "uint32"},
      {"uint64", "uint64"},   {"float8_e4m3fn", "float8_e4m3"}, {"float8_e5m2", "float8_e5m2"},
      {"fp8e4m3", "float8_e4m3"}, {"fp8e5m2", "float8_e5m2"}};
  for (const auto& [alias, norm] : kAliases)
    if (n == alias) return std::string(norm);
  return std::string(name);
}

int dtype_size(std::string_view t) {
  if (t == "float64" || t == "int64" || t == "uint64") return 8;
  if (t == "float32" || t == "int32" || t == "uint32") return 4;
  if (t == "float16" || t == "bfloat16" || t == "int16") return 2;
  if (t == "int8" || t == "uint8" || t == "bool" || t == "float8_e4m3" || t == "float8_e5m2")
    return 1;
  return 0;
}

}  // namespace braid
