// The synthetic Kineto generator: its output is valid JSON with Kineto's structure, and the
// counts it reports are what the file holds (a benchmark validates an importer against them).
#include "bench/gen_kineto.h"

#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "trace/categories.h"
#include "trace/error.h"

namespace braid::bench {
namespace {

namespace fs = std::filesystem;

class GenKinetoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_gen_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

// Counts recomputed from the parsed file, independently of the generator.
struct Seen {
  KinetoGenCounts c;
  std::set<int64_t> steps;
  std::map<int64_t, int> s_flows, f_flows;  // correlation -> count
  std::set<int64_t> kernel_corrs, runtime_corrs, memop_corrs;
  int nccl_with_args = 0;
  double first_ts = 1e300, last_ts = -1e300;
};

Seen scan(simdjson::dom::element doc) {
  Seen s;
  simdjson::dom::array evs = doc["traceEvents"];
  for (simdjson::dom::element e : evs) {
    ++s.c.events;
    std::string_view ph = e["ph"];
    if (ph == "M") {
      ++s.c.metadata;
      continue;
    }
    if (ph == "s" || ph == "f") {
      EXPECT_EQ(std::string_view(e["cat"]), "ac2g");
      ++(ph == "s" ? s.s_flows : s.f_flows)[int64_t(e["id"])];
      ++s.c.flows;
      continue;
    }
    if (ph == "i" || std::string_view(e["cat"]) == "Trace") {
      ++s.c.other;
      continue;
    }
    EXPECT_EQ(ph, "X");
    std::string_view cat = e["cat"], name = e["name"];
    double ts = e["ts"];
    s.first_ts = std::min(s.first_ts, ts);
    s.last_ts = std::max(s.last_ts, ts + double(e["dur"]));
    EXPECT_GE(double(e["dur"]), 0.0);
    simdjson::dom::element args = e["args"];
    if (cat == "cpu_op") {
      ++s.c.cpu_ops;
    } else if (cat == "cuda_runtime") {
      ++s.c.runtime;
      s.runtime_corrs.insert(int64_t(args["correlation"]));
    } else if (cat == "user_annotation") {
      ++s.c.user_annotations;
      if (name.rfind("ProfilerStep#", 0) == 0) {
        ++s.c.steps;
        s.steps.insert(std::stoll(std::string(name.substr(13))));
      }
    } else if (cat == "gpu_user_annotation") {
      ++s.c.gpu_user_annotations;
    } else if (cat == "gpu_memcpy" || cat == "gpu_memset") {
      ++(cat == "gpu_memcpy" ? s.c.memcpys : s.c.memsets);
      EXPECT_GT(int64_t(args["bytes"]), 0);
      s.memop_corrs.insert(int64_t(args["correlation"]));
    } else if (cat == "kernel") {
      ++s.c.kernels;
      int64_t corr = args["correlation"];
      EXPECT_TRUE(s.kernel_corrs.insert(corr).second) << "duplicate correlation " << corr;
      EXPECT_EQ(int64_t(args["stream"]), int64_t(e["tid"]));
      if (auto nccl = parse_nccl_kernel_name(name)) {
        ++s.c.nccl_kernels;
        // The operation comes from the args (SendRecv kernels carry All-to-All).
        std::string_view coll = args["Collective name"];
        CollOp op = coll_op_from_framework_name(coll);
        ++s.c.nccl_by_op[static_cast<size_t>(op)];
        if (nccl->op != CollOp::SendRecv) {
          EXPECT_EQ(nccl->op, op) << name;
        }
        int64_t in = args["In msg nelems"], out = args["Out msg nelems"], g = args["Group size"];
        std::string_view ranks = args["Process Group Ranks"], dtype = args["dtype"];
        std::string_view pg = args["Process Group Name"];
        if (in > 0 && out > 0 && g > 0 && !ranks.empty() && !dtype.empty() && !pg.empty())
          ++s.nccl_with_args;
      } else {
        switch (classify_kernel(name)) {
          case Category::Gemm:
            ++s.c.gemm_kernels;
            break;
          case Category::Attention:
            ++s.c.attention_kernels;
            break;
          case Category::Elementwise:
            ++s.c.elementwise_kernels;
            break;
          default:
            ADD_FAILURE() << "unclassified kernel " << name;
        }
      }
    } else {
      ADD_FAILURE() << "unexpected category " << cat;
    }
  }
  return s;
}

TEST_F(GenKinetoTest, CountsMatchTheFile) {
  KinetoGenOptions o;
  o.target_bytes = 2'000'000;
  o.rank = 3;
  o.world_size = 16;
  o.seed = 42;
  fs::path out = dir_ / "rank3.json";
  KinetoGenCounts c = generate_kineto(o, out.string());

  EXPECT_GE(c.bytes, 2'000'000);
  EXPECT_LT(c.bytes, 3'000'000);  // overshoots by less than a step
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(out)), c.bytes);
  EXPECT_EQ(std::vector<std::string>{"rank3.json"},
            std::vector<std::string>{fs::directory_iterator(dir_)->path().filename().string()});

  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(out.string());  // valid JSON and UTF-8, or throws
  EXPECT_EQ(int64_t(doc["schemaVersion"]), 1);
  EXPECT_EQ(std::string_view(doc["displayTimeUnit"]), "ms");
  EXPECT_EQ(uint64_t(doc["baseTimeNanoseconds"]), 1'765'000'000'000'000'000u);
  EXPECT_EQ(simdjson::dom::array(doc["deviceProperties"]).size(), 8u);
  simdjson::dom::element di = doc["distributedInfo"];
  EXPECT_EQ(std::string_view(di["backend"]), "nccl");
  EXPECT_EQ(int64_t(di["rank"]), 3);
  EXPECT_EQ(int64_t(di["world_size"]), 16);
  EXPECT_EQ(int64_t(di["pg_count"]), 2);
  EXPECT_EQ(simdjson::dom::array(di["pg_config"]).size(), 2u);
  EXPECT_FALSE(std::string_view(di["nccl_version"]).empty());

  Seen s = scan(doc);
  EXPECT_EQ(s.c.events, c.events);
  EXPECT_EQ(s.c.steps, c.steps);
  EXPECT_EQ(s.c.user_annotations, c.user_annotations);
  EXPECT_EQ(s.c.gpu_user_annotations, c.gpu_user_annotations);
  EXPECT_EQ(s.c.cpu_ops, c.cpu_ops);
  EXPECT_EQ(s.c.runtime, c.runtime);
  EXPECT_EQ(s.c.kernels, c.kernels);
  EXPECT_EQ(s.c.gemm_kernels, c.gemm_kernels);
  EXPECT_EQ(s.c.attention_kernels, c.attention_kernels);
  EXPECT_EQ(s.c.elementwise_kernels, c.elementwise_kernels);
  EXPECT_EQ(s.c.nccl_kernels, c.nccl_kernels);
  EXPECT_EQ(s.c.nccl_by_op, c.nccl_by_op);
  EXPECT_EQ(s.c.memcpys, c.memcpys);
  EXPECT_EQ(s.c.memsets, c.memsets);
  EXPECT_EQ(s.c.flows, c.flows);
  EXPECT_EQ(s.c.metadata, c.metadata);
  EXPECT_EQ(s.c.other, c.other);
  EXPECT_EQ(c.kernels,
            c.gemm_kernels + c.attention_kernels + c.elementwise_kernels + c.nccl_kernels);

  // A realistic mix: several steps, every op kind, all NCCL kernels with full metadata.
  EXPECT_GE(c.steps, 3);
  EXPECT_EQ(s.steps.size(), static_cast<size_t>(c.steps));
  EXPECT_EQ(*s.steps.begin(), 0);
  EXPECT_EQ(*s.steps.rbegin(), c.steps - 1);
  for (CollOp op : {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter, CollOp::AllToAll,
                    CollOp::Broadcast})
    EXPECT_GT(c.nccl_by_op[static_cast<size_t>(op)], 0) << to_string(op);
  EXPECT_EQ(c.nccl_by_op[static_cast<size_t>(CollOp::Unknown)], 0);
  EXPECT_EQ(s.nccl_with_args, c.nccl_kernels);
  EXPECT_GT(c.gemm_kernels, 0);
  EXPECT_GT(c.attention_kernels, 0);
  EXPECT_GT(c.memcpys, 0);
  EXPECT_GT(c.memsets, 0);

  // Every GPU activity has a launch and a flow pair with its correlation.
  for (int64_t corr : s.kernel_corrs) {
    EXPECT_TRUE(s.runtime_corrs.count(corr)) << corr;
    EXPECT_EQ(s.s_flows[corr], 1) << corr;
    EXPECT_EQ(s.f_flows[corr], 1) << corr;
  }
  for (int64_t corr : s.memop_corrs) EXPECT_TRUE(s.runtime_corrs.count(corr)) << corr;
  EXPECT_EQ(c.flows, 2 * (c.kernels + c.memcpys + c.memsets));

  // Timestamps are µs with exactly three decimals, as Kineto writes them.
  std::string text = read(out);
  size_t pos = 0, checked = 0;
  while ((pos = text.find("\"ts\": ", pos)) != std::string::npos && checked < 5000) {
    pos += 6;
    size_t end = text.find_first_of(",\n}", pos);
    std::string v = text.substr(pos, end - pos);
    ASSERT_EQ(v.find('.'), v.size() - 4) << v;
    ++checked;
  }
  EXPECT_EQ(checked, 5000u);
  EXPECT_GT(s.last_ts, s.first_ts);
}

TEST_F(GenKinetoTest, DeterministicPerSeed) {
  KinetoGenOptions o;
  o.target_bytes = 300'000;
  o.world_size = 4;
  o.rank = 1;
  o.seed = 7;
  KinetoGenCounts a = generate_kineto(o, (dir_ / "a.json").string());
  KinetoGenCounts b = generate_kineto(o, (dir_ / "b.json").string());
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(read(dir_ / "a.json"), read(dir_ / "b.json"));
  o.seed = 8;
  generate_kineto(o, (dir_ / "c.json").string());
  EXPECT_NE(read(dir_ / "a.json"), read(dir_ / "c.json"));
}

TEST_F(GenKinetoTest, SingleRankHasNoCollectives) {
  KinetoGenOptions o;
  o.target_bytes = 100'000;
  o.world_size = 1;
  KinetoGenCounts c = generate_kineto(o, (dir_ / "w1.json").string());
  EXPECT_EQ(c.nccl_kernels, 0);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load((dir_ / "w1.json").string());
  Seen s = scan(doc);
  EXPECT_EQ(s.c.nccl_kernels, 0);
  EXPECT_EQ(s.c.kernels, c.kernels);
  EXPECT_EQ(int64_t(doc["distributedInfo"]["pg_count"]), 1);
}

TEST_F(GenKinetoTest, BadOptions) {
  KinetoGenOptions o;
  o.world_size = 4;
  o.rank = 4;
  try {
    generate_kineto(o, (dir_ / "x.json").string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Usage);
  }
  o.rank = 0;
  EXPECT_THROW(generate_kineto(o, (dir_ / "missing" / "x.json").string()), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST(GenKinetoCounts, JsonNamesOps) {
  KinetoGenCounts c;
  c.nccl_by_op[static_cast<size_t>(CollOp::AllReduce)] = 5;
  c.kernels = 9;
  std::string j = c.to_json();
  EXPECT_NE(j.find("\"nccl_by_op\":{\"allreduce\":5}"), std::string::npos) << j;
  EXPECT_NE(j.find("\"kernels\":9"), std::string::npos) << j;
  simdjson::dom::parser parser;
  EXPECT_EQ(int64_t(parser.parse(j)["kernels"]), 9);
}

}  // namespace
}  // namespace braid::bench
