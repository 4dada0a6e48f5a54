#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fusion/schedule_store.h"
#include "fusion/schedules.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/sqlite_util.h"
#include "trace/store_update.h"
#include "trace/test_util.h"

namespace braid::fusion {
namespace {

using ::testing::HasSubstr;

TEST(ScheduleStore, StoreListLoadAndOpportunities) {
  test::TempDir dir;
  std::string path = dir.file("s.braid");
  Schedule a = testing::two_rank_schedule();
  Schedule b = testing::four_rank_schedule();
  int64_t ia = store_schedule(path, a, -1, "[]", /*create=*/true);
  int64_t ib = store_schedule(path, b, ia, R"(["coalesce"])");
  EXPECT_NE(ia, ib);
  auto list = list_schedules(path);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, ia);
  EXPECT_EQ(list[0].parent_id, -1);
  EXPECT_EQ(list[1].parent_id, ia);
  EXPECT_EQ(list[1].passes, R"(["coalesce"])");
  EXPECT_EQ(list[1].name, b.name);
  EXPECT_EQ(load_stored_schedule(path, ia), a);
  EXPECT_EQ(load_stored_schedule(path, ib), b);
  try {
    load_stored_schedule(path, 99);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no schedule 99 (it holds 1, 2)"));
  }

  {
    StoreUpdate u(path);
    insert_opportunities(u.db(), {{ib, "coalesce", {0, 1}, {4, 5}, 1200, R"({"applied":true})"},
                                  {ib, "tp-sp", {0}, {7}, 9000, "{}"}});
    u.commit();
  }
  auto ops = list_opportunities(path, ib);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].pass, "tp-sp");  // largest saving first
  EXPECT_EQ(ops[1].ranks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ops[1].ops, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(ops[1].detail, R"({"applied":true})");
  EXPECT_TRUE(list_opportunities(path, ia).empty());
  EXPECT_EQ(list_opportunities(path).size(), 2u);
}

TEST(StoreUpdate, RollsBackUnlessCommitted) {
  test::TempDir dir;
  std::string path = dir.file("s.braid");
  store_schedule(path, testing::two_rank_schedule(), -1, "[]", true);
  {
    StoreUpdate u(path);
    insert_schedule(u.db(), testing::four_rank_schedule());
    // destroyed without commit: an exception in the middle of an update
  }
  EXPECT_EQ(list_schedules(path).size(), 1u);
  EXPECT_THROW(StoreUpdate(dir.file("missing.braid")), Error);
  // A file that is not a .braid store is refused before anything is written.
  std::string junk = dir.file("junk.braid");
  { std::ofstream(junk) << "not sqlite at all"; }
  EXPECT_THROW(StoreUpdate{junk}, Error);
  EXPECT_THROW(store_schedule(junk, testing::two_rank_schedule()), Error);
}

}  // namespace
}  // namespace braid::fusion
