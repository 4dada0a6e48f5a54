// CUDA graphs holding NCCL calls (GraphBook), as CUPTI's callbacks tell them to the agent
// (cupti_agent.cc's on_callback calls these): nodes created inside an NCCL call, their clones at
// instantiation, and each graph launch, turned into replayed calls on the launching thread (so
// they take their sequence numbers in program order, as ordinary calls do). What CUPTI reports at
// an instantiation, and why the clones are found the way they are: capture/graph_book.h.
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <utility>
#include <vector>

#include "capture/agent/agent.h"
#include "capture/agent/cupti_state.h"
#include "capture/agent/nccl_interpose.h"
#include "capture/clock_fit.h"
#include "capture/nccl_event.h"

namespace braid::capture::agent {

namespace {
thread_local bool t_instantiating = false;     // between GRAPHEXEC_CREATE_STARTING and _CREATED
thread_local std::vector<uint64_t>* t_clones;  // the NCCL clones made there (never freed: exit)
thread_local bool t_in_runtime_graph_launch = false;  // its driver call is the same launch
}  // namespace

void on_graph_resource(CUpti_CallbackId cbid, const void* data) {
  auto* res = static_cast<const CUpti_ResourceData*>(data);
  auto* g = res ? static_cast<const CUpti_GraphData*>(res->resourceDescriptor) : nullptr;
  Agent* a = Agent::running();
  if (!g || !a) return;
  uint64_t node = 0, original = 0;
  uint32_t graph = 0, exec = 0;
  if (!t_clones) t_clones = new std::vector<uint64_t>();
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:  // only inside an NCCL call: its nodes
      if (cuptiGetGraphNodeId(g->node, &node) == CUPTI_SUCCESS &&
          cuptiGetGraphId(g->graph, &graph) == CUPTI_SUCCESS)
        note_graph_node(graph, node);
      break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED:
      // `graphExec` is not set while an instantiation clones (the executable does not exist
      // yet): the clone is the executable's when the instantiation ends on this thread.
      if (g->originalNode && g->node &&
          cuptiGetGraphNodeId(g->originalNode, &original) == CUPTI_SUCCESS &&
          cuptiGetGraphNodeId(g->node, &node) == CUPTI_SUCCESS) {
        if (!g->graph || cuptiGetGraphId(g->graph, &graph) != CUPTI_SUCCESS) graph = 0;
        if (!g->graphExec || cuptiGetGraphExecId(g->graphExec, &exec) != CUPTI_SUCCESS) exec = 0;
        if (a->graphs().cloned(original, node, graph, exec) && t_instantiating)
          t_clones->push_back(node);
      }
      break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING:
      t_instantiating = true;
      t_clones->clear();
      break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED:
      if (g->graphExec && cuptiGetGraphExecId(g->graphExec, &exec) == CUPTI_SUCCESS) {
        if (g->graph && cuptiGetGraphId(g->graph, &graph) == CUPTI_SUCCESS)
          a->graphs().exec_created(exec, graph);
        if (t_instantiating) a->graphs().exec_holds(exec, *t_clones);
      }
      t_instantiating = false;
      t_clones->clear();
      break;
    default:
      break;
  }
}

void on_graph_launch(CUpti_CallbackDomain domain, const CUpti_CallbackData* info) {
  bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (info->callbackSite != CUPTI_API_ENTER) {
    if (runtime) t_in_runtime_graph_launch = false;
    return;
  }
  if (!runtime && t_in_runtime_graph_launch) return;
  if (runtime) t_in_runtime_graph_launch = true;
  Agent* a = Agent::running();
  if (!a || !info->functionParams) return;
  CUgraphExec exec_handle =
      runtime
          ? reinterpret_cast<CUgraphExec>(
                static_cast<const cudaGraphLaunch_v10000_params*>(info->functionParams)->graphExec)
          : static_cast<const cuGraphLaunch_params*>(info->functionParams)->hGraph;
  uint32_t exec = 0;
  if (!exec_handle || cuptiGetGraphExecId(exec_handle, &exec) != CUPTI_SUCCESS) return;
  int64_t now = host_now_ns();
  auto tid = static_cast<int64_t>(syscall(SYS_gettid));
  bool in_window = a->window_open();
  std::vector<std::pair<NcclCall, std::vector<uint64_t>>> replays;
  a->graphs().launched(exec, [&](const NcclCall& t, const std::vector<uint64_t>& nodes) {
    replays.emplace_back(t, nodes);
  });
  std::map<int64_t, std::pair<int64_t, int32_t>> groups;  // captured group -> this launch's
  for (auto& [t, nodes] : replays)
    if (t.group_id) {
      auto& g = groups[t.group_id];
      if (!g.first) g.first = a->next_id();
      ++g.second;
    }
  for (auto& [t, nodes] : replays) {
    NcclCall r = t;
    r.graph = kGraphReplay;
    r.call_id = a->next_id();
    r.external_id = static_cast<uint64_t>(r.call_id);
    r.seq = take_seq(r);
    r.group_id = t.group_id ? groups[t.group_id].first : 0;
    r.group_size = t.group_id ? groups[t.group_id].second : 1;
    r.tid = tid;
    r.enqueue = r.ret = now;
    r.result = 0;
    r.in_window = in_window;
    a->pipeline().post(r);
    for (uint64_t node : nodes)
      a->pipeline().post(NcclGraphLink{info->correlationId, node, r.external_id});
  }
}

bool is_graph_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
    return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
           cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    return cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  return false;
}

}  // namespace braid::capture::agent
