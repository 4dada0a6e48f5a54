// braid synth: the per-rank schedule of one training step from a model shape and a parallel
// layout (docs/synth.md), stored in a .braid file and/or written as schedule JSON.
#include <algorithm>
#include <cstdio>
#include <map>

#include "analysis/cost_model.h"
#include "analysis/hardware.h"
#include "app/braid/cli.h"
#include "fusion/ir.h"
#include "fusion/schedule_store.h"
#include "fusion/symmetry.h"
#include "fusion/synth.h"
#include "trace/error.h"

namespace braid::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string summary(const fusion::Schedule& s, const analysis::CostModel& cost) {
  struct Totals {
    int64_t ops = 0, bytes = 0;
  };
  std::map<std::string, Totals> by_op;
  int64_t computes = 0;
  // The busiest rank: compute plus the collectives that block its compute stream, each timed
  // by the cost model. Cross-rank waiting (pipeline bubbles) is not included.
  double busiest = 0, busiest_compute = 0, busiest_blocking = 0;
  int32_t busiest_rank = 0;
  // With rank classes every stored rank stands for its class (orbit ranks alike).
  const int64_t orbit = s.symmetry.orbit();
  for (const fusion::RankSchedule& r : s.ranks) {
    double comp = 0, blocking = 0;
    for (size_t si = 0; si < r.streams.size(); ++si) {
      for (const fusion::Op& op : r.streams[si].ops) {
        if (const fusion::Compute* c = op.compute()) {
          computes += orbit;
          if (si == 0) comp += double(c->duration_ns);
        } else if (const fusion::Collective* c = op.collective()) {
          int64_t bytes = fusion::collective_bytes(s, *c);
          Totals& t = by_op[std::string(to_string(c->op))];
          t.ops += orbit;
          t.bytes += bytes * orbit;
          if (si == 0) {
            const fusion::Comm* comm = s.find_comm(c->comm);
            std::vector<int32_t> members = comm ? comm->ranks : std::vector<int32_t>{};
            blocking += double(cost.collective_ns(c->op, bytes, int(members.size()), c->comm, members));
          }
        }
      }
    }
    if (comp + blocking > busiest) {
      busiest = comp + blocking;
      busiest_compute = comp;
      busiest_blocking = blocking;
      busiest_rank = r.rank;
    }
  }
  std::string out = std::to_string(s.ranks.size()) + " ranks";
  if (s.symmetry.on())
    out += " in " + std::to_string(fusion::rank_classes(s)) + " rank classes of " +
           std::to_string(s.symmetry.orbit()) + " (DP replicas; one rank of each stored)";
  out += ", " + std::to_string(fusion::expanded_op_count(s)) + " ops (" + std::to_string(computes) +
         " compute); collectives (ops over all "
         "ranks, message bytes):";
  bool first = true;
  for (const auto& [op, t] : by_op) {
    out += std::string(first ? " " : ", ") + op + " " + std::to_string(t.ops) + " (" +
           human_bytes(double(t.bytes)) + ")";
    first = false;
  }
  if (by_op.empty()) out += " none";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ". Busiest rank %d: %.3f ms compute + %.3f ms blocking collectives = %.3f ms per "
                "step (profile %s, without pipeline bubbles or DP overlap).",
                busiest_rank, busiest_compute / 1e6, busiest_blocking / 1e6, busiest / 1e6,
                cost.profile().name.c_str());
  return out + buf;
}

// braid synth's flags.
struct SynthOpts {
  std::string preset, profile = "h100-nvlink", out, json;
  bool list = false, quiet = false;
  bool sp = false, sp_allreduce = false, no_sp = false, pp_send_full = false;
  bool pp_moe_cut = false, no_pp_moe_cut = false;
  bool no_recompute = false;
  bool every_rank = false;
  int tp = 0, pp = 0, ep = 0, dp = 0, zero = -1, world = 0;
  int64_t bucket = 0;
  int64_t layers = 0, hidden = 0, seq = 0, micro_batch = 0, micro_batches = 0, heads = 0, ffn = -1,
          experts = -1, top_k = 0;
  std::string dtype;
};

// --list-presets: each preset's layout, model and what it shows.
int list_presets() {
  for (const std::string& nm : fusion::preset_names()) {
    fusion::Preset p = fusion::preset(nm);
    const auto& l = p.layout;
    const auto& m = p.model;
    std::printf(
        "%-6s tp=%d pp=%d ep=%d dp=%d sp=%s zero=%d  layers=%lld hidden=%lld "
        "seq=%lld mb=%lldx%lld experts=%lld top-k=%lld  %s\n",
        nm.c_str(), l.tp, l.pp, l.ep, l.dp, std::string(to_string(l.sp)).c_str(), l.zero,
        (long long)m.layers, (long long)m.hidden, (long long)m.seq, (long long)m.micro_batch,
        (long long)m.micro_batches, (long long)m.experts, (long long)m.top_k,
        p.description.c_str());
  }
  return 0;
}

// The preset's model and layout (if any), then each flag given over it.
void apply_flags(const SynthOpts& o, fusion::ModelShape& m, fusion::ParallelLayout& l) {
  if (!o.preset.empty()) {
    fusion::Preset p = fusion::preset(o.preset);
    m = p.model;
    l = p.layout;
    // EP-only presets keep one expert group: raising ep raises dp with it.
    if (o.ep > 0 && o.dp == 0 && l.dp == l.ep) l.dp = o.ep;
  }
  if (o.tp > 0) l.tp = o.tp;
  if (o.pp > 0) l.pp = o.pp;
  if (o.ep > 0) l.ep = o.ep;
  if (o.dp > 0) l.dp = o.dp;
  if (o.tp < 0 || o.pp < 0 || o.ep < 0 || o.dp < 0)
    throw Error(ErrorCode::Usage, "--tp, --pp, --ep and --dp must be at least 1");
  if (int(o.sp) + int(o.sp_allreduce) + int(o.no_sp) > 1)
    throw Error(ErrorCode::Usage, "give at most one of --sp, --sp-allreduce, --no-sp");
  if (o.sp) l.sp = fusion::SpMode::ReduceScatter;
  if (o.sp_allreduce) l.sp = fusion::SpMode::AllReduce;
  if (o.no_sp) {
    l.sp = fusion::SpMode::None;
    l.pp_send_full = false;
  }
  if (o.pp_send_full) l.pp_send_full = true;
  if (o.pp_moe_cut && o.no_pp_moe_cut)
    throw Error(ErrorCode::Usage, "give at most one of --pp-moe-cut, --no-pp-moe-cut");
  if (o.pp_moe_cut) l.pp_moe_cut = true;
  if (o.no_pp_moe_cut) l.pp_moe_cut = false;
  if (o.no_recompute) l.sp_recompute_allgather = false;
  if (o.zero >= 0) l.zero = o.zero;
  if (o.bucket != 0) l.bucket_elems = o.bucket;
  if (o.layers) m.layers = o.layers;
  if (o.hidden) m.hidden = o.hidden;
  if (o.seq) m.seq = o.seq;
  if (o.micro_batch) m.micro_batch = o.micro_batch;
  if (o.micro_batches) m.micro_batches = o.micro_batches;
  if (o.heads) m.heads = o.heads;
  if (o.ffn >= 0) m.ffn = o.ffn;
  if (o.experts >= 0) m.experts = o.experts;
  if (o.top_k) m.top_k = o.top_k;
  if (!o.dtype.empty()) m.dtype = o.dtype;
  if (o.world > 0 && o.world != l.world())
    throw Error(ErrorCode::Usage, "world size " + std::to_string(o.world) +
                                      " does not match tp x pp x dp = " + std::to_string(l.tp) +
                                      " x " + std::to_string(l.pp) + " x " + std::to_string(l.dp) +
                                      " = " + std::to_string(l.world()));
}

int run_synth(const SynthOpts& o) {
  if (o.list) return list_presets();
  fusion::ModelShape m;
  fusion::ParallelLayout l;
  apply_flags(o, m, l);
  fusion::check_layout(m, l);
  analysis::CostModel cost(analysis::load_profile(o.profile));
  fusion::Schedule s =
      o.every_rank ? fusion::synthesize(m, l, cost) : fusion::synthesize_classes(m, l, cost);
  if (!o.preset.empty()) s.name = o.preset + ": " + s.name;
  if (!o.json.empty()) {
    if (o.json == "-") {
      std::string text = fusion::to_json(s);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      fusion::save_schedule(s, o.json);
    }
  }
  bool to_stdout = o.json == "-";
  if (!o.out.empty()) {
    int64_t id = fusion::store_schedule(o.out, s, -1, "[]", /*create=*/true);
    if (o.quiet)
      std::fprintf(to_stdout ? stderr : stdout, "%lld\n", static_cast<long long>(id));
    else
      std::fprintf(to_stdout ? stderr : stdout, "schedule %lld in %s: %s\n%s\n",
                   static_cast<long long>(id), o.out.c_str(), s.name.c_str(),
                   summary(s, cost).c_str());
  } else if (!o.quiet) {
    std::fprintf(to_stdout ? stderr : stdout, "%s\n%s\n", s.name.c_str(), summary(s, cost).c_str());
  }
  return 0;
}

}  // namespace

void register_synth(CLI::App& app, Action& run) {
  auto o = std::make_shared<SynthOpts>();
  auto* cmd = app.add_subcommand(
      "synth",
      "Synthesize the per-rank schedule of one training step of a transformer (Megatron-style\n"
      "TP/SP, PP 1F1B, EP, DP buckets or ZeRO) from a preset or a layout and model shape, with\n"
      "compute durations from the cost model's roofline. -o stores it in a .braid file (appends;\n"
      "creates the file if missing) and prints its schedule id and a summary. docs/synth.md.");
  cmd->add_option("--preset", o->preset,
                  "tp-sp, tp-ep, tp-pp, pp-ep, pp-sp, sp-ep (Chimera cases), dense, moe; "
                  "flags below override its values");
  cmd->add_flag("--list-presets", o->list, "List the presets with their layouts and exit");
  auto* g = cmd->add_option_group("layout");
  g->add_option("--tp", o->tp, "Tensor-parallel degree");
  g->add_option("--pp", o->pp, "Pipeline stages (1F1B)");
  g->add_option("--ep", o->ep, "Expert-parallel degree (EP groups are carved out of DP)");
  g->add_option("--dp", o->dp, "Data-parallel degree");
  g->add_option("--world", o->world, "Expected world size (checked against tp x pp x dp)");
  g->add_flag("--sp", o->sp, "Megatron sequence parallelism (Reduce-Scatter / All-Gather)");
  g->add_flag("--sp-allreduce", o->sp_allreduce,
              "SP with the unfused All-Reduce baseline (each rank reads its shard)");
  g->add_flag("--no-sp", o->no_sp, "No sequence parallelism (overrides a preset)");
  g->add_flag("--pp-send-full", o->pp_send_full,
              "With SP: all-gather the stage output and send it whole (PP+SP baseline)");
  g->add_flag("--pp-moe-cut", o->pp_moe_cut,
              "MoE with PP: cut stages at the MoE dispatch; the sending stage runs the gate and "
              "sends the routed tokens (Chimera PP+EP)");
  g->add_flag("--no-pp-moe-cut", o->no_pp_moe_cut,
              "Cut stages at layer boundaries (overrides a preset)");
  g->add_flag("--no-sp-recompute", o->no_recompute,
              "With SP: keep gathered GEMM inputs instead of re-gathering them in backward");
  g->add_option("--zero", o->zero, "0: bucketed All-Reduce; 1, 2, 3: ZeRO stage");
  g->add_option("--bucket", o->bucket, "Gradient bucket size in elements (default 40000000)");
  auto* mg = cmd->add_option_group("model");
  mg->add_option("--layers", o->layers, "Transformer layers");
  mg->add_option("--hidden", o->hidden, "Hidden size");
  mg->add_option("--seq", o->seq, "Sequence length");
  mg->add_option("--micro-batch", o->micro_batch, "Sequences per micro-batch");
  mg->add_option("--micro-batches", o->micro_batches, "Micro-batches per step per DP rank");
  mg->add_option("--heads", o->heads, "Attention heads");
  mg->add_option("--ffn", o->ffn, "FFN / expert inner size (0: 4 x hidden)");
  mg->add_option("--experts", o->experts, "MoE experts per layer (0: dense MLP)");
  mg->add_option("--top-k", o->top_k, "Experts per token");
  mg->add_option("--dtype", o->dtype, "Activation / parameter type (default bfloat16)");
  cmd->add_option("--profile", o->profile,
                  "Hardware profile for compute durations: h100-nvlink, h100-pcie, h100-ib,\n"
                  "a100-nvlink, cpu-shm, or a JSON file")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->out, ".braid file to store the schedule in");
  cmd->add_option("--json", o->json, "Write the schedule as braid-schedule/1 JSON ('-': stdout)");
  cmd->add_flag("-q,--quiet", o->quiet, "Print only the schedule id");
  cmd->add_flag("--every-rank", o->every_rank,
                "Build and store every rank; by default the DP replicas are one rank class each,\n"
                "stored once (docs/schedule-ir.md, \"Rank classes\")");
  cmd->callback([o, &run] { run = [o] { return run_synth(*o); }; });
}

static const VerbRegistration kRegister{40, "synth", register_synth};

}  // namespace braid::cli
