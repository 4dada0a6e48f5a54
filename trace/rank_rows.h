// One rank's rows of an event table, read whole (TraceReader's per-rank reads: braid-view's
// loader and the streamed analysis hold one rank at a time). Internal to trace/reader.cc.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trace/sqlite_util.h"

namespace braid::per_rank {

// An event table as read back: its columns (what its *_of() converter reads; the rank first),
// the order of a whole run's rows, and its window index's order (run_id, then these).
struct Rows {
  const char* table;
  const char* cols;
  const char* order;
  const char* index;
};
// A rank's rows, read in the table's order around the rank's first row in the index, backwards
// then forwards, each direction until kGap rows of other ranks (or runs) in a row; kept when that
// found all of them, ordered as the index orders them: by lane (stream or thread, the second
// column of `t.index`), then start, equal keys in storage order. `lanes`: each lane's rows, by
// lane (from the index).
//
// Through the index every row is a seek into the table: reading a million rows so takes 0.6-0.8 s
// on this project's 2-core VM against 0.4 s in the table's order. A file written a rank at a time
// (an import of per-rank traces, the benchmark's generator) holds a rank's rows together, in
// time order across its streams: each row goes straight to its lane's place in the one vector
// returned (no second copy grouped by lane). Ranks interleaved (a live capture's batches) end the
// scan within kGap rows: std::nullopt, read by the index.
template <typename T, typename Conv, typename Lane>
std::optional<std::vector<T>> rows_together(sqlite3* db, const Rows& t, int64_t run, int32_t rank,
                                            const std::vector<std::pair<int64_t, size_t>>& lanes,
                                            size_t n, Conv conv, Lane lane) {
  constexpr int kGap = 256;
  sql::Stmt first(db, std::string("SELECT rowid FROM ") + t.table +
                          " WHERE run_id=? AND rank=? ORDER BY " + t.index + " LIMIT 1");
  first.bind(1, run);
  first.bind(2, rank);
  if (!first.step()) return std::nullopt;
  const int64_t at = first.i64(0);
  // Where each lane's rows go: [begin, end) of the result; `back` fills from the front of a
  // lane's place downwards (the rows before `at`, met by descending rowid), `next` upwards.
  const size_t nl = lanes.size();
  std::vector<size_t> begin(nl), end(nl), back(nl), next(nl);
  for (size_t i = 0, at_row = 0; i < nl; ++i) {
    begin[i] = at_row;
    end[i] = at_row += lanes[i].second;
  }
  size_t last = 0;  // rows come in runs of one lane
  auto lane_of = [&](int64_t l) -> std::optional<size_t> {
    if (lanes[last].first == l) return last;
    auto it = std::lower_bound(lanes.begin(), lanes.end(), std::make_pair(l, size_t{0}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it == lanes.end() || it->first != l) return std::nullopt;
    return last = static_cast<size_t>(it - lanes.begin());
  };
  // Backwards first (only where the rank's first row in the index is not its first in the table:
  // few rows), to know where the forward rows of each lane start.
  std::vector<T> before;
  std::vector<size_t> before_in(nl, 0);
  std::vector<T> rows;
  size_t found = 0;
  for (bool forward : {false, true}) {
    sql::Stmt s(db, std::string("SELECT ") + t.cols + ", run_id FROM " + t.table +
                        (forward ? " WHERE rowid>=? ORDER BY rowid"
                                 : " WHERE rowid<? ORDER BY rowid DESC"));
    s.bind(1, at);
    const int run_col = sqlite3_column_count(s.get()) - 1;  // the rank is column 0
    if (forward) {
      rows.resize(n);
      for (size_t i = 0; i < nl; ++i) back[i] = next[i] = begin[i] + before_in[i];
      for (const T& x : before) {  // by descending rowid: each lane's from its place down
        const size_t i = *lane_of(lane(x));
        rows[--back[i]] = x;
      }
      std::vector<T>().swap(before);
    }
    for (int gap = 0; found < n && gap <= kGap && s.step();) {
      if (s.i64(0) != rank || s.i64(run_col) != run) {
        ++gap;
        continue;
      }
      gap = 0;
      T x = conv(s);
      const std::optional<size_t> i = lane_of(lane(x));
      if (!i) return std::nullopt;  // written since the lanes were counted
      if (forward) {
        if (next[*i] == end[*i]) return std::nullopt;
        rows[next[*i]++] = std::move(x);
      } else {
        if (++before_in[*i] > lanes[*i].second) return std::nullopt;
        before.push_back(std::move(x));
      }
      ++found;
    }
  }
  if (found != n) return std::nullopt;
  // A lane out of start order is sorted (stably: ties stay in storage order).
  auto by_start = [](const T& a, const T& b) { return a.start < b.start; };
  for (size_t i = 0; i < nl; ++i)
    if (!std::is_sorted(rows.begin() + begin[i], rows.begin() + end[i], by_start))
      std::stable_sort(rows.begin() + begin[i], rows.begin() + end[i], by_start);
  return rows;
}

// One rank's rows of `t` (and of `filter`, SQL, if given), in its index's order: the whole run's
// but for collectives. Without a filter, the vector is reserved from each lane's count (the index
// alone answers it, a tenth of the read): no growth's copies of a rank's million rows; and a
// rank's rows that lie together in the table are read in its order (rows_together).
template <typename T, typename Conv, typename Lane>
std::vector<T> rank_rows(sqlite3* db, const Rows& t, int64_t run, int32_t rank, Conv conv,
                         Lane lane, int64_t& table_order_rows, const char* filter = nullptr) {
  const std::string where = std::string(" FROM ") + t.table + " WHERE run_id=? AND rank=?" +
                            (filter ? std::string(" AND ") + filter : std::string());
  auto query = [&](const std::string& q) {
    sql::Stmt s(db, q);
    s.bind(1, run);
    s.bind(2, rank);
    return s;
  };
  std::vector<T> out;
  if (!filter) {
    // The lane: the index's second column (after the rank).
    const std::string index = t.index;
    const size_t a = index.find(", ") + 2, b = index.find(',', a);
    const std::string col = index.substr(a, b - a);
    // Each lane by a seek of the index past the one before, then counted (a plain count of an
    // index range: GROUP BY took twice as long).
    std::vector<std::pair<int64_t, size_t>> lanes;
    size_t n = 0;
    sql::Stmt lane_after =
        query("SELECT " + col + where + " AND " + col + ">? ORDER BY " + col + " LIMIT 1");
    sql::Stmt count = query("SELECT COUNT(*)" + where + " AND " + col + "=?");
    for (int64_t after = INT64_MIN;;) {
      lane_after.reset();
      lane_after.bind(1, run);
      lane_after.bind(2, rank);
      lane_after.bind(3, after);
      if (!lane_after.step()) break;
      after = lane_after.i64(0);
      count.reset();
      count.bind(1, run);
      count.bind(2, rank);
      count.bind(3, after);
      const auto c = static_cast<size_t>(count.step() ? count.i64(0) : 0);
      lanes.emplace_back(after, c);
      n += c;
    }
    if (n == 0) return out;
    if (auto rows = rows_together<T>(db, t, run, rank, lanes, n, conv, lane)) {
      table_order_rows += static_cast<int64_t>(n);
      return std::move(*rows);
    }
    out.reserve(n);
  }
  sql::Stmt s = query(std::string("SELECT ") + t.cols + where + " ORDER BY " + t.index);
  while (s.step()) out.push_back(conv(s));
  return out;
}

}  // namespace braid::per_rank
