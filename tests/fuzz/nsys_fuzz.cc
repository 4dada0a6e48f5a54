// Fuzz target: the Nsight Systems SQLite importer (fuzz_driver.h).
//
// An input is SQL text that builds the export: mutating the statements (numbers replaced by
// extremes, values by NULL or text, columns and tables dropped) reaches the importer with
// well-formed databases of odd content, where byte mutations of a database file mostly stop at
// SQLite's own header checks. Inputs starting with "SQLite format 3" are used as the file itself,
// so raw corrupted databases are covered too; inputs starting with "@fixture" are the fixture's
// SQL followed by the rest of the input. Seed: tests/data/nsys/fixture.sql, a 2-rank export
// of the shape nsys 2024 writes (docs/import-nsys.md).
#include <sqlite3.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_driver.h"

namespace {

std::string materialize(const std::string& input, const std::string& dir) {
  std::string path = dir + "/in.sqlite";
  if (input.rfind("SQLite format 3", 0) == 0) {
    braid::fuzz::write_file(path, input);
    return path;
  }
  // "@fixture" first: the fixture's SQL, then the rest (saved inputs stay small diffs).
  static const std::string kFixtureMark = "@fixture\n";
  if (input.rfind(kFixtureMark, 0) == 0)
    return materialize(braid::fuzz::read_file(BRAID_TEST_DATA_DIR "/nsys/fixture.sql") +
                           input.substr(kFixtureMark.size()),
                       dir);
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    sqlite3_close(db);
    return "";
  }
  // Statements that fail are skipped: each executes on its own, as far as SQLite parses.
  const char* sql = input.c_str();
  sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  while (sql && *sql) {
    sqlite3_stmt* s = nullptr;
    const char* tail = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &s, &tail) != SQLITE_OK || tail == sql) {
      sqlite3_finalize(s);
      const char* semi = std::strchr(sql, ';');  // skip to the next statement
      sql = semi ? semi + 1 : nullptr;
      continue;
    }
    if (s)
      while (sqlite3_step(s) == SQLITE_ROW) {
      }
    sqlite3_finalize(s);
    sql = tail;
  }
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  return path;
}

std::vector<std::string> seeds() {
  std::string fixture = braid::fuzz::read_file(BRAID_TEST_DATA_DIR "/nsys/fixture.sql");
  if (fixture.empty()) return {};
  std::vector<std::string> s = {fixture};
  // The fixture as a database file, for the raw-bytes path.
  std::string dir = "/tmp/braid-nsys-fuzz-seed-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string db = materialize(fixture, dir);
  if (!db.empty()) s.push_back(braid::fuzz::read_file(db));
  std::filesystem::remove_all(dir);
  return s;
}

// clang-format off: the dictionary reads best packed.
const braid::fuzz::Target kTarget{"nsys", braid::TraceFormat::Nsys, materialize, seeds, {
    "NULL", "-9223372036854775808", "9223372036854775807", "4102444800000000001", "-1", "0",
    "1e308", "'x'", "X'00ff'", "''", ";DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;",
    ";DROP TABLE StringIds;", ";DROP TABLE PROCESSES;", ";DELETE FROM ENUM_NSYS_EVENT_TYPE;",
    "'{\"a\":1e400}'", ",", "(", ")"}};
// clang-format on

}  // namespace

BRAID_FUZZ_TARGET(kTarget)
