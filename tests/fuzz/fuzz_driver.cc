// The importers' fuzz driver (fuzz_driver.h).
#include "tests/fuzz/fuzz_driver.h"

#include <sqlite3.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "trace/error.h"
#include "trace/time_range.h"
#include "trace/writer.h"

namespace braid::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr int kHangSeconds = 20;

std::string g_scratch;
std::atomic<int64_t> g_input_started_ms{0};  // 0: no input running

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const std::string& scratch() {
  if (g_scratch.empty()) {
    char tmpl[] = "/tmp/braid-fuzz-XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (!d) {
      std::perror("mkdtemp");
      std::abort();
    }
    g_scratch = d;
  }
  return g_scratch;
}

[[noreturn]] void fail(const Target& t, const std::string& input, const std::string& why) {
  std::string keep = scratch() + "/failing-input";
  write_file(keep, input);
  std::fprintf(stderr, "%s fuzz: FAILED: %s\n  input kept at %s (%zu bytes)\n", t.name, why.c_str(),
               keep.c_str(), input.size());
  std::fflush(stderr);
  std::_Exit(1);
}

// Every stored time is one trace/time_range.h allows.
std::string bad_stored_time(const std::string& braid_file) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(braid_file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "the committed file does not open";
  }
  std::string why;
  for (const char* table :
       {"kernels", "memcpys", "api_calls", "nvtx_ranges", "steps", "collectives"}) {
    std::string q = std::string("SELECT COUNT(*) FROM ") + table + " WHERE start_ns < " +
                    std::to_string(-kMaxTimeNs) + " OR end_ns < start_ns OR end_ns > " +
                    std::to_string(kMaxTimeNs);
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, q.c_str(), -1, &s, nullptr) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int64(s, 0) > 0)
      why = std::to_string(sqlite3_column_int64(s, 0)) + " rows of " + table +
            " with a time that is not a time were stored";
    sqlite3_finalize(s);
    if (!why.empty()) break;
  }
  sqlite3_close(db);
  return why;
}

void watchdog(const Target* t) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    int64_t started = g_input_started_ms.load();
    if (started && now_ms() - started > kHangSeconds * 1000) {
      // The input being imported is the one file under <scratch>/in (set before this thread).
      std::fprintf(stderr, "%s fuzz: FAILED: an input ran for over %d s (hang)\n  input: %s/in\n",
                   t->name, kHangSeconds, g_scratch.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
}

std::string mutate(std::string s, const std::vector<std::string>& seeds,
                   const std::vector<std::string>& tokens, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  int edits = 1 + static_cast<int>(pick(8));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t at = pick(s.size());
    switch (pick(8)) {
      case 0:
        s[at] = static_cast<char>(s[at] ^ (1 << pick(8)));
        break;  // bit flip
      case 1:
        s.erase(at, 1 + pick(16));
        break;  // delete
      case 2:   // dictionary token
        if (!tokens.empty()) s.insert(at, tokens[pick(tokens.size())]);
        break;
      case 3:  // replace a run with a token (a number by an extreme one, a value by NULL)
        if (!tokens.empty()) s.replace(at, 1 + pick(12), tokens[pick(tokens.size())]);
        break;
      case 4:
        s.resize(at);
        break;  // truncate
      case 5:
        s.insert(at, s.substr(pick(s.size()), pick(64)));
        break;   // splice from itself
      case 6: {  // splice another seed
        const std::string& o = seeds[pick(seeds.size())];
        if (!o.empty()) s.insert(at, o.substr(pick(o.size()), pick(256)));
        break;
      }
      default:
        s[at] = static_cast<char>(pick(256));
        break;  // random byte
    }
  }
  return s;
}

}  // namespace

std::string read_file(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::string out;
  char buf[65536];
  while (out.size() < limit && in.read(buf, sizeof buf).gcount() > 0)
    out.append(buf, static_cast<size_t>(in.gcount()));
  if (out.size() > limit) out.resize(limit);
  return out;
}

std::string gunzip_file(const std::string& path, size_t limit) {
  std::string out;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[65536];
  int n;
  while (out.size() < limit && (n = gzread(f, buf, sizeof buf)) > 0)
    out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  if (out.size() > limit) out.resize(limit);
  return out;
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

void run_one(const Target& t, const std::string& input) {
  std::string dir = scratch() + "/in";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string out = scratch() + "/out.braid";
  std::error_code ec;
  fs::remove(out, ec);
  std::string file = t.materialize(input, dir);
  if (file.empty()) return;
  g_input_started_ms = now_ms();
  bool committed = false;
  try {
    TraceWriter w(out, TraceWriter::Mode::Create);
    ImportOptions opts;
    ImportStats stats;
    import_traces(w, {file}, t.format, opts, stats);
    w.commit();
    committed = true;
  } catch (const Error&) {
    // Bad input: a clear error and nothing written, as it should be.
  } catch (const std::exception& e) {
    fail(t, input, std::string("an exception that is not a braid::Error: ") + e.what());
  }
  g_input_started_ms = 0;
  if (!committed && fs::exists(out)) fail(t, input, "a failed import left its output file");
  if (committed) {
    std::string why = bad_stored_time(out);
    if (!why.empty()) fail(t, input, why);
  }
}

int main(const Target& t, int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--replay") == 0) {
    for (int i = 2; i < argc; ++i) {
      run_one(t, read_file(argv[i]));
      std::printf("%s fuzz: %s ok\n", t.name, argv[i]);
    }
    fs::remove_all(scratch());
    return 0;
  }
  double seconds = argc > 1 ? std::atof(argv[1]) : 20.0;
  unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 12345u;
  long min_inputs = 0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--min-inputs") == 0) min_inputs = std::atol(argv[i + 1]);
  std::vector<std::string> seeds = t.seeds();
  if (seeds.empty()) {
    std::fprintf(stderr, "%s fuzz: no seeds found (is BRAID_TRACES_DIR right?)\n", t.name);
    return 2;
  }
  scratch();  // created before the watchdog reads its path
  std::thread(watchdog, &t).detach();
  std::mt19937 rng(seed);
  // Every seed once as it is, then mutants until the time is up (and the minimum is reached).
  auto start = std::chrono::steady_clock::now();
  auto deadline = start + std::chrono::duration<double>(seconds);
  long inputs = 0;
  for (const auto& s : seeds) {
    run_one(t, s);
    ++inputs;
  }
  while (std::chrono::steady_clock::now() < deadline || inputs < min_inputs) {
    run_one(t, mutate(seeds[rng() % seeds.size()], seeds, t.tokens, rng));
    ++inputs;
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fs::remove_all(scratch());
  std::printf(
      "%s fuzz: %ld inputs in %.1f s (seed %u, %zu seeds): 0 crashes, 0 hangs, 0 bad "
      "times\n",
      t.name, inputs, took, seed, seeds.size());
  return 0;
}

}  // namespace braid::fuzz
