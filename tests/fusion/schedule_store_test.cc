#include "fusion/schedule_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "analysis/store.h"
#include "fusion/schedules.h"
#include "trace/error.h"
#include "trace/reader.h"
#include "trace/schema.h"
#include "trace/sqlite_util.h"
#include "trace/store_update.h"
#include "trace/test_util.h"
#include "trace/writer.h"

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

TEST(StoreUpdate, AScheduleTooLargeForOneValueIsOneLineSayingHowLargeAndNothingStored) {
  // SQLite holds at most SQLITE_MAX_LENGTH bytes in one value (1 GB in Debian's build): a
  // schedule past it (16,384 ranks of a tp-sp step) once failed as "NOT NULL constraint failed"
  // after the int length wrapped. Here the connection's limit is lowered to a few KB.
  test::TempDir dir;
  std::string path = dir.file("s.braid");
  store_schedule(path, testing::two_rank_schedule(), -1, "[]", true);
  {
    StoreUpdate u(path);
    sqlite3_limit(u.db(), SQLITE_LIMIT_LENGTH, 500);
    try {
      insert_schedule(u.db(), testing::four_rank_schedule());
      ADD_FAILURE() << "stored a schedule over the limit";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("more than the store holds in one value"), std::string::npos) << m;
      EXPECT_NE(m.find(" bytes is more than one SQLite value holds"), std::string::npos) << m;
      EXPECT_NE(m.find("4 ranks"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  EXPECT_EQ(list_schedules(path).size(), 1u);
}

// The schema registers each owned table family by name (trace/schema.h); the owner holds its DDL.
// Each owner creates exactly the tables registered for it, and none of them is a core table, so
// the register and the DDL cannot drift apart.
TEST(TableOwners, EachOwnerCreatesExactlyItsRegisteredTables) {
  const std::map<std::string_view, void (*)(sqlite3*)> create = {
      {"analysis/store.cc", &analysis::ensure_tables},
      {"fusion/schedule_store.cc", &ensure_tables}};
  ASSERT_EQ(schema::owned_families().size(), create.size());
  for (const schema::OwnedFamily& f : schema::owned_families()) {
    auto it = create.find(f.owner);
    ASSERT_NE(it, create.end()) << f.owner << " is registered but not known to this test";
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
    it->second(db);
    it->second(db);  // idempotent: every write calls it
    std::set<std::string> made;
    {
      sql::Stmt t(db, "SELECT name FROM sqlite_master WHERE type='table'");
      while (t.step()) made.insert(t.text(0));
    }
    sqlite3_close(db);
    std::set<std::string> registered;
    for (std::string_view t : f.tables) {
      registered.emplace(t);
      EXPECT_EQ(schema::owner_of(t), &f) << t;
      EXPECT_FALSE(schema::is_core_table(t)) << t;
    }
    EXPECT_EQ(made, registered) << f.owner;
  }
  EXPECT_EQ(schema::owner_of("kernels"), nullptr);
  EXPECT_EQ(schema::owner_of("nccl_calls"), nullptr);
  EXPECT_TRUE(schema::is_core_table("kernels"));
  EXPECT_FALSE(schema::is_core_table("nccl_calls"));  // a capture table: with a capture's rows
}

// A new file has no owned table; each family arrives with its owner's first committed write, and
// until then the owners' readers take the missing tables as empty.
TEST(TableOwners, AFileHasAFamilyOnceItsOwnerWroteIt) {
  test::TempDir dir;
  const std::string path = dir.file("new.braid");
  {
    TraceWriter w(path, TraceWriter::Mode::Create);
    w.commit();
  }
  auto tables = [&] {
    std::set<std::string> out;
    TraceReader r(path);
    for (const schema::OwnedFamily& f : schema::owned_families())
      for (std::string_view t : f.tables)
        if (r.has_table(std::string(t))) out.emplace(t);
    return out;
  };
  EXPECT_TRUE(tables().empty());
  EXPECT_TRUE(list_schedules(path).empty());
  EXPECT_TRUE(list_opportunities(path).empty());
  try {
    load_stored_schedule(path, 1);
    ADD_FAILURE() << "loaded a schedule from a file without one";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::NotFound);
    EXPECT_THAT(e.what(), HasSubstr("no schedule 1 (the file holds no schedules)"));
  }
  EXPECT_FALSE(analysis::load_costs(path, 1).analysed);
  {
    TraceReader r(path);
    EXPECT_FALSE(has_schedules(r));
    EXPECT_TRUE(analysis::load_critical_path(r, 1).empty());
    EXPECT_TRUE(analysis::load_comm_labels(r, 1).empty());
    EXPECT_TRUE(r.derived_tables().empty());
  }
  {
    StoreUpdate u(path);
    insert_schedule(u.db(), testing::two_rank_schedule());
    // not committed: the tables go with the rows
  }
  EXPECT_TRUE(tables().empty());
  const int64_t id = store_schedule(path, testing::two_rank_schedule());
  EXPECT_EQ(tables(), (std::set<std::string>{"opportunities", "schedules"}));
  EXPECT_EQ(load_stored_schedule(path, id), testing::two_rank_schedule());
  TraceReader r(path);
  EXPECT_EQ(r.derived_tables(),
            (std::vector<std::pair<std::string, int64_t>>{{"opportunities", 0}, {"schedules", 1}}));
}

}  // namespace
}  // namespace braid::fusion
