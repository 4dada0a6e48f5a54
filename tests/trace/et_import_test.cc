// PyTorch execution traces (ET) imported beside their profiler traces (trace/import/et.h,
// docs/import-et.md): the three ET layouts parsed, tensor ranges through views checked on inputs
// with known answers, the join checked against what the Kineto file itself says (its ops'
// sequence numbers, read here without the importer), the legacy join of the project's 4-rank
// gloo fixture (tests/data/et_tp), and bad input refused with nothing stored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <map>

#include "trace/error.h"
#include "trace/import/et.h"
#include "trace/test_util.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

std::string param(const std::string& f) {
  return test::traces("param/et_replay/tests/inputs/" + f);
}
std::string hta_et(const std::string& f) {
  return test::traces("hta/tests/data/execution_trace/" + f);
}
std::string tp(const std::string& variant, int r, bool et) {
  return std::string(BRAID_TEST_DATA_DIR) + "/et_tp/" + variant + "/rank-" + std::to_string(r) +
         (et ? ".et.json.gz" : ".json.gz");
}

// Nodes of an ET counted here from the JSON itself.
int64_t count_nodes(const std::string& path) {
  std::string text = test::gunzip_file(path);
  simdjson::dom::parser p;
  return static_cast<int64_t>(p.parse(text)["nodes"].get_array().size());
}

int64_t import_with_et(const std::vector<std::string>& traces, const std::vector<std::string>& ets,
                       const std::string& out, ImportStats* stats_out = nullptr) {
  TraceWriter w(out, TraceWriter::Mode::Overwrite);
  ImportOptions opts;
  opts.et_files = ets;
  ImportStats stats;
  int64_t run = import_traces(w, traces, TraceFormat::Auto, opts, stats);
  w.commit();
  if (stats_out) *stats_out = stats;
  return run;
}

TEST(EtParse, ThreeLayouts) {
  // Schema 1.0.1 (PyTorch 2.x), 1.1.0-chakra (attrs, inputs as an object), and PyTorch 1.13's
  // execution graph (1.0.1 written by ExecutionGraphObserver).
  for (const std::string& path :
       {param("linear_et.json.gz"), param("resnet_et.json.gz"), tp("a", 0, true)}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(detect_format(path), TraceFormat::Et);
    et::Trace t = et::parse(path);
    EXPECT_EQ(static_cast<int64_t>(t.nodes.size()), count_nodes(path));
    EXPECT_GT(t.pid, 0);
    int64_t tensors = 0, seqs = 0, rf = 0;
    for (const et::Node& n : t.nodes) {
      for (const auto* args : {&n.inputs, &n.outputs})
        for (const et::Arg& a : *args)
          for (const et::TensorValue& v : a.tensors) tensors += v.defined();
      seqs += n.seq >= 0;
      rf += n.rf_id > 0;
    }
    EXPECT_GT(tensors, static_cast<int64_t>(t.nodes.size()) / 2);
    EXPECT_GT(seqs, 0);
    EXPECT_GT(rf, static_cast<int64_t>(t.nodes.size()) / 2);
  }
  et::Trace r = et::parse(param("resnet_et.json.gz"));
  EXPECT_EQ(r.schema, "1.1.0-chakra.0.0.4");
  // A c10d tensor list of lists (all-gather's outputs) is flattened.
  bool conv = false;
  for (const et::Node& n : r.nodes)
    if (n.name == "aten::cudnn_convolution") {
      conv = true;
      ASSERT_FALSE(n.inputs.empty());
      ASSERT_EQ(n.inputs[0].kind, et::Arg::Kind::Tensor);
      EXPECT_EQ(n.inputs[0].tensors[0].shape.size(), 4u);
      EXPECT_EQ(n.inputs[0].tensors[0].itemsize, 4);
      EXPECT_EQ(n.inputs[0].tensors[0].dtype, "float32");
    }
  EXPECT_TRUE(conv);
}

// A small ET written here: a [4, 6] float tensor, then views of it whose ranges are known.
std::string tensor(int64_t id, int64_t storage, int64_t off, int64_t numel) {
  return "[" + std::to_string(id) + "," + std::to_string(storage) + "," + std::to_string(off) +
         "," + std::to_string(numel) + ",4,\"cpu\"]";
}
std::string node(int64_t id, const std::string& name, const std::string& schema,
                 const std::string& inputs, const std::string& in_shapes,
                 const std::string& in_types, const std::string& outputs,
                 const std::string& out_shapes, const std::string& out_types) {
  return "{\"name\":\"" + name + "\",\"id\":" + std::to_string(id) +
         ",\"rf_id\":" + std::to_string(id) + ",\"parent\":2,\"seq_id\":-1,\"tid\":1," +
         "\"op_schema\":\"" + schema + "\",\"inputs\":" + inputs +
         ",\"input_shapes\":" + in_shapes + ",\"input_types\":" + in_types +
         ",\"outputs\":" + outputs + ",\"output_shapes\":" + out_shapes +
         ",\"output_types\":" + out_types + "}";
}

TEST(EtLayout, ViewsHaveTheRangesTheirStridesGive) {
  test::TempDir tmp;
  const std::string T = "\"Tensor(float)\"";
  std::vector<std::string> nodes = {
      "{\"name\":\"[pytorch|profiler|execution_trace|thread]\",\"id\":2,\"rf_id\":0,"
      "\"parent\":1,\"seq_id\":-1,\"tid\":1,\"op_schema\":\"\",\"inputs\":[],\"input_shapes\":[],"
      "\"input_types\":[],\"outputs\":[],\"output_shapes\":[],\"output_types\":[]}",
      // x = randn(4, 6): a fresh, contiguous output (storage 10, 24 elements).
      node(3, "aten::randn", "aten::randn(SymInt[] size) -> Tensor", "[[4,6]]", "[[[],[]]]",
           "[\"GenericList[Int,Int]\"]", "[" + tensor(5, 10, 0, 24) + "]", "[[4,6]]",
           "[" + T + "]"),
      // x[1:3]: rows 1 and 2 -> elements [6, 18).
      node(4, "aten::slice",
           "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
           "SymInt step=1) -> Tensor(a)",
           "[" + tensor(5, 10, 0, 24) + ",0,1,3,1]", "[[4,6],[],[],[],[]]",
           "[" + T + ",\"Int\",\"Int\",\"Int\",\"Int\"]", "[" + tensor(6, 10, 6, 12) + "]",
           "[[2,6]]", "[" + T + "]"),
      // x[:, 2:4]: a column slice, offset 2, strides (6, 1): elements [2, 2 + 3*6 + 1 + 1) = [2,
      // 22).
      node(7, "aten::slice",
           "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
           "SymInt step=1) -> Tensor(a)",
           "[" + tensor(5, 10, 0, 24) + ",1,2,4,1]", "[[4,6],[],[],[],[]]",
           "[" + T + ",\"Int\",\"Int\",\"Int\",\"Int\"]", "[" + tensor(8, 10, 2, 8) + "]",
           "[[4,2]]", "[" + T + "]"),
      // x.t()[0] (select dim 0 of the transpose): x's first column, stride 6: elements [0, 19).
      node(9, "aten::t", "aten::t(Tensor(a) self) -> Tensor(a)", "[" + tensor(5, 10, 0, 24) + "]",
           "[[4,6]]", "[" + T + "]", "[" + tensor(11, 10, 0, 24) + "]", "[[6,4]]", "[" + T + "]"),
      node(12, "aten::select",
           "aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
           "[" + tensor(11, 10, 0, 24) + ",0,0]", "[[6,4],[],[]]", "[" + T + ",\"Int\",\"Int\"]",
           "[" + tensor(13, 10, 0, 4) + "]", "[[4]]", "[" + T + "]"),
      // A view op braid does not derive (unfold): bounded by the tensor it views, [3, 24).
      node(14, "aten::unfold",
           "aten::unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)",
           "[" + tensor(5, 10, 0, 24) + ",1,2,2]", "[[4,6],[],[],[]]",
           "[" + T + ",\"Int\",\"Int\",\"Int\"]", "[" + tensor(15, 10, 3, 8) + "]", "[[4,1,2]]",
           "[" + T + "]"),
      // An add reading the column slice writes a fresh [4, 2].
      node(16, "aten::add",
           "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
           "[" + tensor(8, 10, 2, 8) + "," + tensor(8, 10, 2, 8) + ",1]", "[[4,2],[4,2],[]]",
           "[" + T + "," + T + ",\"Int\"]", "[" + tensor(17, 18, 0, 8) + "]", "[[4,2]]",
           "[" + T + "]"),
  };
  std::string json = "{\"schema\":\"1.0.1\",\"pid\":7,\"time\":\"x\",\"start_ts\":1,\"nodes\":[";
  for (size_t i = 0; i < nodes.size(); ++i) json += (i ? "," : "") + nodes[i];
  json += "]}";
  test::write_file(tmp.file("x.et.json"), json);
  et::Trace t = et::parse(tmp.file("x.et.json"));
  int64_t assumed = 0, bounded = 0;
  et::resolve_layouts(t, assumed, bounded);
  std::map<int64_t, std::pair<int64_t, int64_t>> out_range;  // node -> its output's [lo, hi)
  std::map<int64_t, EtExtent> how;
  for (const et::Node& n : t.nodes)
    for (const et::Arg& a : n.outputs)
      for (const et::TensorValue& v : a.tensors) {
        out_range[n.id] = {v.lo, v.hi};
        how[n.id] = v.extent;
      }
  EXPECT_EQ(out_range[3], std::make_pair(int64_t(0), int64_t(24)));
  EXPECT_EQ(out_range[4], std::make_pair(int64_t(6), int64_t(18)));
  EXPECT_EQ(out_range[7], std::make_pair(int64_t(2), int64_t(22)));
  EXPECT_EQ(how[7], EtExtent::View);
  EXPECT_EQ(out_range[12], std::make_pair(int64_t(0), int64_t(19)));
  EXPECT_EQ(out_range[14], std::make_pair(int64_t(3), int64_t(24)));
  EXPECT_EQ(how[14], EtExtent::Bound);
  EXPECT_EQ(bounded, 1);
  EXPECT_EQ(assumed, 0);
  // The add reads the column slice's range, not offset + numel ([2, 10)).
  for (const et::Node& n : t.nodes)
    if (n.id == 16) {
      EXPECT_EQ(n.inputs[0].tensors[0].lo, 2);
      EXPECT_EQ(n.inputs[0].tensors[0].hi, 22);
    }
  EXPECT_EQ(et::kind_of(t.nodes[1]), EtOpKind::Op);
  EXPECT_EQ(et::kind_of(t.nodes[2]), EtOpKind::View);
}

// (tid, start ns) -> (name, Sequence number) of the Kineto file's cpu_op events, read here.
std::map<std::pair<int64_t, Ns>, std::pair<std::string, int64_t>> kineto_ops(
    const std::string& path) {
  std::map<std::pair<int64_t, Ns>, std::pair<std::string, int64_t>> m;
  std::string text = test::gunzip_file(path);
  simdjson::dom::parser p;
  for (auto e : p.parse(text)["traceEvents"].get_array()) {
    std::string_view cat, name;
    if (e["cat"].get_string().get(cat) || cat != "cpu_op") continue;
    if (e["name"].get_string().get(name)) continue;
    int64_t tid = 0, seq = -1, ts = 0;
    if (e["tid"].get_int64().get(tid)) continue;
    if (e["ts"].get_int64().get(ts)) continue;  // integer µs in this trace
    if (e["args"]["Sequence number"].get_int64().get(seq)) seq = -1;
    m[{tid, ts * 1000}] = {std::string(name), seq};
  }
  return m;
}

TEST(EtJoin, KinetoBySequenceNumberAndOrder) {
  // PARAM's linear program: the ET covers one of the trace's 40 iterations; its ops carry no
  // record-function id. Every node must join an op of its name, and one of its own sequence
  // number where both have one (the iteration, not just the op order).
  test::TempDir tmp;
  ImportStats stats;
  int64_t run = import_with_et({param("linear_kineto.json.gz")}, {param("linear_et.json.gz")},
                               tmp.file("j.braid"), &stats);
  ASSERT_EQ(stats.notes.size(), 1u);
  EXPECT_THAT(stats.notes[0], HasSubstr("by sequence number and op order"));
  auto kin = kineto_ops(param("linear_kineto.json.gz"));
  TraceReader r(tmp.file("j.braid"));
  int64_t ops = 0, joined = 0, seq_checked = 0, name_ok = 0;
  std::map<int64_t, int64_t> et_seq;
  for (const et::Node& n : et::parse(param("linear_et.json.gz")).nodes) et_seq[n.id] = n.seq;
  r.et_ops(run, [&](const EtOp& o) {
    ++ops;
    if (o.join == EtJoin::None) return true;
    ++joined;
    auto k = kin.find({o.tid, o.op_start});
    if (k == kin.end()) return true;  // a user annotation, not a cpu_op
    name_ok += k->second.first == r.str(o.name);
    if (k->second.second >= 0 && et_seq[o.node] >= 0) {
      ++seq_checked;
      EXPECT_EQ(k->second.second, et_seq[o.node]) << r.str(o.name);
    }
    return true;
  });
  EXPECT_EQ(ops, 928);
  EXPECT_GE(joined, ops * 95 / 100);
  EXPECT_GE(name_ok, joined * 95 / 100);
  EXPECT_GT(seq_checked, 200);
  // Tensors: every op that computes has some; ranges are inside [0, ...).
  int64_t tensors = 0;
  r.et_tensors(run, [&](const EtTensor& t) {
    ++tensors;
    EXPECT_LE(t.lo, t.hi);
    EXPECT_GE(t.lo, t.offset);
    return true;
  });
  EXPECT_GT(tensors, ops);
}

TEST(EtJoin, HtaSimpleAddAllJoined) {
  test::TempDir tmp;
  int64_t run = import_with_et({hta_et("benchmark_simple_add_trace.json.gz")},
                               {hta_et("benchmark_simple_add_et.json.gz")}, tmp.file("j.braid"));
  TraceReader r(tmp.file("j.braid"));
  int64_t ops = 0, joined = 0;
  r.et_ops(run, [&](const EtOp& o) {
    ++ops;
    joined += o.join != EtJoin::None;
    return true;
  });
  EXPECT_EQ(ops, count_nodes(hta_et("benchmark_simple_add_et.json.gz")) - 2);  // two roots
  EXPECT_EQ(joined, ops);
}

TEST(EtJoin, LegacyGlooRanksJoinTheirStepAndSizeTheirCollectives) {
  // tests/data/et_tp/a: 4 gloo ranks, 3 steps; the ETs cover step 1 (truth.json). The legacy
  // format has no ids or sequence numbers: op order per thread, and the ET's own duration
  // where steps 1 and 2 run the same ops.
  test::TempDir tmp;
  std::vector<std::string> traces, ets;
  for (int r = 0; r < 4; ++r) traces.push_back(tp("a", r, false)), ets.push_back(tp("a", r, true));
  ImportStats stats;
  int64_t run = import_with_et(traces, ets, tmp.file("j.braid"), &stats);
  ASSERT_EQ(stats.notes.size(), 4u);
  TraceReader r(tmp.file("j.braid"));
  std::map<int32_t, int64_t> ops, joined;
  std::map<int32_t, std::set<int64_t>> steps;
  r.et_ops(run, [&](const EtOp& o) {
    ++ops[o.rank];
    if (o.join != EtJoin::None) {
      ++joined[o.rank];
      steps[o.rank].insert(o.step);
    }
    return true;
  });
  for (int32_t rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_GE(joined[rank] * 100, ops[rank] * 95);
    EXPECT_EQ(steps[rank], std::set<int64_t>{1});
    EXPECT_THAT(stats.notes[rank], HasSubstr("(step 1)"));
  }
  // The gloo all-reduces of step 1 took their sizes from the ET (512 float32 each); the
  // others have none.
  int64_t sized = 0, unsized = 0;
  r.collectives(run, [&](const Collective& c) {
    if (c.in_count >= 0) {
      ++sized;
      EXPECT_EQ(c.in_count, 512);
      EXPECT_EQ(c.bytes, 2048);
      EXPECT_EQ(r.str(c.dtype), "float32");
    } else {
      ++unsized;
    }
    return true;
  });
  EXPECT_EQ(sized, 8);
  EXPECT_EQ(unsized, 16);
}

TEST(EtJoin, AnEtAmongTheFilesIsPairedByProcess) {
  test::TempDir tmp;
  ImportStats stats;
  TraceWriter w(tmp.file("j.braid"), TraceWriter::Mode::Create);
  ImportOptions opts;
  int64_t run = import_traces(w, {param("linear_et.json.gz"), param("linear_kineto.json.gz")},
                              TraceFormat::Auto, opts, stats);
  w.commit();
  ASSERT_EQ(stats.notes.size(), 1u);
  TraceReader r(tmp.file("j.braid"));
  EXPECT_EQ(r.runs().size(), 1u);
  int64_t n = 0;
  r.et_ops(run, [&](const EtOp&) { return ++n, true; });
  EXPECT_EQ(n, 928);
}

// The error a failed import throws; the output must not exist afterwards.
std::string import_error(const test::TempDir& tmp, const std::vector<std::string>& traces,
                         const std::vector<std::string>& ets) {
  const std::string out = tmp.file("bad.braid");
  try {
    import_with_et(traces, ets, out);
  } catch (const Error& e) {
    EXPECT_FALSE(std::filesystem::exists(out)) << "a failed import left " << out;
    return e.what();
  }
  return "";
}

TEST(EtJoin, BadInputIsOneLineNamingTheFileAndStoresNothing) {
  test::TempDir tmp;
  // Truncated: the first half of the ET's bytes (a gzip cut short).
  std::string bytes = test::slurp(tp("a", 0, true));
  test::write_file(tmp.file("cut.et.json.gz"), bytes.substr(0, bytes.size() / 2));
  std::string e = import_error(tmp, {tp("a", 0, false)}, {tmp.file("cut.et.json.gz")});
  EXPECT_THAT(e, HasSubstr(tmp.file("cut.et.json.gz")));
  // The same JSON cut short, uncompressed.
  std::string text = test::gunzip_file(tp("a", 0, true));
  test::write_file(tmp.file("cut2.et.json"), text.substr(0, text.size() / 2));
  e = import_error(tmp, {tp("a", 0, false)}, {tmp.file("cut2.et.json")});
  EXPECT_THAT(e, HasSubstr(tmp.file("cut2.et.json") + ": not a complete JSON document"));
  // Another run's ET (no op sequence of the tensor-parallel step in the straggler job).
  e = import_error(tmp, {std::string(BRAID_TEST_DATA_DIR) + "/gloo_straggler/rank-0.json.gz"},
                   {tp("a", 0, true)});
  EXPECT_THAT(e, HasSubstr("no op sequence matches"));
  EXPECT_THAT(e, HasSubstr(tp("a", 0, true)));
  // Another process's ET (another rank's, or another run's): the pids disagree.
  std::string et = test::gunzip_file(param("linear_et.json.gz"));
  et.replace(et.find("\"pid\": 24248"), 12, "\"pid\": 24249");
  test::write_file(tmp.file("other.et.json"), et);
  e = import_error(tmp, {param("linear_kineto.json.gz")}, {tmp.file("other.et.json")});
  EXPECT_THAT(e, HasSubstr("execution trace of process 24249"));
  EXPECT_THAT(e, HasSubstr("is process 24248"));
  // Counts that do not pair up, and a file given with --et that is no ET.
  e = import_error(tmp, {tp("a", 0, false), tp("a", 1, false)}, {tp("a", 0, true)});
  EXPECT_THAT(e, HasSubstr("--et gives 1 execution trace for 2 trace files"));
  e = import_error(tmp, {tp("a", 0, false)}, {tp("a", 1, false)});
  EXPECT_THAT(e, HasSubstr("given with --et but not a PyTorch execution trace"));
  // An ET alone.
  e = import_error(tmp, {tp("a", 0, true)}, {});
  EXPECT_THAT(e, HasSubstr("imported with the profiler trace of the same run"));
  for (const std::string& m : {e}) EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(EtJoin, CliImportsWithEtAndSaysWhatJoined) {
  test::TempDir tmp;
  std::string args = "import";
  for (int r = 0; r < 4; ++r) args += " " + tp("b", r, false);
  args += " --et";
  for (int r = 0; r < 4; ++r) args += " " + tp("b", r, true);
  auto res = test::run_braid(tmp, args + " -o " + tmp.file("b.braid"));
  ASSERT_EQ(res.code, 0) << res.err;
  EXPECT_THAT(res.out, HasSubstr("execution trace: rank 3: "));
  EXPECT_THAT(res.out, HasSubstr("by op order (step 1)"));
  auto info = test::run_braid(tmp, "info " + tmp.file("b.braid"));
  EXPECT_THAT(info.out, HasSubstr("et.joined"));
}

}  // namespace
}  // namespace braid
