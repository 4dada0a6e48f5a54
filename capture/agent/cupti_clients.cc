// CUPTI as the job's other clients call it. The library exports the CUPTI calls by which a client
// takes CUPTI or lets it go (subscribe, unsubscribe, buffer registration, disabling a kind,
// finalize); a client that reaches libcupti through the process's symbols (PyTorch's wheels link
// it dynamically, so torch.profiler's Kineto does) comes through here, and each call is forwarded
// unchanged to the libcupti braid loaded, its result returned. Braid's own calls of these
// functions never come through here (real()).
//
// What braid does around the call depends on who holds CUPTI (cupti_state.h) and on --cupti:
//  - yield (the default): CUDA 13.0's CUPTI has one subscriber and one set of activity buffers per
//    process, and braid hands over what the client asks for before its call goes on, so the
//    client gets what it would get without braid: a subscription takes braid's subscription (its
//    callbacks; braid's records go on), a buffer registration takes the records too (a gap in
//    braid's records). When that client unsubscribes or finalizes CUPTI (Kineto does both at its
//    teardown, with TEARDOWN_CUPTI=1), braid takes back what it can: Kineto subscribes again
//    right after its teardown (unless CUPTI_LAZY_REINIT=1), and braid then records without its
//    callbacks. Each hand-over is said.
//  - hold: braid keeps CUPTI; a refused client is said (its profile has no GPU activity), and so
//    is a client taking braid's buffers or kinds.
//  - a CUPTI that takes several subscribers (braid asks for it where CUPTI is 13.2 or later): the
//    client's subscription succeeds beside braid's, both record, and braid says so.
// The client is named by the library its callback or its call comes from (dladdr), and by the
// name it gives cuptiSubscribe_v2.
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "capture/agent/cupti_state.h"
#include "capture/cupti_parse.h"

namespace braid::capture::agent {
namespace {

// "libtorch_cuda.so" for code in /path/libtorch_cuda.so; "" when unknown.
std::string library_of(const void* code) {
  Dl_info info{};
  if (!code || !dladdr(code, &info) || !info.dli_fname) return "";
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

std::string client_name(const void* code, const char* subscriber_name = nullptr) {
  std::string lib = library_of(code);
  std::string name = subscriber_name && *subscriber_name
                         ? std::string("CUPTI for ") + subscriber_name
                         : "another CUPTI client (e.g. torch.profiler)";
  return lib.empty() ? name : name + " in " + lib;
}

// After another client's subscription was forwarded: `retry` forwards it again once braid has
// handed CUPTI over.
template <typename Retry>
CUptiResult after_subscribe(CUptiResult rc, Retry&& retry, const std::string& tool,
                            const char* how) {
  // Braid holding its records without a subscription (it handed that over): a client's
  // subscription, granted or refused, is not braid's doing.
  if (subscription_handed()) return rc;
  if (rc == CUPTI_SUCCESS) {
    if (owner() == Owner::Holding) note_shared(tool);
    return rc;
  }
  if (rc != CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || owner() != Owner::Holding) return rc;
  // A subscription asks for callbacks only: braid hands over its own and keeps recording until
  // the client registers activity buffers (where its window needs callbacks, all of CUPTI).
  if (yield_policy() && (yield_subscription(tool, how) || yield_to(tool, how))) {
    rc = retry();
    // Refused again (a third client holds CUPTI): braid had no reason to let go.
    if (rc != CUPTI_SUCCESS) take_back_soon("was refused anyway (" + result_name(rc) + ")");
    return rc;
  }
  report_other_client(false, tool + " asked for CUPTI (" + how +
                                 ") and was refused because braid holds it (--cupti hold; CUDA "
                                 "13.0 CUPTI takes one subscriber): that profiler records no GPU "
                                 "activity in this process; run it without braid record, or with "
                                 "--cupti yield, to use it");
  return rc;
}

}  // namespace
}  // namespace braid::capture::agent

using namespace braid::capture::agent;

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  if (!real().subscribe) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().subscribe(subscriber, callback, userdata);
  return after_subscribe(
      rc, [&] { return real().subscribe(subscriber, callback, userdata); },
      client_name(reinterpret_cast<const void*>(callback)), "cuptiSubscribe");
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata,
                  CUpti_SubscriberParams* params) {
  if (!real().subscribe_v2) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().subscribe_v2(subscriber, callback, userdata, params);
  return after_subscribe(
      rc, [&] { return real().subscribe_v2(subscriber, callback, userdata, params); },
      client_name(reinterpret_cast<const void*>(callback),
                  params ? params->subscriberName : nullptr),
      "cuptiSubscribe_v2");
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  if (!real().unsubscribe) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().unsubscribe(subscriber);
  if (rc == CUPTI_SUCCESS) {
    if (owner() == Owner::Yielded || subscription_handed())
      take_back_soon("unsubscribed", kAfterUnsubscribeMs);
    else if (owner() == Owner::Shared)
      shared_client_left();
  }
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                               CUpti_BuffersCallbackCompleteFunc completed) {
  if (!real().register_callbacks) return CUPTI_ERROR_NOT_INITIALIZED;
  const std::string tool = client_name(reinterpret_cast<const void*>(requested));
  // Its buffers would replace braid's: under yield, braid hands CUPTI over first.
  if (owner() == Owner::Holding && yield_policy()) yield_to(tool, "cuptiActivityRegisterCallbacks");
  const bool held = owner() == Owner::Holding && braid_registered();
  CUptiResult rc = real().register_callbacks(requested, completed);
  if (held) {
    if (rc == CUPTI_SUCCESS)
      report_other_client(true, tool +
                                    " registered its own activity buffers (--cupti hold): braid's "
                                    "kernel, copy and API records stop here");
    else
      report_other_client(false, tool + "'s activity buffers were refused (" + result_name(rc) +
                                     "): that profiler records no GPU activity in this process");
  }
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI
cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (!real().disable) return CUPTI_ERROR_NOT_INITIALIZED;
  CUptiResult rc = real().disable(kind);
  const Owner o = owner();
  if (rc != CUPTI_SUCCESS || (o != Owner::Holding && o != Owner::Shared) || !braid_registered())
    return rc;
  bool braids = false;
  int kinds[16];
  int n = braid::capture::enabled_activity_kinds(kinds, 16, true);
  for (int i = 0; i < n; ++i) braids = braids || kinds[i] == static_cast<int>(kind);
  // The window's kinds matter while it is open; API, external-correlation and marker records are
  // on for the run.
  bool for_run = kind == CUPTI_ACTIVITY_KIND_RUNTIME || kind == CUPTI_ACTIVITY_KIND_DRIVER ||
                 kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION ||
                 kind == CUPTI_ACTIVITY_KIND_MARKER;
  if (braids && (for_run || window_kinds_on()))
    report_other_client(true, client_name(__builtin_return_address(0)) +
                                  " (e.g. torch.profiler stopping) switched off CUPTI activity "
                                  "kind " +
                                  std::to_string(static_cast<int>(kind)) +
                                  ", which braid records: its records of that kind stop here");
  return rc;
}

extern "C" __attribute__((visibility("default"))) CUptiResult CUPTIAPI cuptiFinalize(void) {
  if (!real().finalize) return CUPTI_ERROR_NOT_INITIALIZED;
  const std::string tool = client_name(__builtin_return_address(0));
  const Owner o = owner();
  if (o == Owner::Holding && yield_policy()) {
    yield_to(tool, "cuptiFinalize");  // braid's records flushed before CUPTI goes
  } else if (o == Owner::Shared) {
    lost_to(tool, "cuptiFinalize");  // maybe inside its callback: no call into CUPTI
  } else if (o == Owner::Holding) {
    report_other_client(true, tool +
                                  " finalized CUPTI (--cupti hold): braid's CUDA records stop "
                                  "here");
    return real().finalize();
  }
  finalize_begins();
  CUptiResult rc = real().finalize();
  finalize_ends();
  take_back_soon("finalized CUPTI");
  return rc;
}
