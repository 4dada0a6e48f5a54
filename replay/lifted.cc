#include "replay/lifted.h"

#include "analysis/analyze.h"
#include "analysis/hardware.h"
#include "analysis/store.h"
#include "trace/reader.h"

namespace braid::replay {

LiftedModel lifted_cost_model(const std::string& path, const fusion::LiftSource& src,
                              const std::string& base_profile) {
  LiftedModel out{analysis::CostModel(analysis::load_profile(base_profile)), ""};
  analysis::StoredCosts costs = analysis::load_costs(path, src.run);
  bool analysed_now = false;
  if (!costs.analysed) {
    analysis::Analysis a;
    {
      TraceReader reader(path);
      analysis::AnalyzeOptions opt;
      opt.run = src.run;
      opt.profile = base_profile;
      a = analysis::analyze(reader, opt);
    }
    analysis::store_analysis(path, a);
    costs = analysis::load_costs(path, src.run);
    analysed_now = true;
  }
  int calibrated = 0;
  for (const auto& [comm, cost] : costs.comms) {
    out.model.set_comm(fusion::lifted_comm_id(comm), cost);
    calibrated += cost.cv_error >= 0 || cost.samples > 0;
  }
  out.note = "cost model: " + std::to_string(calibrated) + " of " +
             std::to_string(costs.comms.size()) + " communicators priced with the α-β " +
             "`braid analyze` calibrated on run " + std::to_string(src.run) +
             (analysed_now ? " (analysed now and stored)" : " (stored analysis)") +
             ", the rest and compute by profile " + out.model.profile().name;
  return out;
}

LiftedModel replay_cost_model(const std::string& path, const fusion::LiftSource& src,
                              const std::string& backend, bool profile_given,
                              const std::string& profile_name,
                              const analysis::HardwareProfile& profile) {
  if (src.run >= 0 && backend == "sim" && !profile_given)
    return lifted_cost_model(path, src, profile_name);
  return {analysis::CostModel(profile), ""};
}

}  // namespace braid::replay
