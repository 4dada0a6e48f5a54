// Reading a PyTorch execution trace (trace/import/et.h, docs/import-et.md).
//
// Two layouts of a node:
//   schema 1.0.x (and PyTorch 1.13's ExecutionGraphObserver, which writes "1.0.1" too):
//     {"name", "id", "rf_id", "parent", "seq_id", "tid", "op_schema", "inputs": [values],
//      "input_shapes": [...], "input_types": [...], "outputs": [...], "output_shapes", ...}
//   schema 1.1.x ("1.1.0-chakra.0.0.4", "1.1.1-chakra.0.0.4"):
//     {"id", "name", "ctrl_deps", "inputs": {"values", "shapes", "types"[, "strides"]},
//      "outputs": {...}, "attrs": [{"name": "rf_id", "type", "value"}, ...]}
// A tensor value is [tensor id, storage id, offset, numel, element size, device]; its type is
// "Tensor(float)"; a tensor list is "GenericList[Tensor(float),...]" with a list of them. The file
// is read whole (decompressed) and parsed with simdjson's DOM.
#include <simdjson.h>

#include <charconv>

#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/input.h"

namespace braid::et {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

std::optional<int64_t> as_int(element e) {
  int64_t i;
  if (e.get_int64().get(i) == simdjson::SUCCESS) return i;
  uint64_t u;
  if (e.get_uint64().get(u) == simdjson::SUCCESS) return static_cast<int64_t>(u);
  double d;
  if (e.get_double().get(d) == simdjson::SUCCESS &&
      d == static_cast<double>(static_cast<int64_t>(d)))
    return static_cast<int64_t>(d);
  return std::nullopt;
}

std::vector<int64_t> int_list(element e) {
  std::vector<int64_t> out;
  array a;
  if (e.get_array().get(a) != simdjson::SUCCESS) return out;
  for (element x : a)
    if (auto v = as_int(x)) out.push_back(*v);
  return out;
}

// The element types of a type string: "Tensor(float)" -> {"Tensor(float)"},
// "GenericList[Tensor(float),Int]" -> {"Tensor(float)", "Int"}.
std::vector<std::string_view> list_items(std::string_view type) {
  std::vector<std::string_view> out;
  size_t open = type.find('[');
  if (open == std::string_view::npos || type.back() != ']') return out;
  std::string_view body = type.substr(open + 1, type.size() - open - 2);
  int depth = 0;
  size_t from = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    char c = i < body.size() ? body[i] : ',';
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (i > from) out.push_back(body.substr(from, i - from));
      from = i + 1;
    }
  }
  return out;
}

bool is_tensor_type(std::string_view t) { return t.rfind("Tensor", 0) == 0; }

std::string dtype_of(std::string_view type) {
  size_t open = type.find('('), close = type.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close <= open) return "";
  return normalize_dtype(type.substr(open + 1, close - open - 1));
}

// [tensor id, storage id, offset, numel, element size, device]; nullopt when `e` is not one.
std::optional<TensorValue> tensor_value(element e, std::string_view type) {
  array a;
  if (e.get_array().get(a) != simdjson::SUCCESS || a.size() < 5) return std::nullopt;
  std::vector<element> f;
  for (element x : a) f.push_back(x);
  TensorValue t;
  auto id = as_int(f[0]), sid = as_int(f[1]), off = as_int(f[2]), n = as_int(f[3]),
       sz = as_int(f[4]);
  if (!id || !sid || !off || !n || !sz) return std::nullopt;
  t.tensor = *id, t.storage = *sid, t.offset = *off, t.numel = *n;
  t.itemsize = static_cast<int32_t>(*sz);
  std::string_view dev;
  if (f.size() > 5 && f[5].get_string().get(dev) == simdjson::SUCCESS) t.device = std::string(dev);
  t.dtype = dtype_of(type);
  if (t.offset < 0 || t.numel < 0 || t.itemsize < 0) return std::nullopt;
  return t;
}

// The tensors of a (possibly nested) tensor list, in order; an undefined tensor keeps its place.
void flatten(element value, std::string_view type, const element* shape, const element* strides,
             std::vector<TensorValue>& out) {
  if (is_tensor_type(type)) {
    TensorValue t;
    if (auto v = tensor_value(value, type)) {
      t = std::move(*v);
      if (shape) t.shape = int_list(*shape);
      if (strides && strides->is_array()) t.strides = int_list(*strides);
      if (t.strides && t.strides->size() != t.shape.size()) t.strides.reset();
    }
    out.push_back(std::move(t));
    return;
  }
  std::vector<std::string_view> items = list_items(type);
  array vals;
  if (items.empty() || value.get_array().get(vals) != simdjson::SUCCESS) return;
  std::vector<element> shapes, strs;
  array sa;
  if (shape && shape->get_array().get(sa) == simdjson::SUCCESS)
    for (element x : sa) shapes.push_back(x);
  if (strides && strides->get_array().get(sa) == simdjson::SUCCESS)
    for (element x : sa) strs.push_back(x);
  size_t k = 0;
  for (element v : vals) {
    std::string_view it = k < items.size() ? items[k] : items.back();
    flatten(v, it, k < shapes.size() ? &shapes[k] : nullptr, k < strs.size() ? &strs[k] : nullptr,
            out);
    ++k;
  }
}

// One argument from its value, type, shape and (optional) strides.
Arg make_arg(element value, std::string_view type, const element* shape, const element* strides) {
  Arg a;
  if (is_tensor_type(type)) {
    if (auto t = tensor_value(value, type)) {
      if (shape) t->shape = int_list(*shape);
      if (strides && strides->is_array()) t->strides = int_list(*strides);
      if (t->strides && t->strides->size() != t->shape.size()) t->strides.reset();
      a.kind = Arg::Kind::Tensor;
      a.tensors.push_back(std::move(*t));
    }
    return a;
  }
  if (type == "Int") {
    if (auto v = as_int(value)) a.kind = Arg::Kind::Int, a.i = *v;
    return a;
  }
  if (type.rfind("GenericList[", 0) == 0 || type.rfind("TensorList", 0) == 0) {
    std::vector<std::string_view> items = list_items(type);
    array vals;
    if (value.get_array().get(vals) != simdjson::SUCCESS) return a;
    bool ints = !items.empty() && items[0] == "Int";
    if (ints) {
      a.kind = Arg::Kind::IntList;
      a.ints = int_list(value);
      return a;
    }
    // A list of tensors, or of lists of tensors (c10d's Tensor[][]): flattened in order.
    if (items.empty() || type.find("Tensor(") == std::string_view::npos) return a;
    a.kind = Arg::Kind::TensorList;
    flatten(value, type, shape, strides, a.tensors);
  }
  return a;
}

std::vector<element> elements(simdjson::simdjson_result<element> r) {
  std::vector<element> out;
  array a;
  if (r.get_array().get(a) == simdjson::SUCCESS)
    for (element x : a) out.push_back(x);
  return out;
}

std::vector<Arg> make_args(const std::vector<element>& values, const std::vector<element>& types,
                           const std::vector<element>& shapes,
                           const std::vector<element>& strides) {
  std::vector<Arg> out;
  for (size_t i = 0; i < values.size(); ++i) {
    std::string_view type;
    if (i < types.size() && types[i].get_string().get(type) != simdjson::SUCCESS) type = {};
    const element* shape = i < shapes.size() ? &shapes[i] : nullptr;
    const element* st = i < strides.size() ? &strides[i] : nullptr;
    out.push_back(make_arg(values[i], type, shape, st));
  }
  return out;
}

int64_t int_field(object o, const char* key, int64_t dflt) {
  element e;
  if (o[key].get(e) != simdjson::SUCCESS) return dflt;
  return as_int(e).value_or(dflt);
}

std::string str_field(object o, const char* key) {
  std::string_view s;
  if (o[key].get_string().get(s) != simdjson::SUCCESS) return "";
  return std::string(s);
}

Node node_1_0(object o) {
  Node n;
  n.name = str_field(o, "name");
  n.id = int_field(o, "id", 0);
  n.parent = int_field(o, "parent", 0);
  n.rf_id = int_field(o, "rf_id", -1);
  n.seq = int_field(o, "seq_id", -1);
  n.tid = int_field(o, "tid", 0);
  n.schema = str_field(o, "op_schema");
  n.inputs = make_args(elements(o["inputs"]), elements(o["input_types"]),
                       elements(o["input_shapes"]), elements(o["input_strides"]));
  n.outputs = make_args(elements(o["outputs"]), elements(o["output_types"]),
                        elements(o["output_shapes"]), elements(o["output_strides"]));
  return n;
}

std::vector<Arg> args_1_1(object o, const char* key) {
  object io;
  if (o[key].get_object().get(io) != simdjson::SUCCESS) return {};
  return make_args(elements(io["values"]), elements(io["types"]), elements(io["shapes"]),
                   elements(io["strides"]));
}

Node node_1_1(object o) {
  Node n;
  n.name = str_field(o, "name");
  n.id = int_field(o, "id", 0);
  n.parent = int_field(o, "ctrl_deps", 0);
  for (element a : elements(o["attrs"])) {
    object ao;
    if (a.get_object().get(ao) != simdjson::SUCCESS) continue;
    std::string_view name;
    if (ao["name"].get_string().get(name) != simdjson::SUCCESS) continue;
    if (name == "rf_id")
      n.rf_id = int_field(ao, "value", -1);
    else if (name == "seq_id")
      n.seq = int_field(ao, "value", -1);
    else if (name == "tid")
      n.tid = int_field(ao, "value", 0);
    else if (name == "op_schema")
      n.schema = str_field(ao, "value");
  }
  n.inputs = args_1_1(o, "inputs");
  n.outputs = args_1_1(o, "outputs");
  return n;
}

}  // namespace

bool looks_like_et(std::string_view head) {
  size_t i = head.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos || head[i] != '{') return false;
  return head.find("\"schema\"") != std::string_view::npos &&
         head.find("\"nodes\"") != std::string_view::npos &&
         head.find("\"workload_graph\"") == std::string_view::npos &&
         head.find("\"traceEvents\"") == std::string_view::npos;
}

int64_t peek_pid(const std::string& path) {
  std::string head;
  try {
    head = read_head(path, 1024);
  } catch (const Error&) {
    return -1;  // a damaged file: parse() reports it
  }
  std::string_view h(head);
  size_t at = h.find("\"pid\"");
  if (at == std::string_view::npos) return -1;
  size_t i = h.find_first_not_of(" \t\r\n:", at + 5);
  if (i == std::string_view::npos) return -1;
  int64_t v = -1;
  auto r = std::from_chars(h.data() + i, h.data() + h.size(), v);
  return r.ec == std::errc() ? v : -1;
}

Trace parse(const std::string& path) {
  Trace t;
  t.path = path;
  std::string text = read_whole_file(path);
  simdjson::dom::parser parser;
  element root;
  if (auto err = parser.parse(text).get(root))
    throw Error(ErrorCode::BadFormat, path + ": not a complete JSON document (" +
                                          simdjson::error_message(err) +
                                          "; truncated or corrupt execution trace?)");
  object o;
  if (root.get_object().get(o) != simdjson::SUCCESS)
    throw Error(ErrorCode::BadFormat, path + ": not a PyTorch execution trace (not a JSON object)");
  std::string_view schema;
  array nodes;
  if (o["schema"].get_string().get(schema) != simdjson::SUCCESS ||
      o["nodes"].get_array().get(nodes) != simdjson::SUCCESS)
    throw Error(ErrorCode::BadFormat, path +
                                          ": not a PyTorch execution trace (no \"schema\" string "
                                          "and \"nodes\" array)");
  t.schema = std::string(schema);
  if (t.schema.rfind("1.", 0) != 0)
    throw Error(ErrorCode::Unsupported, path + ": execution trace schema '" + t.schema +
                                            "' is not one braid reads (1.0.x, 1.1.x)");
  const bool v11 = t.schema.rfind("1.0", 0) != 0;
  t.pid = int_field(o, "pid", -1);
  t.start_ms = int_field(o, "start_ts", -1);
  t.finish_ms = int_field(o, "finish_ts", -1);
  size_t index = 0;
  for (element e : nodes) {
    object no;
    if (e.get_object().get(no) != simdjson::SUCCESS)
      throw Error(ErrorCode::BadFormat,
                  path + ": node " + std::to_string(index) + " of \"nodes\" is not an object");
    Node n = v11 ? node_1_1(no) : node_1_0(no);
    if (n.id <= 0)
      throw Error(ErrorCode::BadFormat,
                  path + ": node " + std::to_string(index) + " has no positive \"id\"");
    n.root = n.name.rfind("[pytorch|profiler|execution_", 0) == 0;
    t.nodes.push_back(std::move(n));
    ++index;
  }
  size_t ops = 0;
  for (const Node& n : t.nodes) ops += !n.root;
  if (ops == 0)
    throw Error(ErrorCode::Empty, path + ": the execution trace holds no operator nodes");
  return t;
}

}  // namespace braid::et
