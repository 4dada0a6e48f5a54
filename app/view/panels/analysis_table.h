// Shows an analysis table as it is stored (shared by the metrics and communicators panels).
#pragma once

#include "app/view/app.h"

namespace braid::view::panels {

void show_analysis_table(const AnalysisTable& t);
// "No analysis yet — run braid analyze" when `tables` is empty.
bool no_analysis_hint(const std::vector<const AnalysisTable*>& tables);

}  // namespace braid::view::panels
