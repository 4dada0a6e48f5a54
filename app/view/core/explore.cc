#include "app/view/core/explore.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "fusion/schedule_store.h"
#include "replay/fuse.h"
#include "replay/sim.h"
#include "replay/store_run.h"
#include "trace/error.h"

namespace braid::view {

const char* to_string(ExploreFinding::Status s) {
  switch (s) {
    case ExploreFinding::Status::Applied:
      return "applied";
    case ExploreFinding::Status::Advice:
      return "advice";
    case ExploreFinding::Status::Skipped:
      return "skipped";
    case ExploreFinding::Status::Deselected:
      return "deselected";
  }
  return "?";
}

int64_t default_root_schedule(const std::string& path) {
  int64_t id = -1;
  for (const auto& st : fusion::list_schedules(path))
    if (st.parent_id < 0 && st.id > id) id = st.id;
  return id;
}

ExploreResult explore(const ExploreRequest& req, const std::string& scratch,
                      const std::atomic<bool>* cancel, std::atomic<double>* progress) {
  const auto t0 = std::chrono::steady_clock::now();
  ExploreResult r;
  r.schedule_id = req.schedule_id >= 0 ? req.schedule_id : default_root_schedule(req.path);
  if (r.schedule_id < 0)
    throw Error(ErrorCode::NotFound,
                req.path + " holds no schedule (lift its run first: `braid lift`)");
  const fusion::Schedule base = fusion::load_stored_schedule(req.path, r.schedule_id);
  const replay::SimProfile sp = replay::load_sim_profile(req.profile);
  r.profile = sp.profile.name;

  // `braid fuse --profile P` with the choice.
  fusion::PipelineOptions opt;
  opt.skip = req.skip;
  opt.force = req.force;
  opt.assume = req.assume;
  opt.cancel = cancel;
  opt.progress = [progress](size_t i, size_t n) {
    if (progress) *progress = 0.85 * static_cast<double>(i) / static_cast<double>(n ? n : 1);
  };
  r.pipeline = replay::fuse_simulated(base, sp, opt);
  if (cancel && cancel->load()) throw Error(ErrorCode::Usage, "cancelled");

  // One simulated step of each, as `braid replay --backend sim --profile P` runs and stores it.
  replay::SimExecutor ex(analysis::CostModel(sp.profile), sp.sim_options());
  auto one_step = [&](const fusion::Schedule& s) {
    auto prep = ex.prepare(s, replay::ReplayOptions{});
    prep->run_step(true);
    return prep->collect();
  };
  const replay::ReplayResult rb = one_step(base);
  const replay::ReplayResult rf = one_step(r.pipeline.schedule);
  if (progress) *progress = 0.9;

  const int64_t b = fusion::store_schedule(scratch, base, -1, "[]", true);
  const int64_t f = fusion::store_fused(scratch, b, base, r.pipeline, r.profile);
  const std::string what = " (schedule " + std::to_string(r.schedule_id) + " of " + req.path +
                           ") simulated on " + r.profile;
  auto ids = replay::store_runs(scratch, {&base, &r.pipeline.schedule}, {&rb, &rf},
                                {replay::RunDescription{req.path, "explorer: baseline" + what, b},
                                 replay::RunDescription{req.path, "explorer: fused" + what, f}});
  r.scratch = scratch;
  r.baseline_run = ids[0];
  r.fused_run = ids[1];

  auto listed = [](const fusion::Finding& x, ExploreFinding::Status status) {
    ExploreFinding e;
    e.key = fusion::key_of(x);
    e.status = status;
    e.ranks = x.ranks;
    e.local_saving_ns = x.saving_ns;
    e.summary = x.summary;
    e.assumption = x.assumption;
    e.legal = x.legal;
    e.assumed = x.assumed;
    e.can_assume = x.can_assume;
    e.ticked = status == ExploreFinding::Status::Applied;
    return e;
  };
  for (const fusion::Finding& x : r.pipeline.applied)
    r.findings.push_back(listed(x, ExploreFinding::Status::Applied));
  for (const fusion::Finding& x : r.pipeline.advice)
    r.findings.push_back(listed(x, req.skip.count(fusion::key_of(x))
                                       ? ExploreFinding::Status::Deselected
                                   : x.legal ? ExploreFinding::Status::Skipped
                                             : ExploreFinding::Status::Advice));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) *progress = 1.0;
  return r;
}

Explorer::Explorer() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/braid-view-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data())) dir_ = buf.data();
}

Explorer::~Explorer() {
  if (job_) job_->cancel = true;
  for (auto& j : retired_) j->cancel = true;
  if (job_ && job_->thread.joinable()) job_->thread.join();
  for (auto& j : retired_)
    if (j->thread.joinable()) j->thread.join();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

void Explorer::start(ExploreRequest req) {
  if (dir_.empty()) {
    error_ = "cannot create a scratch directory for the explorer (TMPDIR)";
    return;
  }
  cancel();
  request_ = std::move(req);
  auto job = std::make_unique<Job>();
  Job* j = job.get();
  const std::string scratch = dir_ + "/explore-" + std::to_string(++counter_) + ".braid";
  j->thread = std::thread([j, req = request_, scratch] {
    try {
      ExploreResult r = explore(req, scratch, &j->cancel, &j->progress);
      std::lock_guard<std::mutex> lock(j->mu);
      j->result = std::move(r);
    } catch (const std::exception& e) {
      std::error_code ec;
      std::filesystem::remove(scratch, ec);
      std::lock_guard<std::mutex> lock(j->mu);
      j->error = e.what();
    }
    j->finished = true;
  });
  job_ = std::move(job);
}

void Explorer::choose(const std::vector<ExploreFinding>& findings) {
  ExploreRequest req = request_;
  req.assume.clear();
  for (const ExploreFinding& f : findings) {
    req.skip.erase(f.key);
    req.force.erase(f.key);
    const bool was_applied = f.status == ExploreFinding::Status::Applied;
    const bool advice = !f.legal;
    if (f.ticked && f.can_tick()) {
      // Applied by the pipeline itself unless it was forced in, is advice, or is not worth it on
      // its own.
      if (!was_applied || advice || request_.force.count(f.key)) req.force.insert(f.key);
      if (f.status == ExploreFinding::Status::Deselected && !advice) req.force.erase(f.key);
      if (advice && std::find(req.assume.begin(), req.assume.end(), f.key.pass) == req.assume.end())
        req.assume.push_back(f.key.pass);
    } else if (!f.ticked) {
      if (was_applied || f.status == ExploreFinding::Status::Deselected) req.skip.insert(f.key);
    }
  }
  // Under `assume`, a pass's advice with a positive saving would all be applied: only the ticked.
  for (const ExploreFinding& f : findings)
    if (!f.ticked && !f.legal &&
        std::find(req.assume.begin(), req.assume.end(), f.key.pass) != req.assume.end())
      req.skip.insert(f.key);
  start(std::move(req));
}

void Explorer::cancel() {
  if (!job_) return;
  job_->cancel = true;
  retired_.push_back(std::move(job_));
}

bool Explorer::busy() const { return job_ != nullptr; }

double Explorer::fraction() const { return job_ ? job_->progress.load() : 1.0; }

void Explorer::reap() {
  for (size_t i = 0; i < retired_.size();) {
    if (retired_[i]->finished) {
      retired_[i]->thread.join();
      if (retired_[i]->result) {
        std::error_code ec;
        std::filesystem::remove(retired_[i]->result->scratch, ec);
      }
      retired_.erase(retired_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

bool Explorer::poll() {
  reap();
  if (!job_ || !job_->finished) return false;
  job_->thread.join();
  std::unique_ptr<Job> j = std::move(job_);
  std::lock_guard<std::mutex> lock(j->mu);
  if (j->result) {
    // The scratch file shown before the last one is no longer read by anything.
    if (!shown_scratch_.empty()) {
      std::error_code ec;
      std::filesystem::remove(shown_scratch_, ec);
    }
    shown_scratch_ = result_ ? result_->scratch : "";
    result_ = std::move(j->result);
    error_.clear();
  } else {
    error_ = j->error;
  }
  ++generation_;
  return true;
}

void Explorer::wait() {
  while (job_ || !retired_.empty()) {
    poll();
    if (job_ || !retired_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

namespace {

// `braid fuse`'s store of a result; a cancel before the store leaves the file as it was.
int64_t store_result(const std::string& path, const ExploreResult& r,
                     const std::atomic<bool>* cancel, std::atomic<double>* progress) {
  auto stop_if_cancelled = [&] {
    if (cancel && cancel->load())
      throw Error(ErrorCode::Usage, path + ": save cancelled (nothing stored)");
  };
  stop_if_cancelled();
  if (progress) *progress = 0.1;
  const fusion::Schedule base = fusion::load_stored_schedule(path, r.schedule_id);
  if (progress) *progress = 0.5;
  stop_if_cancelled();
  fusion::PipelineResult res = r.pipeline;
  const int64_t id = fusion::store_fused(path, r.schedule_id, base, res, r.profile, cancel);
  if (progress) *progress = 1.0;
  return id;
}

}  // namespace

int64_t Explorer::save(const std::atomic<bool>* cancel, std::atomic<double>* progress) const {
  if (!result_) throw Error(ErrorCode::Usage, "nothing to save yet: the explorer has no result");
  return store_result(request_.path, *result_, cancel, progress);
}

FileTask::Fn Explorer::save_task() const {
  if (!result_)
    return [](const std::atomic<bool>&, std::atomic<double>&) -> FileTask::Outcome {
      throw Error(ErrorCode::Usage, "nothing to save yet: the explorer has no result");
    };
  auto r = std::make_shared<const ExploreResult>(*result_);
  return [r, path = request_.path](const std::atomic<bool>& cancel, std::atomic<double>& progress) {
    const int64_t id = store_result(path, *r, &cancel, &progress);
    return FileTask::Outcome{"saved as schedule " + std::to_string(id) + " (parent " +
                                 std::to_string(r->schedule_id) + ") in " + path,
                             id};
  };
}

FileTask::~FileTask() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

bool FileTask::start(std::string what, Fn fn) {
  if (busy()) return false;
  if (thread_.joinable()) thread_.join();
  what_ = std::move(what);
  error_.clear();
  out_ = Outcome{};
  out_error_.clear();
  cancelled_ = false;
  cancel_ = false;
  finished_ = false;
  progress_ = 0;
  taken_ = false;
  thread_ = std::thread([this, fn = std::move(fn)] {
    try {
      out_ = fn(cancel_, progress_);
    } catch (const std::exception& e) {
      out_error_ = e.what();
      if (out_error_.empty()) out_error_ = what_ + " failed";
    }
    finished_ = true;
  });
  return true;
}

bool FileTask::poll() {
  if (taken_ || !finished_) return false;
  thread_.join();
  taken_ = true;
  error_ = std::move(out_error_);
  cancelled_ = !error_.empty() && cancel_.load();
  ++generation_;
  return true;
}

void FileTask::wait() {
  while (!taken_ && !poll()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

}  // namespace braid::view
