// Lifting with execution-trace data flow (fusion/lift_et.h, docs/fusion.md "Proven and
// advice") on the project's recorded 4-rank tensor-parallel MLP (tests/data/et_tp, made with
// Debian's PyTorch 1.13 over gloo): variant a reads only each rank's sequence shard of the
// row-parallel all-reduce's output, so tp-sp is applied as a fact; variant b adds the whole
// output to the residual first, so tp-sp is rejected, naming that aten::add. End to end through
// the CLI, with the data check of `braid ab` on the simulator and on 4 MPI ranks; and the GPU
// path's launch linking on PARAM's real one-GPU pair.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <sstream>

#include "fusion/labels.h"
#include "fusion/lift.h"
#include "trace/test_util.h"

namespace braid::fusion {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string tp(const std::string& variant, int r, bool et) {
  return std::string(BRAID_TEST_DATA_DIR) + "/et_tp/" + variant + "/rank-" + std::to_string(r) +
         (et ? ".et.json.gz" : ".json.gz");
}

std::string import_args(const std::string& variant, const std::string& out) {
  std::string a = "import -q";
  for (int r = 0; r < 4; ++r) a += " " + tp(variant, r, false);
  a += " --et";
  for (int r = 0; r < 4; ++r) a += " " + tp(variant, r, true);
  return a + " -o " + out;
}

void expect_short_lines(const std::string& out, const std::string& what) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) EXPECT_LE(line.size(), 200u) << what << ": " << line;
}

simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& text) {
  return p.parse(text);
}

TEST(LiftEt, VariantAIsProvenAndItsFusedPairChecksOut) {
  test::TempDir tmp;
  const std::string f = tmp.file("a.braid");
  ASSERT_EQ(test::run_braid(tmp, import_args("a", f)).code, 0);
  auto lift = test::run_braid(tmp, "lift " + f + " --json");
  ASSERT_EQ(lift.code, 0) << lift.err;
  simdjson::dom::parser p;
  auto j = parse(p, lift.out);
  const int64_t compute = j["compute"].get_int64(), with = j["compute_with_dataflow"].get_int64();
  EXPECT_GT(compute, 100);
  EXPECT_GE(with * 100, compute * 95);
  EXPECT_EQ(j["opaque_collectives"].get_int64().value(), 0);
  EXPECT_EQ(j["collectives"].get_int64().value(), 8);  // 2 all-reduces x 4 ranks in step 1
  EXPECT_EQ(j["step"].get_int64().value(), 1);
  EXPECT_EQ(j["execution_trace"].get_bool().value(), true);
  ASSERT_TRUE(j["opaque"].is_array());
  for (auto k : {"ops", "compute", "compute_with_dataflow", "collectives", "opaque_collectives"})
    EXPECT_TRUE(j[k].is_int64()) << k;

  auto fuse = test::run_braid(tmp, "fuse " + f + " --json");
  ASSERT_EQ(fuse.code, 0) << fuse.err;
  auto fj = parse(p, fuse.out);
  int applied = 0, rejected = 0, advice = 0;
  for (auto finding : fj["findings"].get_array()) {
    std::string_view status = finding["status"].get_string();
    EXPECT_TRUE(finding["assumptions"].is_array());
    if (status == "applied") {
      ++applied;
      EXPECT_EQ(std::string_view(finding["pass"].get_string()), "tp-sp");
      EXPECT_EQ(finding["assumptions"].get_array().size(), 0u);  // proven, not assumed
    }
    rejected += status == "rejected";
    advice += status == "advice";
  }
  EXPECT_EQ(applied, 1);   // the forward all-reduce of y
  EXPECT_EQ(advice, 0);    // nothing rests on an assumption
  EXPECT_EQ(rejected, 1);  // the backward all-reduce: x's gradient is accumulated whole

  auto text = test::run_braid(tmp, "fuse " + f + " --dry-run");
  expect_short_lines(text.out, "fuse");
  auto ltext = test::run_braid(tmp, "lift " + f);
  expect_short_lines(ltext.out, "lift");

  auto ab = test::run_braid(tmp, "ab " + f + " --backend sim");
  ASSERT_EQ(ab.code, 0) << ab.err;
  EXPECT_THAT(ab.out, HasSubstr("data check passed"));
  EXPECT_THAT(ab.out, Not(HasSubstr("cannot prove")));
  expect_short_lines(ab.out, "ab");
}

TEST(LiftEt, VariantBIsRejectedNamingTheOpThatReadsTheWholeOutput) {
  test::TempDir tmp;
  const std::string f = tmp.file("b.braid");
  ASSERT_EQ(test::run_braid(tmp, import_args("b", f)).code, 0);
  auto fuse = test::run_braid(tmp, "fuse " + f + " --json");
  ASSERT_EQ(fuse.code, 0) << fuse.err;
  simdjson::dom::parser p;
  auto fj = parse(p, fuse.out);
  int applied = 0, rejected_by_add = 0;
  for (auto finding : fj["findings"].get_array()) {
    std::string_view status = finding["status"].get_string();
    applied += status == "applied";
    if (status == "rejected") {
      std::string_view why = finding["rejected_by"].get_string();
      // "op N aten::add reads elements 0-511 of 'st..', outside rank 0's shard (...)"
      if (why.find("aten::add reads elements 0-511") != std::string_view::npos) ++rejected_by_add;
    }
  }
  EXPECT_EQ(applied, 0);
  EXPECT_EQ(rejected_by_add, 2);  // the forward all-reduce (y + x) and the backward one
  auto text = test::run_braid(tmp, "fuse " + f + " --dry-run");
  EXPECT_THAT(text.out, HasSubstr("rejected"));
  EXPECT_THAT(text.out, HasSubstr("aten::add reads elements 0-511"));
  expect_short_lines(text.out, "fuse");
}

TEST(LiftEt, ShortLabels) {
  EXPECT_EQ(short_label("aten::addmm: volta_sgemm_64x64_tn"), "aten::addmm");
  EXPECT_EQ(
      short_label("void at::native::vectorized_elementwise_kernel<4, "
                  "at::native::addcmul_cuda_kernel(at::TensorIteratorBase&, c10::Scalar "
                  "const&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
                  "const::{lambda(float, float, float)#1}, at::detail::Array<char*, 4> >(int, "
                  "at::native::addcmul_cuda_kernel(at::TensorIteratorBase&, c10::Scalar "
                  "const&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
                  "const::{lambda(float, float, float)#1}, at::detail::Array<char*, 4>)"),
      "vectorized_elementwise_kernel<addcmul>");
  EXPECT_EQ(short_label("ncclDevKernel_AllReduce_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            "ncclDevKernel_AllReduce_RING_LL");
  EXPECT_EQ(short_label("volta_sgemm_64x64_tn"), "volta_sgemm_64x64_tn");
  EXPECT_EQ(short_label("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, "
                        "float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float, "
                        "unsigned int>, unsigned int, float, at::PhiloxCudaState)"),
            "fused_dropout_kernel_vec");
  EXPECT_EQ(short_label("aten::add"), "aten::add");
  EXPECT_EQ(short_label("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>("
                        "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4::Params)"),
            "Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>");
  EXPECT_EQ(short_label("void at::native::elementwise_kernel<128, 2, "
                        "at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, "
                        "float, at::native::binary_internal::MulFunctor<float> > >("
                        "at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)"),
            "elementwise_kernel<Mul>");
}

TEST(LiftEt, KernelsOfTheEtWindowAreLaunchedByOpsThatCompute) {
  // PARAM's one-GPU linear program (Kineto + ET): the kernels launched inside the ET's window
  // find, through their launch calls, the ET op that launched them, and it has tensors.
  test::TempDir tmp;
  const std::string f = tmp.file("l.braid");
  const std::string dir = test::traces("param/et_replay/tests/inputs/");
  {
    TraceWriter w(f, TraceWriter::Mode::Create);
    ImportOptions opts;
    opts.et_files = {dir + "linear_et.json.gz"};
    ImportStats stats;
    import_traces(w, {dir + "linear_kineto.json.gz"}, TraceFormat::Auto, opts, stats);
    w.commit();
  }
  TraceReader r(f);
  EtFlow flow = load_et_flow(r, 1);
  ASSERT_EQ(flow.ranks.size(), 1u);
  const RankEtFlow& rf = flow.ranks.begin()->second;
  Ns lo = INT64_MAX, hi = INT64_MIN;
  for (const EtFlowOp& o : rf.ops)
    if (o.joined) lo = std::min(lo, o.start), hi = std::max(hi, o.end);
  int64_t in_window = 0, computing = 0;
  r.kernels(1, [&](const Kernel& k) {
    auto l = rf.launches.find(k.correlation);
    if (l == rf.launches.end() || l->second.second < lo || l->second.second > hi) return true;
    ++in_window;
    const EtFlowOp* op = rf.launched_by(k.correlation);
    computing += op && op->computes();
    return true;
  });
  EXPECT_GT(in_window, 100);
  EXPECT_GE(computing * 100, in_window * 95) << computing << " of " << in_window;
}

}  // namespace
}  // namespace braid::fusion
