#include "analysis/hardware.h"

#include <simdjson.h>

#include <cstdio>
#include <filesystem>

#include "trace/error.h"
#include "trace/input.h"
#include "trace/json.h"

namespace braid::analysis {

namespace {

// Peak numbers from vendor data sheets, derated to what large GEMMs (cuBLAS) and NCCL ring
// collectives reach in practice; docs/cost-model.md lists the sources and the derating.
std::vector<HardwareProfile> make_builtins() {
  const Link ib400{"InfiniBand NDR 400 Gb/s per GPU", 5000, 45};
  const GpuSpec h100{"H100 SXM5 80GB", 700, 50, 2800, 3000};
  std::vector<HardwareProfile> v;
  v.push_back({"h100-nvlink",
               "8x H100 SXM per node, NVLink 4 / NVSwitch inside the node, 400 Gb/s InfiniBand "
               "per GPU between nodes",
               h100, 8, Link{"NVLink 4 (NVSwitch)", 1000, 360}, ib400});
  v.push_back({"h100-pcie",
               "8x H100 PCIe per node, no NVLink: GPU-to-GPU traffic crosses PCIe Gen5 and the "
               "host bridge; 400 Gb/s InfiniBand between nodes",
               GpuSpec{"H100 PCIe 80GB", 500, 40, 1700, 3000}, 8,
               Link{"PCIe Gen5 x16 via host", 3000, 24}, ib400});
  v.push_back({"h100-ib",
               "H100 SXM, one GPU per node: every collective crosses 400 Gb/s InfiniBand",
               h100, 1, Link{"NVLink 4 (NVSwitch)", 1000, 360}, ib400});
  v.push_back({"a100-nvlink",
               "8x A100 SXM4 80GB per node, NVLink 3 / NVSwitch, 200 Gb/s InfiniBand per GPU",
               GpuSpec{"A100 SXM4 80GB", 230, 15, 1700, 3500}, 8,
               Link{"NVLink 3 (NVSwitch)", 1500, 230},
               Link{"InfiniBand HDR 200 Gb/s per GPU", 6000, 22}});
  v.push_back({"cpu-shm",
               "MPI ranks on one host (the mpi replay backend): shared-memory transport; a "
               "starting point that replay calibration replaces",
               GpuSpec{"host CPU core", 0.05, 0.05, 10, 1000}, 1024,
               Link{"shared memory (MPI vader)", 1500, 5}, Link{"TCP loopback", 20000, 1}});
  return v;
}

double number(simdjson::dom::element obj, const char* key, double fallback,
              const std::string& where) {
  auto v = obj[key];
  if (v.error() == simdjson::NO_SUCH_FIELD) return fallback;
  double d;
  if (v.get_double().get(d) != simdjson::SUCCESS) {
    int64_t i;
    if (v.get_int64().get(i) != simdjson::SUCCESS)
      throw Error(ErrorCode::BadFormat, where + "." + key + ": expected a number");
    d = static_cast<double>(i);
  }
  if (!(d >= 0)) throw Error(ErrorCode::BadFormat, where + "." + key + ": must be >= 0");
  return d;
}

std::string text(simdjson::dom::element obj, const char* key, const std::string& fallback,
                 const std::string& where) {
  auto v = obj[key];
  if (v.error() == simdjson::NO_SUCH_FIELD) return fallback;
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS)
    throw Error(ErrorCode::BadFormat, where + "." + key + ": expected a string");
  return std::string(s);
}

void read_link(simdjson::dom::element root, const char* key, Link& link,
               const std::string& where) {
  auto v = root[key];
  if (v.error() == simdjson::NO_SUCH_FIELD) return;
  simdjson::dom::object o;
  if (v.get_object().get(o) != simdjson::SUCCESS)
    throw Error(ErrorCode::BadFormat, where + "." + key + ": expected an object");
  std::string w = where + "." + key;
  link.name = text(v.value(), "name", link.name, w);
  link.latency_ns = number(v.value(), "latency_ns", link.latency_ns, w);
  link.bandwidth_gbps = number(v.value(), "bandwidth_gbps", link.bandwidth_gbps, w);
}

void put_link(json::Writer& w, std::string_view key, const Link& l) {
  w.key(key)
      .begin_object()
      .field("name", l.name)
      .key("latency_ns")
      .general(l.latency_ns, 6)
      .key("bandwidth_gbps")
      .general(l.bandwidth_gbps, 6)
      .end_object();
}

}  // namespace

const std::vector<HardwareProfile>& builtin_profiles() {
  static const std::vector<HardwareProfile> v = make_builtins();
  return v;
}

const HardwareProfile& default_profile() { return builtin_profiles().front(); }

const HardwareProfile* find_profile(std::string_view name) {
  for (const auto& p : builtin_profiles())
    if (p.name == name) return &p;
  return nullptr;
}

void write_profile_members(json::Writer& w, const HardwareProfile& p) {
  w.field("name", p.name)
      .field("description", p.description)
      .field("gpus_per_node", p.gpus_per_node);
  w.key("gpu")
      .begin_object()
      .field("name", p.gpu.name)
      .key("tflops_16bit")
      .general(p.gpu.tflops_16bit, 6)
      .key("tflops_32bit")
      .general(p.gpu.tflops_32bit, 6)
      .key("mem_bandwidth_gbps")
      .general(p.gpu.mem_bandwidth_gbps, 6)
      .key("kernel_overhead_ns")
      .general(p.gpu.kernel_overhead_ns, 6)
      .end_object();
  put_link(w, "intra_node", p.intra_node);
  put_link(w, "inter_node", p.inter_node);
}

std::string profile_to_json(const HardwareProfile& p) {
  json::Writer w(json::Writer::Style::Spaced);
  w.begin_object(/*lines=*/true);
  write_profile_members(w, p);
  return w.end_object().take() + "\n";
}

HardwareProfile parse_profile(std::string_view json, std::string_view source) {
  const std::string where(source.empty() ? "<profile>" : source);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  if (auto err = parser.parse(padded).get(root))
    throw Error(ErrorCode::BadFormat,
                where + ": not valid JSON (" + simdjson::error_message(err) + ")");
  if (!root.is_object()) throw Error(ErrorCode::BadFormat, where + ": expected a JSON object");
  HardwareProfile p = default_profile();
  std::string base = text(root, "base", "", where);
  if (!base.empty()) {
    const HardwareProfile* b = find_profile(base);
    if (!b) throw Error(ErrorCode::NotFound, where + ": no built-in profile '" + base + "'");
    p = *b;
  }
  p.name = text(root, "name", p.name, where);
  p.description = text(root, "description", p.description, where);
  p.gpus_per_node = static_cast<int>(number(root, "gpus_per_node", p.gpus_per_node, where));
  if (p.gpus_per_node < 1) throw Error(ErrorCode::BadFormat, where + ": gpus_per_node must be >= 1");
  auto gpu = root["gpu"];
  if (gpu.error() != simdjson::NO_SUCH_FIELD) {
    if (!gpu.is_object()) throw Error(ErrorCode::BadFormat, where + ".gpu: expected an object");
    std::string w = where + ".gpu";
    p.gpu.name = text(gpu.value(), "name", p.gpu.name, w);
    p.gpu.tflops_16bit = number(gpu.value(), "tflops_16bit", p.gpu.tflops_16bit, w);
    p.gpu.tflops_32bit = number(gpu.value(), "tflops_32bit", p.gpu.tflops_32bit, w);
    p.gpu.mem_bandwidth_gbps = number(gpu.value(), "mem_bandwidth_gbps", p.gpu.mem_bandwidth_gbps, w);
    p.gpu.kernel_overhead_ns = number(gpu.value(), "kernel_overhead_ns", p.gpu.kernel_overhead_ns, w);
  }
  read_link(root, "intra_node", p.intra_node, where);
  read_link(root, "inter_node", p.inter_node, where);
  if (p.intra_node.bandwidth_gbps <= 0 || p.inter_node.bandwidth_gbps <= 0)
    throw Error(ErrorCode::BadFormat, where + ": link bandwidths must be > 0");
  return p;
}

HardwareProfile load_profile(const std::string& name_or_path) {
  if (const HardwareProfile* p = find_profile(name_or_path)) return *p;
  if (!std::filesystem::exists(name_or_path)) {
    std::string names;
    for (const auto& p : builtin_profiles()) names += (names.empty() ? "" : ", ") + p.name;
    throw Error(ErrorCode::NotFound, "no hardware profile '" + name_or_path +
                                         "': give a built-in name (" + names +
                                         ") or a JSON file");
  }
  return parse_profile(read_whole_file(name_or_path), name_or_path);
}

}  // namespace braid::analysis
