// Braid's own declarations of NCCL's profiler-plugin ABI, version 5 (NCCL >= 2.28), written
// from NCCL's public description of the interface (ext-profiler/README.md in NCCL's sources):
// NCCL dlopens the library named by NCCL_PROFILER_PLUGIN and looks up the symbol
// "ncclProfiler_v5", a table of five functions plus a name. Only the layout matters to NCCL;
// the names here are Braid's.
#pragma once

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

namespace braid::capture::nccl_profiler {

// Event type bits (descriptor `type`, activation mask).
enum : uint64_t {
  kGroup = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kProxyOp = 1u << 3,
  kProxyStep = 1u << 4,
  kProxyCtrl = 1u << 5,
  kKernelCh = 1u << 6,
  kNetPlugin = 1u << 7,
  kGroupApi = 1u << 8,
  kCollApi = 1u << 9,
  kP2pApi = 1u << 10,
  kKernelLaunch = 1u << 11,
};

// Event states of recordEventState (the numbering NCCL's v5 interface fixes).
enum EventState : int {
  kProxyOpInProgress = 19,
  kProxyStepSendGpuWait = 8,
  kProxyStepSendPeerWait = 20,
  kProxyStepSendWait = 9,
  kProxyStepRecvWait = 10,
  kProxyStepRecvFlushWait = 11,
  kProxyStepRecvGpuWait = 12,
  kProxyCtrlIdle = 13,
  kProxyCtrlActive = 14,
  kProxyCtrlSleep = 15,
  kProxyCtrlWakeup = 16,
  kProxyCtrlAppend = 17,
  kProxyCtrlAppendEnd = 18,
  kNetPluginUpdate = 21,
  kKernelChStop = 22,
  kGroupStartApiStop = 23,
  kEndGroupApiStart = 24,
};

struct EventDescr {
  uint64_t type;
  void* parent;
  int rank;
  union {
    struct {
      bool graph_captured;
      int group_depth;
    } group_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graph_captured;
    } coll_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graph_captured;
    } p2p_api;
    struct {
      void* stream;
    } kernel_launch;
    struct {
      uint64_t seq;
      const char* func;
      const void* send;
      void* recv;
      size_t count;
      int root;
      const char* datatype;
      uint8_t channels;
      uint8_t warps;
      const char* algo;
      const char* proto;
      void* parent_group;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t channels;
      void* parent_group;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channel;
      int peer;
      int steps;
      int chunk_size;
      int is_send;
    } proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel;
      uint64_t gpu_timer;
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
  };
};

union EventStateArgs {
  struct {
    size_t size;
  } proxy_step;
  struct {
    int appended_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t gpu_timer;
  } kernel_ch;
};

using Logger = void (*)(int level, unsigned long flags, const char* file, int line,
                        const char* fmt, ...);

struct ProfilerV5 {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t comm_id, int* activation_mask,
                       const char* comm_name, int nnodes, int nranks, int rank, Logger log);
  ncclResult_t (*start_event)(void* context, void** handle, EventDescr* descr);
  ncclResult_t (*stop_event)(void* handle);
  ncclResult_t (*record_event_state)(void* handle, EventState state, EventStateArgs* args);
  ncclResult_t (*finalize)(void* context);
};

}  // namespace braid::capture::nccl_profiler
