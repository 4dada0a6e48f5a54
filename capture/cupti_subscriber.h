// CUpti_SubscriberParams as CUPTI 13.2 lays it out: the request for several subscribers
// (allowMultipleSubscribers) follows the fields CUDA 13.0's header has, so a build against older
// headers can still ask for it. One definition for the agent (capture/agent/cupti_agent.cc) and
// the fake CUPTI that stands in for libcupti in the tests (tests/capture/fake_cupti.cc).
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>

namespace braid::capture {

struct SubscriberParams132 {
  size_t structSize;
  const char* subscriberName;
  char* oldSubscriberName;
  size_t oldSubscriberSize;
  uint8_t allowMultipleSubscribers;
};
static_assert(offsetof(SubscriberParams132, oldSubscriberSize) ==
              offsetof(CUpti_SubscriberParams, oldSubscriberSize));

// cuptiGetVersion of CUPTI 13.2, the first that may admit several subscribers.
inline constexpr uint32_t kCuptiWithSeveralSubscribers = 130200;

}  // namespace braid::capture
