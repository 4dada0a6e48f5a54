// Fuzz target: the Kineto / Chrome-trace JSON importer (fuzz_driver.h).
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_driver.h"

namespace {

std::string materialize(const std::string& input, const std::string& dir) {
  std::string path = dir + "/in.json";
  braid::fuzz::write_file(path, input);
  return path;
}

std::vector<std::string> seeds() {
  std::vector<std::string> s = {
      R"J({"traceEvents":[{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllGather_RING_LL(x)","pid":0,"tid":7,"ts":10.5,"dur":2,"args":{"stream":7,"correlation":3,"Collective name":"_allgather_base","In msg nelems":4,"Out msg nelems":16,"dtype":"BFloat16","Process Group Name":"3","Group size":4}},{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":9,"dur":1,"args":{"correlation":3}},{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":8,"dur":3,"args":{"Collective name":"allreduce","dtype":"Float"}}],"distributedInfo":{"rank":1,"world_size":4,"pg_config":"[{'pg_name': '3', 'ranks': [0, 1]}]"},"baseTimeNanoseconds":1000})J",
      R"([{"ph":"X","cat":"user_annotation","name":"ProfilerStep#3","pid":1,"tid":1,"ts":1,"dur":100},{"ph":"M","name":"thread_name","pid":0,"tid":7,"args":{"name":"stream 7"}}])",
  };
  // Slices of the real traces: their opening (metadata and first events).
  for (const char* r : {"hta/tests/data/trace_filter/sampled_rank-0.json.gz",
                        "hta/tests/data/nccl_parser_config/nccl_data.json.gz",
                        "tracelens/tests/traces/b200/eager_trace.json.gz"}) {
    std::string text = braid::fuzz::gunzip_file(std::string(BRAID_TRACES_DIR) + "/" + r, 48 << 10);
    if (!text.empty()) s.push_back(text);
  }
  return s;
}

// clang-format off: the dictionary reads best packed.
const braid::fuzz::Target kTarget{"kineto", braid::TraceFormat::Kineto, materialize, seeds, {
    "{", "}", "[", "]", ",", ":", "\"", "\\", "\"ts\":", "\"dur\":", "1e308", "1e30", "-1",
    "9223372036854775", "9200000000000000", "-9.3e15", "null", "\"traceEvents\":", "\"ph\":\"X\"",
    "\"cat\":\"kernel\"", "\"baseTimeNanoseconds\":", "\xff", "0.0000001", "NaN"}};
// clang-format on

}  // namespace

BRAID_FUZZ_TARGET(kTarget)
