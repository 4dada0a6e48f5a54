// State the NCCL interposer shares with the profiler plugin: the NCCL call the current thread
// is inside (the plugin's API events happen within it).
#pragma once

#include <cstdint>

namespace braid::capture {

// The id of the NCCL call this thread is executing, 0 outside one.
int64_t current_nccl_call();

// The external-correlation id the GPU work of the NCCL API activity this thread is in will carry:
// its group's (between ncclGroupStart and ncclGroupEnd), else the call's; 0 outside NCCL.
uint64_t current_nccl_launch_id();

// NCCL's profiler plugin tells the shape of the communicator of the call this thread is in (from
// its init): filled in where the interposer could not learn it (a non-blocking split).
void note_comm_shape(int rank, int nranks);

// CUDA graphs. A graph node created on this thread: when the thread is inside an NCCL call (or a
// group's ncclGroupEnd), the node is that call's (the group's) and true is returned.
bool note_graph_node(uint32_t graph, uint64_t node);
// NCCL says (profiler plugin) the call this thread is inside is being captured into a graph.
void note_graph_captured();

}  // namespace braid::capture
