// What cupti_agent.cc (braid's own use of CUPTI) shares with cupti_clients.cc (CUPTI as the job's
// other clients call it through this library): the libcupti braid loaded, and who holds CUPTI.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "capture/activity.h"

namespace braid::capture::agent {

// The libcupti this library loaded (found from a CUPTI function it does not define) and the
// functions of it that this library also exports for other clients. Braid's own calls of those
// functions go through here: -Bsymbolic binds a plain call to this library's own export.
struct RealCupti {
  void* handle = nullptr;
  const char* path = nullptr;
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiSubscribe_v2) subscribe_v2 = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;
  int (*nvtx_init)(void*) = nullptr;  // InitializeInjectionNvtx2
};
const RealCupti& real();

// Who holds CUPTI, as braid sees it. None: braid never subscribed (refused at the start, or no
// CUDA yet). Holding: braid is CUPTI's subscriber. Yielded: braid handed CUPTI to the job's own
// client (--cupti yield) and waits for it to let go. Shared: CUPTI took another subscriber beside
// braid (CUPTI 13.2 and later, on a driver that allows several): both record.
enum class Owner : int { None, Holding, Yielded, Shared };
Owner owner();
bool yield_policy();      // --cupti yield (else hold)
bool braid_registered();  // braid's activity buffers are CUPTI's
bool window_kinds_on();   // the window's kinds (kernels, copies, ...) are on

// The canary (cupti_watch.cc): while a window is open, every `period_ms` a DEVICE record dumped
// into braid's buffers must come back through them; two in a row that do not are said as
// capture.cupti_taken. On the writer thread's tick.
void canary_tick(int period_ms);
// Parses an activity buffer into `h`, noting the canary's DEVICE record.
void parse_with_canary(const uint8_t* buf, size_t valid, ActivityHandler& h);

// Said once per code on stderr and counted in diagnostics (capture.cupti_taken when `taken`, else
// capture.cupti_contended).
void report_other_client(bool taken, const std::string& detail);
std::string result_name(CUptiResult rc);

// Hands CUPTI to `tool` before its call `how` is forwarded: braid's records switched off and
// flushed, braid unsubscribed, the gap begun (its window closes; capture.cupti_yielded, stderr).
// False when braid did not hold CUPTI. Not inside a CUPTI callback.
bool yield_to(const std::string& tool, const std::string& how);
// Hands only braid's subscription (its callbacks) to `tool`, whose cuptiSubscribe was refused:
// braid's records go on (the activity API needs no subscription) and its buffers stay until the
// client registers its own (yield_to). Said on stderr and as capture.cupti_callbacks_yielded.
// False when braid holds no subscription, or its window needs the callbacks (cudaProfilerStart).
bool yield_subscription(const std::string& tool, const std::string& how);
// Braid handed its subscription over and wants it back.
bool subscription_handed();
// CUPTI was torn down under braid (another client's cuptiFinalize): the gap begins with no call
// into CUPTI (the client may be inside one of its callbacks).
void lost_to(const std::string& tool, const std::string& how);
// The client braid yielded to let go (`how`): braid takes CUPTI back (or only its subscription,
// where that was all it handed over) on its writer thread, not before `after_ms` (what the client
// does next, e.g. finalize after unsubscribing, comes first).
// Lock-free: it may run inside that client's CUPTI callback.
void take_back_soon(const std::string& how, int after_ms = 0);
inline constexpr int kAfterUnsubscribeMs = 200;
// Around another client's cuptiFinalize: braid does not take CUPTI back while one runs.
void finalize_begins();
void finalize_ends();
// Another client subscribed while braid holds CUPTI, and CUPTI accepted it: both record.
void note_shared(const std::string& tool);
// The other subscriber of a shared CUPTI left: braid holds it alone again.
void shared_client_left();

// CUDA graphs holding NCCL calls (cupti_graphs.cc), from on_callback: a graph resource callback
// (node created or cloned, executable instantiated), whether a callback is a graph launch, and
// a graph launch (its replayed NCCL calls posted).
void on_graph_resource(CUpti_CallbackId cbid, const void* data);
bool is_graph_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void on_graph_launch(CUpti_CallbackDomain domain, const CUpti_CallbackData* info);

// NVTX (nvtx_hooks.cc records the ranges; the window controller lives in cupti_agent.cc).
// Whether a range of this name can open or close the capture window (lock-free).
bool nvtx_window_cares(std::string_view name);
// A push/pop range the window cares about started or ended (takes the window lock).
void nvtx_window_range(bool start, std::string_view name);
// A start/end range: true when the window follows it (its start was one it cares about).
bool nvtx_window_range_id(bool start, uint64_t id, std::string_view name);
// The agent's NVTX handlers go live (CUPTI started): `record` with --trace nvtx.
void nvtx_hooks_start(bool record);

}  // namespace braid::capture::agent
