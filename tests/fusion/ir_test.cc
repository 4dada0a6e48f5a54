// Schedule IR: JSON round trip against golden files, parser errors, validation, helpers.
#include "fusion/ir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fusion/dataflow.h"
#include "fusion/schedules.h"
#include "fusion/validate.h"
#include "trace/error.h"

namespace braid::fusion {
namespace {

using namespace braid::fusion::testing;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string golden_path(const std::string& name) {
  return std::string(BRAID_TEST_DATA_DIR) + "/fusion/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Compares with the golden file; BRAID_UPDATE_GOLDEN=1 rewrites it (review the diff!).
void expect_golden(const std::string& text, const std::string& name) {
  std::string path = golden_path(name);
  if (std::getenv("BRAID_UPDATE_GOLDEN")) std::ofstream(path, std::ios::binary) << text;
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_EQ(text, read_file(path)) << "golden " << path << " differs";
}

// The message of the braid::Error `f` throws, checking its code.
template <typename F>
std::string error_of(F f, ErrorCode code = ErrorCode::BadFormat) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a braid::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

std::string joined(const std::vector<std::string>& v) {
  std::string t;
  for (const auto& s : v) t += s + "\n";
  return t;
}

TEST(ScheduleJson, TwoRankRoundTripIsExact) {
  Schedule s = two_rank_schedule();
  ASSERT_TRUE(validate(s).empty()) << joined(validate(s));
  std::string text = to_json(s);
  expect_golden(text, "two_rank.json");
  std::string golden = read_file(golden_path("two_rank.json"));
  Schedule parsed = parse_schedule(golden, "two_rank.json");
  EXPECT_EQ(parsed, s);
  EXPECT_EQ(to_json(parsed), golden);
}

TEST(ScheduleJson, OutputsAndReplacesRoundTrip) {
  Schedule s = two_rank_schedule();
  s.ranks[0].outputs = {"grad"};
  s.ranks[0].streams[1].ops[1].replaces = {3, 17};
  std::string text = to_json(s);
  EXPECT_THAT(text, HasSubstr("\"outputs\": [\"grad\"],"));
  EXPECT_THAT(text, HasSubstr(", \"replaces\": [3, 17]}"));
  Schedule parsed = parse_schedule(text);
  EXPECT_EQ(parsed, s);
  EXPECT_EQ(to_json(parsed), text);
  EXPECT_TRUE(validate(s).empty()) << joined(validate(s));
  s.ranks[1].outputs = {"nope"};
  EXPECT_THAT(joined(validate(s)), HasSubstr("rank 1: output 'nope' is not a declared buffer"));
}

// A lifted schedule names its run and step in a field of its own, not in its provenance's words.
TEST(ScheduleJson, LiftedFromRoundTripsAndIsAbsentWhenNotLifted) {
  Schedule s = two_rank_schedule();
  EXPECT_THAT(to_json(s), Not(HasSubstr("lifted_from")));
  s.lifted = {3, -1};
  std::string text = to_json(s);
  EXPECT_THAT(text, HasSubstr("\n  \"lifted_from\": {\"run\": 3, \"step\": -1},\n"));
  Schedule parsed = parse_schedule(text);
  EXPECT_EQ(parsed.lifted, (LiftSource{3, -1}));
  EXPECT_EQ(parsed, s);
  EXPECT_EQ(to_json(parsed), text);
  auto parse_with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return [t] { parse_schedule(t, "in.json"); };
  };
  EXPECT_THAT(error_of(parse_with("\"step\": -1", "\"stp\": -1")),
              HasSubstr("in.json: $.lifted_from: unknown key \"stp\""));
  EXPECT_THAT(error_of(parse_with("\"run\": 3", "\"run\": \"3\"")),
              HasSubstr("in.json: $.lifted_from.run: expected an integer"));
}

TEST(ScheduleJson, ReplicatedComputeAndBufferRoundTripAndValidate) {
  Schedule s = two_rank_schedule();
  for (int32_t r = 0; r < 2; ++r) {
    s.ranks[r].buffers[0].replicated = "world";
    s.ranks[r].streams[0].ops[0].compute()->replicated = "world";
  }
  std::string text = to_json(s);
  EXPECT_THAT(text, HasSubstr("\"size\": 8, \"replicated\": \"world\"}"));
  EXPECT_THAT(text, HasSubstr("\"opaque\": false, \"replicated\": \"world\""));
  Schedule parsed = parse_schedule(text);
  EXPECT_EQ(parsed, s);
  EXPECT_EQ(to_json(parsed), text);
  EXPECT_TRUE(validate(s).empty()) << joined(validate(s));
  s.ranks[1].buffers[0].replicated = "nope";
  s.comms.push_back({"solo", {0}});
  s.ranks[1].streams[0].ops[0].compute()->replicated = "solo";
  EXPECT_THAT(joined(validate(s)),
              HasSubstr("buffer 'act' is replicated over 'nope', an unknown communicator"));
  EXPECT_THAT(joined(validate(s)),
              HasSubstr("replicated over 'solo', which this rank is not a member of"));
}

TEST(ScheduleJson, FourRankRoundTripIsExact) {
  Schedule s = four_rank_schedule();
  ASSERT_TRUE(validate(s).empty()) << joined(validate(s));
  std::string text = to_json(s);
  expect_golden(text, "four_rank.json");
  std::string golden = read_file(golden_path("four_rank.json"));
  Schedule parsed = parse_schedule(golden, "four_rank.json");
  EXPECT_EQ(parsed, s);
  EXPECT_EQ(to_json(parsed), golden);
}

TEST(ScheduleJson, WriterLayoutIsPinned) {
  Schedule s;
  s.name = "tiny";
  s.comms.push_back({"w", {0}});
  s.add_buffer(0, "b", "int64", 2);
  int st = s.add_stream(0, "main");
  s.append(0, st, Wait{"e\x01"});
  EXPECT_EQ(to_json(s),
            "{\n"
            "  \"format\": \"braid-schedule/1\",\n"
            "  \"name\": \"tiny\",\n"
            "  \"provenance\": [],\n"
            "  \"communicators\": [\n"
            "    {\"id\": \"w\", \"ranks\": [0]}\n"
            "  ],\n"
            "  \"ranks\": [\n"
            "    {\n"
            "      \"rank\": 0,\n"
            "      \"buffers\": [\n"
            "        {\"name\": \"b\", \"dtype\": \"int64\", \"size\": 2}\n"
            "      ],\n"
            "      \"streams\": [\n"
            "        {\n"
            "          \"name\": \"main\",\n"
            "          \"ops\": [\n"
            "            {\"id\": 0, \"kind\": \"wait\", \"event\": \"e\\u0001\"}\n"
            "          ]\n"
            "        }\n"
            "      ]\n"
            "    }\n"
            "  ]\n"
            "}\n");
  EXPECT_EQ(parse_schedule(to_json(s)), s);
}

TEST(ScheduleJson, NonCanonicalTextParsesToTheSameSchedule) {
  // Other key order and whitespace, UTF-8 names: same schedule, canonical text on output.
  std::string text = R"({"ranks": [{"streams": [{"ops": [
      {"kind": "delay", "duration_ns": 7, "id": 3}], "name": "s\u00e9"}],
      "buffers": [], "rank": 0}], "communicators": [], "provenance": ["é"],
      "name": "n", "format": "braid-schedule/1"})";
  Schedule s = parse_schedule(text);
  ASSERT_EQ(s.ranks.size(), 1u);
  EXPECT_EQ(s.ranks[0].streams[0].name, "s\xc3\xa9");
  EXPECT_EQ(s.provenance[0], "\xc3\xa9");
  ASSERT_NE(s.ranks[0].streams[0].ops[0].delay(), nullptr);
  EXPECT_EQ(s.ranks[0].streams[0].ops[0].delay()->duration_ns, 7);
  EXPECT_EQ(s.ranks[0].streams[0].ops[0].id, 3);
  EXPECT_EQ(parse_schedule(to_json(s)), s);
}

TEST(ScheduleJson, SaveAndLoad) {
  auto dir = std::filesystem::temp_directory_path() / "braid_fusion_ir_test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "s.json").string();
  Schedule s = four_rank_schedule();
  save_schedule(s, path);
  EXPECT_EQ(load_schedule(path), s);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
  EXPECT_THAT(error_of([&] { load_schedule(path); }, ErrorCode::NotFound), HasSubstr("s.json"));
}

// Replaces the first occurrence of `from` in the golden 2-rank text.
std::string edited(const std::string& from, const std::string& to) {
  std::string t = read_file(golden_path("two_rank.json"));
  size_t at = t.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) t.replace(at, from.size(), to);
  return t;
}

TEST(ScheduleJson, ParserErrorsNameThePath) {
  auto parse = [](const std::string& t) { return [t] { parse_schedule(t, "in.json"); }; };
  EXPECT_THAT(error_of(parse(edited("braid-schedule/1", "chrome-trace"))),
              AllOf(HasSubstr("in.json: $.format: unsupported format \"chrome-trace\""),
                    HasSubstr("expected \"braid-schedule/1\"")));
  EXPECT_THAT(
      error_of(parse(edited("braid-schedule/1", "braid-schedule/2")), ErrorCode::Unsupported),
      HasSubstr("$.format: unsupported format \"braid-schedule/2\""));
  EXPECT_THAT(error_of(parse(edited("\"format\": \"braid-schedule/1\",", ""))),
              HasSubstr("in.json: $: missing field \"format\""));
  // The all-reduce is op 1 of rank 0's second stream.
  EXPECT_THAT(error_of(parse(edited("\"count\": 8, ", ""))),
              HasSubstr("in.json: $.ranks[0].streams[1].ops[1]: missing field \"count\""));
  EXPECT_THAT(error_of(parse(edited("\"allreduce\"", "\"allsum\""))),
              AllOf(HasSubstr("$.ranks[0].streams[1].ops[1].op: unknown collective op \"allsum\""),
                    HasSubstr("expected allreduce")));
  EXPECT_THAT(error_of(parse(edited("\"allreduce\"", "\"barrier\""))),
              HasSubstr("$.ranks[0].streams[1].ops[1].op: unknown collective op \"barrier\""));
  EXPECT_THAT(error_of(parse(edited("\"kind\": \"delay\"", "\"kind\": \"sleep\""))),
              HasSubstr("$.ranks[0].streams[0].ops[2].kind: unknown op kind \"sleep\""));
  EXPECT_THAT(error_of(parse(edited("\"duration_ns\": 250", "\"duration_ns\": \"250\""))),
              HasSubstr("$.ranks[0].streams[0].ops[2].duration_ns: expected an integer"));
  EXPECT_THAT(error_of(parse(edited("\"duration_ns\": 250", "\"duration_ns\": 2.5"))),
              HasSubstr("$.ranks[0].streams[0].ops[2].duration_ns: expected an integer"));
  EXPECT_THAT(error_of(parse(edited("\"offset\": 0, \"count\": 8}]", "\"offset\": 0}]"))),
              HasSubstr("$.ranks[0].streams[0].ops[0].reads[0]: missing field \"count\""));
  EXPECT_THAT(error_of(parse(edited("\"opaque\": false", "\"opaque\": false, \"opaqe\": 1"))),
              HasSubstr("$.ranks[0].streams[0].ops[0]: unknown key \"opaqe\""));
  EXPECT_THAT(error_of(parse(edited("\"opaque\": false", "\"opaque\": false, \"opaque\": true"))),
              HasSubstr("$.ranks[0].streams[0].ops[0]: duplicate key \"opaque\""));
  EXPECT_THAT(error_of(parse(edited("\"rank\": 0", "\"rank\": 1"))),
              HasSubstr("$.ranks[0].rank: rank 1 listed at position 0"));
  EXPECT_THAT(error_of(parse(edited("\"ranks\": [0, 1]", "\"ranks\": [0, \"1\"]"))),
              HasSubstr("$.communicators[0].ranks[1]: expected an integer"));
  EXPECT_THAT(error_of(parse(edited("\"streams\": [", "\"streams\": {"))),
              HasSubstr("in.json: not valid JSON"));
  EXPECT_THAT(error_of(parse("[]")), HasSubstr("in.json: $: expected an object"));
  EXPECT_THAT(error_of(parse("")), HasSubstr("in.json: not valid JSON"));
}

// --- validation -------------------------------------------------------------------------------

Schedule two_ranks_one_stream() {
  Schedule s;
  s.name = "t";
  s.comms.push_back({"w", {0, 1}});
  for (int32_t r = 0; r < 2; ++r) {
    s.add_buffer(r, "g", "float32", 8);
    s.add_stream(r, "main");
  }
  return s;
}

TEST(ScheduleValidate, ValidSchedulesPass) {
  EXPECT_EQ(joined(validate(two_rank_schedule())), "");
  EXPECT_EQ(joined(validate(four_rank_schedule())), "");
  EXPECT_EQ(joined(validate(Schedule{})), "");
}

TEST(ScheduleValidate, MissingPartner) {
  Schedule s = two_ranks_one_stream();
  for (int32_t r = 0; r < 2; ++r)
    s.append(r, 0, coll(CollOp::AllReduce, "w", 8, sl("g", 0, 8), sl("g", 0, 8), "a"));
  s.append(0, 0, coll(CollOp::AllReduce, "w", 8, sl("g", 0, 8), sl("g", 0, 8), "b"));
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("rank 0 stream 'main' op 1"), HasSubstr("allreduce 'b'"),
                          HasSubstr("collective #1 on communicator 'w'"),
                          HasSubstr("rank 1 has no partner")));
}

TEST(ScheduleValidate, MismatchedCountOrOp) {
  Schedule s = two_ranks_one_stream();
  s.append(0, 0, coll(CollOp::AllReduce, "w", 8, sl("g", 0, 8), sl("g", 0, 8)));
  s.append(1, 0, coll(CollOp::AllReduce, "w", 4, sl("g", 0, 4), sl("g", 0, 4)));
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("collective #0 on communicator 'w' does not match"),
                          HasSubstr("allreduce count 8"), HasSubstr("allreduce count 4")));

  Schedule t = two_ranks_one_stream();
  t.append(0, 0, coll(CollOp::AllReduce, "w", 4, sl("g", 0, 4), sl("g", 0, 4)));
  t.append(1, 0, coll(CollOp::AllGather, "w", 4, sl("g", 0, 4), sl("g", 0, 8)));
  p = validate(t);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("does not match"), HasSubstr("allgather count 4")));
}

TEST(ScheduleValidate, PointToPointPeersMustAgree) {
  Schedule s = two_ranks_one_stream();
  s.add_buffer(2, "g", "float32", 8);
  s.add_stream(2, "main");
  s.comms.push_back({"all", {0, 1, 2}});
  s.append(0, 0, p2p(CollOp::Send, "all", 1, 4, sl("g", 0, 4)));
  s.append(1, 0, p2p(CollOp::Recv, "all", 2, 4, sl("g", 0, 4)));  // expects rank 2, not 0
  auto p = validate(s);
  ASSERT_EQ(p.size(), 2u) << joined(p);
  EXPECT_THAT(joined(p), AllOf(HasSubstr("send #0 from rank 0 to rank 1 on 'all', but rank 1 "
                                         "has no matching recv"),
                               HasSubstr("recv #0 from rank 2 on 'all', but rank 2 has no "
                                         "matching send")));

  Schedule t = two_ranks_one_stream();
  t.append(0, 0, p2p(CollOp::Send, "w", 1, 4, sl("g", 0, 4)));
  t.append(1, 0, p2p(CollOp::Recv, "w", 0, 2, sl("g", 0, 2)));
  p = validate(t);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("(count 4 dtype 'float32') is matched with"),
                          HasSubstr("(count 2 dtype 'float32')")));
}

TEST(ScheduleValidate, ManyToManyChunksMustAgree) {
  Schedule s = two_ranks_one_stream();
  for (int32_t r = 0; r < 2; ++r) {
    Collective m = coll(CollOp::ManyToMany, "w", 0, sl("g", 0, 4), sl("g", 4, 4));
    m.sends = {{1 - r, 0, 2}};
    m.recvs = {{1 - r, 0, r == 0 ? 2 : 3}};
    s.append(r, 0, m);
  }
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], HasSubstr("manytomany #0 on communicator 'w': rank 0 sends chunks of [2] "
                              "elements to rank 1, which receives [3] from it"));
}

TEST(ScheduleValidate, WaitBeforeRecord) {
  Schedule s = two_ranks_one_stream();
  s.append(0, 0, Wait{"e"});
  s.append(0, 0, Record{"e"});
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("rank 0 stream 'main' op 0"), HasSubstr("waits for event 'e'"),
                          HasSubstr("recorded only after the wait can complete"),
                          HasSubstr("rank 0 stream 'main' op 1")));

  // Two streams waiting on each other's later record.
  Schedule t = two_ranks_one_stream();
  t.add_stream(0, "side");
  t.append(0, 0, Wait{"b"});
  t.append(0, 0, Record{"a"});
  t.append(0, 1, Wait{"a"});
  t.append(0, 1, Record{"b"});
  p = validate(t);
  EXPECT_EQ(p.size(), 2u) << joined(p);
  EXPECT_THAT(joined(p), HasSubstr("recorded only after"));

  Schedule u = two_ranks_one_stream();
  u.append(1, 0, Wait{"never"});
  p = validate(u);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], HasSubstr("waits for event 'never', which no stream of rank 1 records"));

  Schedule v = two_ranks_one_stream();
  v.append(1, 0, Record{"x"});
  v.append(1, 0, Record{"x"});
  p = validate(v);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], HasSubstr("event 'x' is recorded twice on rank 1"));
}

TEST(ScheduleValidate, CrossRankDeadlock) {
  // Rank 0 runs A then B, rank 1 runs B then A, on two communicators.
  Schedule s = two_ranks_one_stream();
  s.comms.push_back({"w2", {0, 1}});
  auto a = coll(CollOp::AllReduce, "w", 8, sl("g", 0, 8), sl("g", 0, 8), "A");
  auto b = coll(CollOp::AllReduce, "w2", 8, sl("g", 0, 8), sl("g", 0, 8), "B");
  s.append(0, 0, a);
  s.append(0, 0, b);
  s.append(1, 0, b);
  s.append(1, 0, a);
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("deadlock"), HasSubstr("allreduce 'A'"),
                          HasSubstr("allreduce 'B'"), HasSubstr("matched on ranks 0 1")));
  ValidateOptions no;
  no.check_deadlock = false;
  EXPECT_TRUE(validate(s, no).empty());

  // The same order on both ranks is fine.
  Schedule ok = two_ranks_one_stream();
  ok.comms.push_back({"w2", {0, 1}});
  for (int32_t r = 0; r < 2; ++r) {
    ok.append(r, 0, a);
    ok.append(r, 0, b);
  }
  EXPECT_TRUE(validate(ok).empty()) << joined(validate(ok));

  // Both ranks send before they receive: a rendezvous deadlock.
  Schedule sr = two_ranks_one_stream();
  for (int32_t r = 0; r < 2; ++r) {
    sr.append(r, 0, p2p(CollOp::Send, "w", 1 - r, 4, sl("g", 0, 4)));
    sr.append(r, 0, p2p(CollOp::Recv, "w", 1 - r, 4, sl("g", 4, 4)));
  }
  p = validate(sr);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], AllOf(HasSubstr("deadlock"),
                          HasSubstr("rank 0 stream 'main' op 0 (id 0: send on 'w' to rank 1) "
                                    "paired with rank 1 stream 'main' op 1 (id 3: recv on 'w' "
                                    "from rank 0)")));

  // A deadlock through an event: rank 1's all-reduce waits on a stream that waits for rank 0's
  // second all-reduce, which needs rank 1's all-reduce first.
  Schedule ev = two_ranks_one_stream();
  ev.comms.push_back({"w2", {0, 1}});
  ev.add_stream(1, "side");
  ev.append(0, 0, a);
  ev.append(0, 0, b);
  ev.append(1, 1, b);
  ev.append(1, 1, Record{"done_b"});
  ev.append(1, 0, Wait{"done_b"});
  ev.append(1, 0, a);
  p = validate(ev);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0],
              AllOf(HasSubstr("deadlock"), HasSubstr("allreduce 'A'"), HasSubstr("allreduce 'B'")));
}

TEST(ScheduleValidate, OutOfBoundsSlice) {
  Schedule s = two_ranks_one_stream();
  for (int32_t r = 0; r < 2; ++r)
    s.append(r, 0, coll(CollOp::AllReduce, "w", 8, sl("g", 4, 8), sl("g", 0, 8)));
  s.append(0, 0, comp("c", 1, {sl("nope", 0, 1)}, {sl("g", -1, 2)}));
  auto p = validate(s);
  ASSERT_EQ(p.size(), 4u) << joined(p);
  EXPECT_THAT(p[0], HasSubstr("rank 0 stream 'main' op 0 (id 0: allreduce on 'w'): 'in' slice "
                              "[4, 12) is out of bounds of buffer 'g' (size 8)"));
  EXPECT_THAT(p[1], HasSubstr("read names buffer 'nope', which rank 0 does not have"));
  EXPECT_THAT(p[2], HasSubstr("write slice [-1, 1) is out of bounds"));
  EXPECT_THAT(p[3], HasSubstr("rank 1 stream 'main' op 0"));
}

TEST(ScheduleValidate, ShapesAndStructure) {
  Schedule s = two_ranks_one_stream();
  s.add_buffer(0, "h", "int32", 16);
  s.append(0, 0, coll(CollOp::AllGather, "w", 8, sl("g", 0, 8), sl("h", 0, 8)));
  s.append(1, 0, coll(CollOp::AllGather, "w", 8, sl("g", 0, 8), {}));
  s.append(1, 0, coll(CollOp::AllReduce, "nope", 8, sl("g", 0, 8), sl("g", 0, 8)));
  s.ranks[1].streams[0].ops[1].id = 0;
  auto p = joined(validate(s));
  EXPECT_THAT(p, HasSubstr("buffer 'h' has dtype 'int32', the collective 'float32'"));
  EXPECT_THAT(p, HasSubstr("'out' has 8 elements, expected 16"));
  EXPECT_THAT(p, HasSubstr("missing 'out' slice"));
  EXPECT_THAT(p, HasSubstr("unknown communicator 'nope'"));
  EXPECT_THAT(p, HasSubstr("id 0 is also used by rank 0 stream 'main' op 0"));

  Schedule t = two_ranks_one_stream();
  t.comms.push_back({"bad", {0, 0, 5}});
  auto b = coll(CollOp::Broadcast, "w", 8, sl("g", 0, 8), sl("g", 0, 8));
  b.root = 0;
  t.append(0, 0, b);
  t.append(1, 0, b);  // a non-root rank with an input slice
  p = joined(validate(t));
  EXPECT_THAT(p, HasSubstr("communicator 'bad' lists rank 0 twice"));
  EXPECT_THAT(p, HasSubstr("communicator 'bad' names rank 5"));
  EXPECT_THAT(p, HasSubstr("rank 1 stream 'main' op 0 (id 1: broadcast on 'w'): 'in' must be "
                           "absent on this rank"));
}

TEST(ScheduleValidate, AmbiguousOrderOnACommunicator) {
  Schedule s = two_ranks_one_stream();
  s.add_stream(0, "side");
  auto a = coll(CollOp::AllReduce, "w", 4, sl("g", 0, 4), sl("g", 0, 4), "A");
  auto b = coll(CollOp::AllReduce, "w", 4, sl("g", 4, 4), sl("g", 4, 4), "B");
  s.append(0, 0, a);
  s.append(0, 1, b);
  s.append(1, 0, a);
  s.append(1, 0, b);
  auto p = validate(s);
  ASSERT_EQ(p.size(), 1u) << joined(p);
  EXPECT_THAT(p[0], HasSubstr("order on the communicator is ambiguous"));

  // An event orders them: valid, and matching pairs A with A.
  Schedule t = two_ranks_one_stream();
  t.add_stream(0, "side");
  t.append(0, 0, a);
  t.append(0, 0, Record{"a_done"});
  t.append(0, 1, Wait{"a_done"});
  t.append(0, 1, b);
  t.append(1, 0, a);
  t.append(1, 0, b);
  EXPECT_TRUE(validate(t).empty()) << joined(validate(t));
  Matching m = match_schedule_collectives(t);
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[1].seq, 1);
  EXPECT_EQ(m.groups[1].members[0], (OpRef{0, 1, 1}));
  EXPECT_EQ(m.groups[1].members[1], (OpRef{1, 0, 1}));
  EXPECT_EQ(m.group_of({0, 1, 1}), 1);
  EXPECT_EQ(m.group_of({0, 0, 1}), -1);  // the record
}

// --- helpers for passes -----------------------------------------------------------------------

TEST(ScheduleHelpers, IdsAccessAndDataFlow) {
  Schedule s = two_rank_schedule();
  EXPECT_EQ(s.next_op_id(), 12);
  auto ref = s.find_op(3);  // rank 0's all-reduce
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(*ref, (OpRef{0, 1, 1}));
  EXPECT_EQ(s.op(*ref).collective()->label, "grad sync");
  EXPECT_FALSE(s.find_op(99).has_value());
  EXPECT_EQ(describe(s, *ref),
            "rank 0 stream 'comm' op 1 (id 3: allreduce 'grad sync' on "
            "'world')");

  // Who reads grad[2:3] on rank 0: the all-reduce. Who writes it: fwd and the all-reduce.
  EXPECT_EQ(consumers_of(s, 0, sl("grad", 2, 1)), (std::vector<OpRef>{{0, 1, 1}}));
  EXPECT_EQ(producers_of(s, 0, sl("grad", 2, 1)), (std::vector<OpRef>{{0, 0, 0}, {0, 1, 1}}));
  // act[4:8] on rank 1 is written by the recv only; act[0:4] on rank 0 is read by fwd and send.
  EXPECT_EQ(producers_of(s, 1, sl("act", 4, 4)), (std::vector<OpRef>{{1, 1, 2}}));
  EXPECT_EQ(consumers_of(s, 0, sl("act", 0, 4)), (std::vector<OpRef>{{0, 0, 0}, {0, 1, 2}}));
  EXPECT_TRUE(consumers_of(s, 0, sl("act", 8, 0)).empty());

  Schedule f = four_rank_schedule();
  // Broadcast on tp1 (root 2): rank 2 reads x[0:4], rank 3 reads nothing; both write y[0:4].
  const Op& b2 = f.op({2, 0, 4});
  const Op& b3 = f.op({3, 0, 4});
  EXPECT_EQ(access_of(f, 2, b2).reads, (std::vector<Slice>{sl("x", 0, 4)}));
  EXPECT_TRUE(access_of(f, 3, b3).reads.empty());
  EXPECT_EQ(access_of(f, 3, b3).writes, (std::vector<Slice>{sl("y", 0, 4)}));
  // Manytomany reads and writes exactly its chunks.
  Access m = access_of(f, 0, f.op({0, 0, 6}));
  EXPECT_EQ(m.reads, (std::vector<Slice>{sl("x", 0, 1), sl("x", 1, 2)}));
  EXPECT_EQ(m.writes, (std::vector<Slice>{sl("y", 8, 1), sl("y", 9, 2)}));
  // Opaque compute may touch anything.
  EXPECT_TRUE(access_of(f, 0, f.op({0, 0, 0})).any);
  EXPECT_EQ(consumers_of(f, 0, sl("shard", 0, 1)).front(), (OpRef{0, 0, 0}));
}

// Ids for new ops come from a counter that rewrites advance (make_op) without a scan per
// rewrite; it stays above every id in the schedule, including ops added with ids of their own.
TEST(ScheduleHelpers, OpIdCounterStaysAboveEveryId) {
  Schedule s = two_rank_schedule();
  int64_t& next = s.op_id_counter();
  EXPECT_EQ(next, 12);
  // A rewrite: one op replaced in place by a new id, one inserted.
  s.op({0, 1, 1}) = make_op(next, *s.op({0, 1, 1}).collective(), {3});
  auto& ops = s.ranks[0].streams[0].ops;
  ops.insert(ops.begin(), make_op(next, Record{"e"}, {}));
  EXPECT_EQ(s.op_id_counter(), 14);
  EXPECT_EQ(s.append(1, 0, Record{"f"}), 14);
  // An op added with an id of its own, above the counter: the counter rescans.
  s.ranks[1].streams[0].ops.push_back(Op{100, Record{"g"}, {}});
  EXPECT_EQ(s.op_id_counter(), 101);
  // Removing ops never hands an id out twice.
  s.ranks[1].streams[0].ops.pop_back();
  EXPECT_EQ(s.op_id_counter(), 101);
  EXPECT_EQ(s.next_op_id(), 15);  // the exact scan
  EXPECT_TRUE(validate(s).empty());
  // find_op sees the new and moved ops, and not the gone ones.
  EXPECT_EQ(s.find_op(13), (OpRef{0, 0, 0}));
  EXPECT_EQ(s.find_op(12), (OpRef{0, 1, 1}));
  EXPECT_FALSE(s.find_op(3).has_value());
  EXPECT_FALSE(s.find_op(100).has_value());
  ops.erase(ops.begin());
  EXPECT_FALSE(s.find_op(13).has_value());
  EXPECT_EQ(s.find_op(12), (OpRef{0, 1, 1}));
}

}  // namespace
}  // namespace braid::fusion
