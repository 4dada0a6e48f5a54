#include "analysis/parallelism.h"

#include <algorithm>
#include <cctype>

#include "analysis/metrics.h"

namespace braid::analysis {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A dimension named by a token of the text ("tp_group_0", "data_parallel", "pp-stage").
std::string named_dim(const std::string& text) {
  std::string t = lower(text);
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : t) {
    if (std::isalnum(static_cast<unsigned char>(c))) cur += c;
    else if (!cur.empty()) tokens.push_back(cur), cur.clear();
  }
  if (!cur.empty()) tokens.push_back(cur);
  for (const std::string& w : tokens) {
    if (w == "tp" || w == "tensor" || w == "mp" || w == "model") return "TP";
    if (w == "sp" || w == "sequence" || w == "cp" || w == "context") return "SP";
    if (w == "ep" || w == "expert" || w == "experts" || w == "moe") return "EP";
    if (w == "pp" || w == "pipeline" || w == "stage") return "PP";
    if (w == "dp" || w == "data" || w == "fsdp" || w == "ddp" || w == "zero") return "DP";
  }
  return "";
}

std::vector<int32_t> parse_ranks(const std::string& s) {
  std::vector<int32_t> out;
  std::string num;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c))) num += c;
    else if (!num.empty()) out.push_back(std::stoi(num)), num.clear();
  }
  if (!num.empty()) out.push_back(std::stoi(num));
  return out;
}

}  // namespace

std::vector<CommLabel> infer_parallelism(const RunData& run, const MatchResult& match,
                                         int gpus_per_node) {
  std::map<std::string, CommLabel> by;
  for (const auto& [r, t] : run.ranks)
    for (const Collective& c : t.collectives) {
      CommLabel& l = by[run.str(c.comm)];
      l.comm = run.str(c.comm);
      ++l.op_counts[c.op];
      if (c.bytes > 0) l.bytes += c.bytes;
    }
  int32_t world = 0;
  for (const auto& [r, t] : run.ranks) world = std::max(world, t.info.world_size);
  std::vector<CommLabel> out;
  for (auto& [comm, l] : by) {
    std::string desc;
    for (const Communicator& c : run.comms)
      if (c.comm == comm) {
        desc = c.label;
        l.members = parse_ranks(c.ranks);
        if (c.nranks > 0) l.nranks = c.nranks;
      }
    const bool members_known = !l.members.empty();
    if (l.members.empty()) l.members = comm_members(run, comm);
    if (l.nranks <= 0) {
      for (const CollGroup& g : match.groups)
        if (g.comm == comm && g.method != MatchMethod::PointToPoint) {
          l.nranks = group_nranks(run, g);
          break;
        }
      if (l.nranks <= 0) l.nranks = static_cast<int32_t>(l.members.size());
    }
    int64_t total = 0, p2p = 0;
    for (auto& [op, n] : l.op_counts) {
      total += n;
      if (op == CollOp::Send || op == CollOp::Recv || op == CollOp::SendRecv) p2p += n;
    }
    auto count = [&](CollOp op) {
      auto it = l.op_counts.find(op);
      return it == l.op_counts.end() ? int64_t{0} : it->second;
    };
    std::string mix;
    for (auto& [op, n] : l.op_counts)
      mix += (mix.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(to_string(op));
    int64_t a2a = count(CollOp::AllToAll), ar = count(CollOp::AllReduce),
            ag = count(CollOp::AllGather), rs = count(CollOp::ReduceScatter);
    bool consecutive = l.members.size() >= 2;
    for (size_t i = 1; i < l.members.size(); ++i)
      consecutive = consecutive && l.members[i] == l.members[i - 1] + 1;
    bool one_node = consecutive && gpus_per_node > 0 &&
                    l.members.front() / gpus_per_node == l.members.back() / gpus_per_node;
    bool whole_world = world > 0 && l.nranks == world;
    std::string members_text = l.members.empty() ? "members unknown" : [&] {
      std::string s = "members [";
      for (size_t i = 0; i < l.members.size() && i < 16; ++i)
        s += (i ? "," : "") + std::to_string(l.members[i]);
      return s + (l.members.size() > 16 ? ",...]" : "]");
    }();

    if (std::string d = named_dim(comm + " " + desc); !d.empty()) {
      l.dim = d;
      l.evidence = "named '" + (desc.empty() ? comm : comm + "' / '" + desc) + "'; " + mix;
    } else if (total > 0 && p2p == total) {
      l.dim = "PP";
      l.evidence = "point-to-point only (" + mix + ")";
    } else if (a2a > 0 && a2a * 2 >= total) {
      l.dim = "EP";
      l.evidence = "all-to-all dominates (" + mix + ")";
    } else if (!members_known && !whole_world) {
      l.dim = "unknown";
      l.evidence = "the trace records neither the member ranks nor a name (" +
                   std::to_string(l.members.size()) + " ranks of the run use it; " + mix + ")";
    } else if (one_node && !whole_world) {
      l.dim = ag > 0 && rs > 0 && ag + rs > ar ? "SP" : "TP";
      l.evidence = "consecutive ranks within one node (" + members_text + "), " +
                   (l.dim == "SP" ? "all-gather + reduce-scatter pairs" : "intra-layer collectives") +
                   " (" + mix + ")";
    } else if ((ar > 0 || rs > 0 || ag > 0) && (whole_world || !consecutive)) {
      l.dim = "DP";
      l.evidence = std::string(whole_world ? "spans the whole world" : "strided ranks") + " (" +
                   members_text + "), gradient-style collectives (" + mix + ")";
    } else {
      l.dim = "unknown";
      l.evidence = "no rule applies (" + members_text + ", " + std::to_string(l.nranks) +
                   " ranks; " + mix + ")";
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace braid::analysis
