// `braid fuse --json` of every synthesizer preset, compared byte for byte with golden outputs:
// the report, the stored input and fused schedules (`braid-schedule/1` bodies) and the stored
// opportunities. Refactorings must leave the fused schedules identical (issue 20); a change
// that means to change them regenerates the files with BRAID_UPDATE_GOLDEN=1 and shows the diff.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "analysis/hardware.h"
#include "fusion/pass_schedules.h"
#include "fusion/schedule_store.h"

namespace braid::fusion {
namespace {

std::string run_cli(const std::string& args, int* status) {
  std::string cmd = std::string(BRAID_CLI) + " " + args + " 2>&1", text;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return text;
}

// Every stored schedule body and opportunity row of `file`, in id order, as text.
std::string stored_rows(const std::string& file) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string out;
  auto dump = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    while (sqlite3_step(st) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        out += std::string(c ? " | " : "") + sqlite3_column_name(st, c) + "=" +
               (t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      out += '\n';
    }
    sqlite3_finalize(st);
  };
  dump("SELECT schedule_id, parent_id, name, passes, body FROM schedules ORDER BY schedule_id");
  dump(
      "SELECT schedule_id, pass, ranks, ops, predicted_saving_ns, detail FROM opportunities "
      "ORDER BY rowid");
  sqlite3_close(db);
  return out;
}

void check_golden(const std::string& name, const Schedule& s, const std::string& profile_args) {
  SCOPED_TRACE(name);
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("braid_golden_" + std::to_string(::getpid()) + ".braid"))
                               .string();
  for (const char* ext : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(file + ext);
  store_schedule(file, s, -1, "[]", true);
  int status = -1;
  std::string got = run_cli("fuse " + file + profile_args + " --json", &status);
  ASSERT_EQ(status, 0) << got;
  got += stored_rows(file);
  for (const char* ext : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(file + ext);

  const std::string golden =
      std::string(BRAID_TEST_DATA_DIR) + "/fusion/golden/" + name + ".txt.gz";
  if (const char* u = std::getenv("BRAID_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    gzFile g = gzopen(golden.c_str(), "wb9");
    ASSERT_NE(g, nullptr) << golden;
    EXPECT_EQ(gzwrite(g, got.data(), static_cast<unsigned>(got.size())),
              static_cast<int>(got.size()));
    gzclose(g);
    return;
  }
  gzFile g = gzopen(golden.c_str(), "rb");
  ASSERT_NE(g, nullptr) << golden << " is missing (BRAID_UPDATE_GOLDEN=1 writes it)";
  std::string want;
  char buf[1 << 16];
  for (int n; (n = gzread(g, buf, sizeof buf)) > 0;) want.append(buf, static_cast<size_t>(n));
  gzclose(g);
  if (got == want) return;
  // Where they part, and the whole output beside the build for a diff.
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  const std::string actual = std::string(BRAID_BINARY_DIR) + "/" + name + ".actual.txt";
  std::ofstream(actual, std::ios::binary) << got;
  ADD_FAILURE() << golden << " differs from byte " << at << ": got \""
                << got.substr(at > 80 ? at - 80 : 0, 200) << "\", want \""
                << want.substr(at > 80 ? at - 80 : 0, 200) << "\" (all of it in " << actual
                << "; BRAID_UPDATE_GOLDEN=1 rewrites the golden file)";
}

// Every preset at the fusion tests' shape on the default profile.
TEST(FuseGolden, EveryPresetAtTestShape) {
  for (const std::string& preset : preset_names())
    check_golden(preset + ".test-shape", testing::preset_at_test_shape(preset), "");
}

// The Chimera presets at Chimera's shapes on the RTX 4080 PCIe profile (coc and the EP rules
// apply there).
TEST(FuseGolden, ChimeraPresetsAtChimeraShape) {
  const std::string rtx = std::string(BRAID_PROFILES_DIR) + "/rtx4080-pcie4.json";
  const analysis::CostModel cm(analysis::load_profile(rtx));
  for (const std::string preset : {"tp-pp", "tp-ep", "sp-ep", "pp-ep", "pp-sp"}) {
    const Preset p = testing::preset_at_chimera_shape(preset);
    check_golden(preset + ".chimera-shape", synthesize(p.model, p.layout, cm), " --profile " + rtx);
  }
}

}  // namespace
}  // namespace braid::fusion
