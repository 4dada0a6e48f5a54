#include "capture/comm_book.h"

#include <cstdio>
#include <mutex>

namespace braid::capture {

std::string CommBook::identity_from_unique_ids(const void* bytes, size_t n) {
  uint64_t h = 1469598103934665603ull;
  auto* p = static_cast<const unsigned char*>(bytes);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "nccl:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

int64_t CommRecord::take_seq(bool p2p, int peer, bool send) const {
  if (!p2p) return next_seq.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lk(p2p_mu_);
  return p2p_next_[static_cast<int64_t>(peer) * 2 + (send ? 1 : 0)]++;
}

CommRecord* CommBook::add(const void* comm, std::string identity, std::string how, int rank,
                          int nranks, std::string parent) {
  auto rec = std::make_unique<CommRecord>();
  rec->identity = std::move(identity);
  rec->how = std::move(how);
  rec->rank = rank;
  rec->nranks = nranks;
  rec->parent = std::move(parent);
  std::unique_lock lk(mu_);
  CommRecord* r = rec.get();
  records_.push_back(std::move(rec));
  live_[comm] = r;
  return r;
}

std::string CommBook::child_identity(const void* parent, std::string_view how, int64_t color) {
  CommRecord* p = find_or_add_unknown(parent);
  int64_t n = p->children.fetch_add(1);
  return p->identity + "/" + std::string(how) + std::to_string(n) + "." + std::to_string(color);
}

CommRecord* CommBook::find(const void* comm) const {
  std::shared_lock lk(mu_);
  auto it = live_.find(comm);
  return it == live_.end() ? nullptr : it->second;
}

CommRecord* CommBook::find_or_add_unknown(const void* comm) {
  if (CommRecord* r = find(comm)) return r;
  char buf[48];
  std::snprintf(buf, sizeof buf, "nccl:unknown-%p", comm);
  std::unique_lock lk(mu_);
  auto it = live_.find(comm);
  if (it != live_.end()) return it->second;
  auto rec = std::make_unique<CommRecord>();
  rec->identity = buf;
  rec->how = "unknown";
  CommRecord* r = rec.get();
  records_.push_back(std::move(rec));
  live_[comm] = r;
  return r;
}

void CommBook::destroyed(const void* comm) {
  std::unique_lock lk(mu_);
  auto it = live_.find(comm);
  if (it == live_.end()) return;
  it->second->destroyed = true;
  live_.erase(it);
}

const CommRecord* CommBook::largest() const {
  std::shared_lock lk(mu_);
  const CommRecord* best = nullptr;
  for (auto& r : records_)
    if (!r->destroyed && r->rank >= 0 && (!best || r->nranks > best->nranks)) best = r.get();
  return best;
}

std::vector<const CommRecord*> CommBook::all() const {
  std::shared_lock lk(mu_);
  std::vector<const CommRecord*> out;
  for (auto& r : records_) out.push_back(r.get());
  return out;
}

}  // namespace braid::capture
