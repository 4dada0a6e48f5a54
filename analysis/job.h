// A job stored as one or several `.braid` files (one per rank or per node), loaded for the
// analyses by one process or spread over the processes of an Exchange (analysis/exchange.h):
// each process holds its files' ranks in full, and every rank's info, steps, collectives and
// their launch times (the keys and times matching and clock alignment need).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/exchange.h"
#include "analysis/run_data.h"
#include "trace/error.h"

namespace braid::analysis {

struct JobFile {
  std::string path;
  int64_t run = -1;
  int owner = 0;  // the process that loads it
  std::vector<int32_t> ranks;
};

struct Job {
  std::vector<JobFile> files;    // in the order given
  std::map<int32_t, int> owner;  // rank -> the process that holds it in full
  // Names by this job's own string ids (RunData::strings); the ranks this process holds are in
  // full, every other rank has its info, steps, collectives and their launches.
  RunData run;
  int here = 0;  // this process
  bool holds(int32_t rank) const;
};

// A failure to load the job that every process saw and throws alike.
class JobError : public Error {
 public:
  using Error::Error;
};

// Loads run `run` of each file (-1: the file's default_run), file i on process i % size. The
// same JobError on every process when any of them fails: a file that cannot be read, a run
// with no ranks, a rank in two files.
Job load_job(const std::vector<std::string>& paths, int64_t run, Exchange& ex);

// One process, one file already open: the job is `reader`'s run (names by the reader's ids).
Job single_file_job(const TraceReader& reader, int64_t run);

}  // namespace braid::analysis
