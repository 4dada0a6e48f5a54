// The storage elements each tensor argument of an execution trace touches (trace/import/et.h).
//
// A tensor with sizes s and strides d at storage offset o touches elements [o, o + 1 +
// sum((s_i - 1) * d_i)) of its storage (every stride is >= 0 in PyTorch). Schema 1.1.1 records
// the strides; older ETs do not, so the layout of each tensor is followed through the trace in
// the order its ops returned (the file's order, which puts a view's inner as_strided before the
// view op that called it):
//   - a tensor whose strides the file gives: exact (EtExtent::Strides);
//   - the output of a view op (slice, narrow, select, transpose, permute, expand, as_strided,
//     unsqueeze, squeeze, view, split, ...): derived from the strides of the tensor it views
//     (View); when those are not known, bounded by that tensor's range (Bound), which can only
//     make a rewrite's reads larger, never smaller;
//   - the output of any other op: a fresh dense tensor, [offset, offset + numel) (Dense), and
//     contiguous when every tensor the op read was (what PyTorch's allocation of outputs gives);
//   - a tensor first seen as an input with neither: taken as dense (counted: et.layout_assumed).
#include <algorithm>
#include <unordered_map>

#include "trace/import/et.h"

namespace braid::et {
namespace {

using Strides = std::vector<int64_t>;

Strides contiguous(const std::vector<int64_t>& shape) {
  Strides s(shape.size(), 1);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(1, shape[i]);
  }
  return s;
}

bool is_contiguous(const std::vector<int64_t>& shape, const Strides& st) {
  if (shape.size() != st.size()) return false;
  Strides c = contiguous(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && st[i] != c[i]) return false;
  return true;
}

void set_from_strides(TensorValue& t, const Strides& st, EtExtent how) {
  t.strides = st;
  t.extent = how;
  t.lo = t.offset;
  if (t.numel == 0) {
    t.hi = t.lo;
    return;
  }
  int64_t span = 1;
  for (size_t i = 0; i < st.size() && i < t.shape.size(); ++i)
    if (t.shape[i] > 0) span += (t.shape[i] - 1) * std::max<int64_t>(0, st[i]);
  t.hi = t.lo + std::max(span, int64_t(1));
}

void set_dense(TensorValue& t, std::optional<Strides> st) {
  t.extent = EtExtent::Dense;
  t.lo = t.offset;
  t.hi = t.offset + t.numel;
  t.strides = std::move(st);
}

int64_t norm_dim(int64_t d, size_t ndim) { return d < 0 ? d + static_cast<int64_t>(ndim) : d; }

// The first defined tensor among the node's inputs: the tensor a view op views.
const TensorValue* base_of(const Node& n) {
  for (const Arg& a : n.inputs)
    for (const TensorValue& t : a.tensors)
      if (t.defined()) return &t;
  return nullptr;
}

int64_t int_arg(const Node& n, size_t i, int64_t dflt) {
  return i < n.inputs.size() && n.inputs[i].kind == Arg::Kind::Int ? n.inputs[i].i : dflt;
}
const std::vector<int64_t>* ints_arg(const Node& n, size_t i) {
  return i < n.inputs.size() && n.inputs[i].kind == Arg::Kind::IntList ? &n.inputs[i].ints
                                                                       : nullptr;
}

std::string_view op_name(const Node& n) {
  std::string_view s = n.name;
  if (s.rfind("aten::", 0) == 0) s.remove_prefix(6);
  return s;
}

// The strides of view output `out` of node `n` whose base has strides `bs`, or nullopt when the
// op is not one braid derives.
std::optional<Strides> derive(const Node& n, const TensorValue& base, const Strides& bs,
                              const TensorValue& out) {
  const std::string_view op = op_name(n);
  const auto& bsz = base.shape;
  const auto& osz = out.shape;
  const size_t m = bsz.size();
  if (bs.size() != m) return std::nullopt;
  auto same_rank = [&](Strides s) -> std::optional<Strides> {
    if (s.size() != osz.size()) return std::nullopt;
    return s;
  };
  if (op == "as_strided" || op == "_reshape_alias") {
    if (const auto* st = ints_arg(n, 2)) return same_rank(*st);
    return std::nullopt;
  }
  if (op == "slice") {
    int64_t d = norm_dim(int_arg(n, 1, 0), m);
    int64_t step = int_arg(n, 4, 1);
    if (d < 0 || d >= static_cast<int64_t>(m) || step < 1) return std::nullopt;
    Strides s = bs;
    s[d] *= step;
    return same_rank(s);
  }
  if (op == "narrow" || op == "split" || op == "split_with_sizes" || op == "chunk" ||
      op == "unsafe_split" || op == "unsafe_chunk" || op == "tensor_split" || op == "alias" ||
      op == "detach" || op == "detach_" || op == "lift_fresh" || op == "expand_as" ||
      op == "_conj" || op == "resolve_conj" || op == "resolve_neg")
    return osz == bsz || osz.size() == m ? same_rank(bs) : std::nullopt;
  if (op == "select" || op == "unbind") {
    int64_t d = norm_dim(int_arg(n, 1, 0), m);
    if (d < 0 || d >= static_cast<int64_t>(m)) return std::nullopt;
    Strides s = bs;
    s.erase(s.begin() + d);
    return same_rank(s);
  }
  if (op == "transpose" || op == "swapaxes" || op == "swapdims") {
    int64_t a = norm_dim(int_arg(n, 1, 0), m), b = norm_dim(int_arg(n, 2, 1), m);
    if (a < 0 || b < 0 || a >= static_cast<int64_t>(m) || b >= static_cast<int64_t>(m))
      return std::nullopt;
    Strides s = bs;
    std::swap(s[a], s[b]);
    return same_rank(s);
  }
  if (op == "t" || op == "numpy_T") {
    Strides s = bs;
    std::reverse(s.begin(), s.end());
    return same_rank(s);
  }
  if (op == "permute") {
    const auto* dims = ints_arg(n, 1);
    if (!dims || dims->size() != m) return std::nullopt;
    Strides s;
    for (int64_t d : *dims) {
      int64_t k = norm_dim(d, m);
      if (k < 0 || k >= static_cast<int64_t>(m)) return std::nullopt;
      s.push_back(bs[k]);
    }
    return same_rank(s);
  }
  if (op == "expand") {
    if (osz.size() < m) return std::nullopt;
    Strides s(osz.size(), 0);
    const size_t lead = osz.size() - m;
    for (size_t i = lead; i < osz.size(); ++i) {
      size_t j = i - lead;
      s[i] = bsz[j] == 1 && osz[i] != 1 ? 0 : bs[j];
    }
    return s;
  }
  if (op == "unsqueeze") {
    int64_t d = int_arg(n, 1, 0);
    if (d < 0) d += static_cast<int64_t>(m) + 1;
    if (d < 0 || d > static_cast<int64_t>(m)) return std::nullopt;
    Strides s = bs;
    int64_t st = d < static_cast<int64_t>(m) ? bs[d] * std::max<int64_t>(1, bsz[d]) : 1;
    s.insert(s.begin() + d, st);
    return same_rank(s);
  }
  if (op == "squeeze" || op == "squeeze_") {
    // Drop size-1 dims of the base until the output's rank is reached.
    Strides s;
    size_t drop = m >= osz.size() ? m - osz.size() : 0;
    for (size_t i = 0; i < m; ++i) {
      if (drop > 0 && bsz[i] == 1) {
        --drop;
        continue;
      }
      s.push_back(bs[i]);
    }
    return same_rank(s);
  }
  if (op == "view" || op == "reshape" || op == "_unsafe_view" || op == "flatten" ||
      op == "unflatten" || op == "view_as" || op == "reshape_as") {
    if (is_contiguous(bsz, bs)) return contiguous(osz);
    return std::nullopt;
  }
  return std::nullopt;
}

struct Known {
  int64_t storage = 0, offset = 0, numel = 0;
  std::vector<int64_t> shape;
  std::optional<Strides> strides;
  int64_t lo = 0, hi = 0;
  EtExtent how = EtExtent::Dense;
};

bool same(const Known& k, const TensorValue& t) {
  return k.storage == t.storage && k.offset == t.offset && k.numel == t.numel && k.shape == t.shape;
}

void take(TensorValue& t, const Known& k) {
  t.lo = k.lo;
  t.hi = k.hi;
  t.extent = k.how;
  if (!t.strides) t.strides = k.strides;
}

Known remember(const TensorValue& t) {
  return {t.storage, t.offset, t.numel, t.shape, t.strides, t.lo, t.hi, t.extent};
}

}  // namespace

bool is_view_op(const Node& n) {
  size_t arrow = n.schema.find("->");
  if (arrow != std::string::npos) {
    std::string_view ret(n.schema);
    ret.remove_prefix(arrow + 2);
    for (size_t p = ret.find("Tensor("); p != std::string_view::npos;
         p = ret.find("Tensor(", p + 1)) {
      size_t close = ret.find(')', p);
      if (close == std::string_view::npos) break;
      std::string_view alias = ret.substr(p + 7, close - p - 7);
      if (!alias.empty() && alias.find('!') == std::string_view::npos) return true;
    }
    return false;
  }
  static const std::string_view kViews[] = {"as_strided",   "_reshape_alias",
                                            "slice",        "narrow",
                                            "select",       "unbind",
                                            "split",        "split_with_sizes",
                                            "chunk",        "tensor_split",
                                            "transpose",    "swapaxes",
                                            "swapdims",     "t",
                                            "numpy_T",      "permute",
                                            "expand",       "expand_as",
                                            "unsqueeze",    "squeeze",
                                            "view",         "reshape",
                                            "_unsafe_view", "flatten",
                                            "unflatten",    "view_as",
                                            "reshape_as",   "alias",
                                            "detach",       "diagonal",
                                            "unfold",       "movedim",
                                            "real",         "imag",
                                            "view_as_real", "view_as_complex"};
  std::string_view op = op_name(n);
  return std::find(std::begin(kViews), std::end(kViews), op) != std::end(kViews);
}

EtOpKind kind_of(const Node& n) {
  std::string_view name = n.name;
  if (name.rfind("c10d::", 0) == 0 || name.rfind("gloo:", 0) == 0 || name.rfind("nccl:", 0) == 0 ||
      name.rfind("c10d_functional::", 0) == 0 || name.rfind("_c10d_functional::", 0) == 0 ||
      name == "record_param_comms")
    return EtOpKind::Comm;
  static const std::string_view kAlloc[] = {"empty",
                                            "empty_like",
                                            "empty_strided",
                                            "new_empty",
                                            "new_empty_strided",
                                            "_empty_affine_quantized",
                                            "empty_pinned",
                                            "resize_"};
  std::string_view op = op_name(n);
  if (name.rfind("aten::", 0) == 0 &&
      std::find(std::begin(kAlloc), std::end(kAlloc), op) != std::end(kAlloc))
    return EtOpKind::Alloc;
  if (is_view_op(n)) {
    // An alias-annotated op that allocated (aten::to converting, reshape copying) computes.
    bool fresh = false;
    for (const Arg& o : n.outputs)
      for (const TensorValue& t : o.tensors) {
        if (!t.defined()) continue;
        bool seen = false;
        for (const Arg& i : n.inputs)
          for (const TensorValue& u : i.tensors) seen = seen || u.storage == t.storage;
        fresh = fresh || !seen;
      }
    if (!fresh) return EtOpKind::View;
  }
  bool tensors = false;
  for (const auto* args : {&n.inputs, &n.outputs})
    for (const Arg& a : *args)
      for (const TensorValue& t : a.tensors) tensors = tensors || t.defined();
  if (!tensors) return EtOpKind::Annotation;
  return EtOpKind::Op;
}

void resolve_layouts(Trace& tr, int64_t& assumed, int64_t& bounded) {
  std::unordered_map<int64_t, Known> known;  // by tensor id: its layout when last seen
  for (Node& n : tr.nodes) {
    if (n.root) continue;
    bool inputs_contiguous = true;
    for (Arg& a : n.inputs)
      for (TensorValue& t : a.tensors) {
        if (!t.defined()) continue;
        auto k = known.find(t.tensor);
        if (t.strides) {
          set_from_strides(t, *t.strides, EtExtent::Strides);
        } else if (k != known.end() && same(k->second, t)) {
          take(t, k->second);
        } else {
          set_dense(t, contiguous(t.shape));
          ++assumed;
        }
        if (t.numel > 1 && !(t.strides && is_contiguous(t.shape, *t.strides)))
          inputs_contiguous = false;
        known[t.tensor] = remember(t);
      }
    const bool view = is_view_op(n);
    const TensorValue* base = base_of(n);
    for (Arg& a : n.outputs)
      for (TensorValue& o : a.tensors) {
        if (!o.defined()) continue;
        auto k = known.find(o.tensor);
        const TensorValue* same_input = nullptr;
        for (const Arg& ia : n.inputs)
          for (const TensorValue& t : ia.tensors)
            if (t.defined() && t.tensor == o.tensor && t.storage == o.storage &&
                t.offset == o.offset && t.numel == o.numel && t.shape == o.shape)
              same_input = &t;
        if (o.strides) {
          set_from_strides(o, *o.strides, EtExtent::Strides);
        } else if (same_input) {
          o.lo = same_input->lo, o.hi = same_input->hi, o.extent = same_input->extent;
          o.strides = same_input->strides;
        } else if (view && base && base->storage == o.storage) {
          if (k != known.end() && same(k->second, o) && k->second.strides) {
            take(o, k->second);  // an inner as_strided already gave it
            if (o.extent == EtExtent::Dense) o.extent = EtExtent::View;
          } else if (auto st = base->strides ? derive(n, *base, *base->strides, o) : std::nullopt) {
            set_from_strides(o, *st, EtExtent::View);
          } else if (o.numel == base->numel && o.offset == base->offset) {
            o.lo = base->lo, o.hi = base->hi, o.extent = EtExtent::View;  // same elements
          } else {
            o.lo = o.offset;
            o.hi = std::max(base->hi, o.offset + o.numel);
            o.extent = EtExtent::Bound;
            ++bounded;
          }
        } else {
          // A fresh output: dense; contiguous when everything the op read was.
          set_dense(o,
                    inputs_contiguous ? std::optional<Strides>(contiguous(o.shape)) : std::nullopt);
        }
        known[o.tensor] = remember(o);
      }
  }
}

}  // namespace braid::et
