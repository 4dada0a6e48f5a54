// A job stored as one file per rank, analyzed by one process and spread over processes
// (analysis/job.h, analyze_files): the processes here are threads exchanging through a test
// double of the MPI exchange (each collective call waits for all, as MPI's), so the spread code
// runs under the sanitizers; the real `mpirun -np 4` run is in analysis_cli_test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <barrier>
#include <functional>
#include <mutex>
#include <thread>

#include "analysis/analyze.h"
#include "analysis/synthetic.h"
#include "trace/test_util.h"

namespace braid::analysis {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

// The processes of one job as threads: each call is collective (every thread makes it, in the
// same order); the bytes go through a shared table between two barriers.
class Threads {
 public:
  explicit Threads(int n) : n_(n), sync_(n), slots_(static_cast<size_t>(n)) {}

  class Member : public Exchange {
   public:
    Member(Threads& t, int i) : t_(t), i_(i) {}
    int size() const override { return t_.n_; }
    int index() const override { return i_; }
    std::vector<std::string> allgather(std::string bytes) override {
      t_.slots_[static_cast<size_t>(i_)] = std::move(bytes);
      t_.sync_.arrive_and_wait();
      std::vector<std::string> all = t_.slots_;
      t_.sync_.arrive_and_wait();
      return all;
    }
    std::string broadcast(std::string bytes, int root) override {
      if (i_ == root) t_.slots_[0] = std::move(bytes);
      t_.sync_.arrive_and_wait();
      std::string out = t_.slots_[0];
      t_.sync_.arrive_and_wait();
      return out;
    }

   private:
    Threads& t_;
    int i_;
  };

  // `body` on every process; what each returned or the error it threw.
  std::vector<std::string> run(const std::function<std::string(Exchange&)>& body) {
    std::vector<std::string> out(static_cast<size_t>(n_));
    std::vector<std::thread> threads;
    for (int i = 0; i < n_; ++i)
      threads.emplace_back([&, i] {
        Member m(*this, i);
        try {
          out[static_cast<size_t>(i)] = body(m);
        } catch (const JobError& e) {
          out[static_cast<size_t>(i)] = std::string("JobError: ") + e.what();
        }
      });
    for (std::thread& t : threads) t.join();
    return out;
  }

 private:
  int n_;
  std::barrier<> sync_;
  std::vector<std::string> slots_;
};

// A synthetic job (its planted straggler, skews and critical path) written one file per rank.
std::vector<std::string> per_rank_files(const TempDir& tmp, const SyntheticJob& job) {
  std::vector<std::string> files;
  for (int r = 0; r < job.nranks; ++r) {
    SyntheticJob one = job;
    one.only_ranks = {r};
    files.push_back(tmp.file("rank" + std::to_string(r) + ".braid"));
    write_synthetic_job(files.back(), one);
  }
  return files;
}

SyntheticJob skewed_job() {
  SyntheticJob job;
  job.nranks = 6;
  job.steps = 4;
  job.straggler = 4;
  job.clock_skew = {0, 12'345'678, -37'123, 250, 9'000, -4'000'000};
  job.end_jitter = 700;
  return job;
}

TEST(JobFiles, SpreadOverProcessesGivesWhatOneProcessGives) {
  TempDir tmp;
  const SyntheticJob job = skewed_job();
  const std::vector<std::string> files = per_rank_files(tmp, job);
  Exchange alone;
  const Analysis one = analyze_files(files, {}, alone);
  const std::string want = report_json(one);
  ASSERT_EQ(one.ranks.size(), 6u);
  ASSERT_EQ(one.paths.size(), 4u);
  for (const CriticalPath& p : one.paths) EXPECT_FALSE(p.chain.empty()) << "step " << p.step;
  EXPECT_THAT(want, HasSubstr("\"late_rank\":4"));  // the planted straggler
  // The same job in one file, analyzed as before: the same numbers (only the name differs).
  const std::string whole = tmp.file("job.braid");
  write_synthetic_job(whole, job);
  {
    TraceReader reader(whole);
    Analysis a = analyze(reader);
    a.path = one.path;
    a.files = one.files;
    EXPECT_EQ(report_json(a), want);
  }
  for (int n : {2, 3, 4, 7}) {
    Threads procs(n);
    std::vector<std::string> got = procs.run([&](Exchange& ex) {
      Analysis a = analyze_files(files, {}, ex);
      for (const JobFile& f : a.files)
        EXPECT_EQ(f.owner, static_cast<int>(&f - a.files.data()) % n) << f.path;
      return report_json(a) + report_text(a);
    });
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(got[static_cast<size_t>(i)], want + report_text(one))
          << n << " processes, process " << i;
  }
  // One step only, spread: the same as one process.
  AnalyzeOptions step2;
  step2.step = 2;
  const std::string want2 = report_json(analyze_files(files, step2, alone));
  Threads three(3);
  for (const std::string& got :
       three.run([&](Exchange& ex) { return report_json(analyze_files(files, step2, ex)); }))
    EXPECT_EQ(got, want2);
}

TEST(JobFiles, EveryProcessFailsAlikeNamingTheFile) {
  TempDir tmp;
  SyntheticJob job;
  std::vector<std::string> files = per_rank_files(tmp, job);
  Threads procs(3);
  // A missing file, loaded by process 1 only: every process throws its error.
  std::vector<std::string> missing = files;
  missing[1] = tmp.file("gone.braid");
  for (const std::string& got :
       procs.run([&](Exchange& ex) { return report_json(analyze_files(missing, {}, ex)); }))
    EXPECT_THAT(got, AllOf(HasSubstr("JobError: "), HasSubstr("gone.braid")));
  // A rank in two files.
  std::vector<std::string> twice = files;
  twice.push_back(tmp.file("again.braid"));
  SyntheticJob again = job;
  again.only_ranks = {2};
  write_synthetic_job(twice.back(), again);
  for (const std::string& got :
       procs.run([&](Exchange& ex) { return report_json(analyze_files(twice, {}, ex)); }))
    EXPECT_THAT(got, AllOf(HasSubstr("again.braid: rank 2 is also in"), HasSubstr("rank2.braid")));
  // The same file twice.
  std::vector<std::string> same = files;
  same.push_back(files[0]);
  for (const std::string& got :
       procs.run([&](Exchange& ex) { return report_json(analyze_files(same, {}, ex)); }))
    EXPECT_THAT(got, HasSubstr("rank0.braid is given twice"));
  // A step no file has: a usage error on every process.
  AnalyzeOptions nine;
  nine.step = 9;
  for (const std::string& got :
       procs.run([&](Exchange& ex) { return report_json(analyze_files(files, nine, ex)); }))
    EXPECT_THAT(got, HasSubstr("has no step 9 (steps: 0, 1, 2)"));
}

}  // namespace
}  // namespace braid::analysis
