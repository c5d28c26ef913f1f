#include "harness/requirements.h"

namespace ferry::conformance {

const std::vector<Requirement>& Requirements() {
  static const std::vector<Requirement> table = {
      {"LOAD-1", "LoadTest", "PluginLoads", "",
       "the production loader loads and negotiates the plugin", false},

      {"NEG-1", "NegotiationTest", "AgreesInsideRange", "",
       "negotiation inside the plugin's minor range picks the highest common minor",
       false},
      {"NEG-2", "NegotiationTest", "AgreesAtRangeEdges", "",
       "offers that overlap only at an edge of the range still agree", false},
      {"NEG-3", "NegotiationTest", "RefusesOutsideRange", "",
       "offers outside the range give FERRY_INCOMPATIBLE with a message", false},
      {"NEG-4", "NegotiationTest", "RefusesWrongMajor", "",
       "a different ABI major gives FERRY_INCOMPATIBLE with a message", false},
      {"NEG-5", "NegotiationTest", "AcceptsLargerArgs", "",
       "a larger negotiate struct is accepted and not written beyond", false},
      {"NEG-6", "NegotiationTest", "RespectsSmallerArgs", "",
       "an older host's smaller negotiate struct is refused, not overrun", false},

      {"ABI-1", "AbiTest", "InitAndQueryAcceptLargerStructs", "",
       "init/query accept larger structs and write only their own size", true},
      {"ABI-2", "AbiTest", "ProgressHonoursEventStride", "",
       "progress() strides events by event_stride and stays inside each", true},
      {"ABI-3", "AbiTest", "PostsAcceptLargerStructsAndStrides", "",
       "listen/connect/send/place accept larger structs and wider strides", true},
      {"ABI-4", "AbiTest", "QueryReportsConsistentInfo", "",
       "query() reports limits and capabilities that make sense", true},
      {"ABI-5", "AbiTest", "MissingOptionalEntriesAreUnsupported", "",
       "a missing optional vtable entry reads as UNIMPLEMENTED, never a crash", true},

      {"LIFE-1", "LifecycleTest", "InitFiniRepeatedLeaksNothing", "",
       "init/fini many times leaks no file descriptors", true},
      {"LIFE-2", "LifecycleTest", "CoexistsWithOtherPlugins", "",
       "works while every other available plugin is loaded and open", true},
      {"LIFE-3", "LifecycleTest", "TwoContextsTalk", "FERRY_FEATURE_MULTI_CONTEXT",
       "two contexts of the plugin in one process talk and stay independent", true},
      {"LIFE-4", "LifecycleTest", "ListenConnectNeverBlock", "",
       "listen/connect/close return at once, even to a dead address", true},
      {"LIFE-5", "LifecycleTest", "ManyConnectionsOnOneListener", "",
       "64 connections on one listener each carry their own messages", true},
      {"LIFE-6", "LifecycleTest", "CloseCompletesInFlightOps", "",
       "close() completes in-flight operations (CANCELLED), then CLOSED last", true},
      {"LIFE-7", "LifecycleTest", "ConnUserDataReported", "",
       "events carry the connection's user data as the host set it", true},
      {"LIFE-8", "LifecycleTest", "FdsAreCloseOnExec", "",
       "every fd the plugin opens is close-on-exec", true},

      {"MSG-1", "MessagingTest", "SizesUpTo1MiB", "",
       "messages of 0 B, 1 B, 4 KiB and 1 MiB arrive byte for byte", true},
      {"MSG-2", "MessagingTest", "LargeMessage64MiB", "",
       "a 64 MiB message arrives byte for byte", true},
      {"MSG-3", "MessagingTest", "OversizedMessageRefused", "",
       "a message over max_message_size is refused at once, touching nothing", true},
      {"MSG-4", "MessagingTest", "HeaderSizeLimit", "",
       "headers up to max_header_size arrive; one byte more is refused", true},
      {"MSG-5", "MessagingTest", "OrderedDelivery", "FERRY_CAP_ORDERED",
       "1000 numbered messages arrive in order", true},
      {"MSG-6", "MessagingTest", "ManyOperationsInFlight", "",
       "1000 sends posted before any progress all complete and arrive", true},
      {"MSG-7", "MessagingTest", "DiscardDropsOneMessage", "",
       "discard() drops one message; the next arrives intact", true},
      {"MSG-8", "MessagingTest", "SendsBeforeConnectedAreDelivered", "",
       "sends posted before CONNECTED go out once connected", true},
      {"MSG-9", "MessagingTest", "BothDirectionsAtOnce", "",
       "both sides sending large messages at once do not deadlock", true},
      {"MSG-10", "MessagingTest", "CrossProcessEcho", "",
       "messages round-trip through a peer process", true},
      {"MSG-11", "MessagingTest", "CompletionsExactlyOnceNeverInline", "",
       "every completion arrives exactly once and never inside its post", true},
      {"MSG-12", "MessagingTest", "HeaderIsCopiedDuringSend", "",
       "the header is read during send() only: scribbling it afterwards changes "
       "nothing that arrives",
       true},

      {"PLACE-1", "PlacementTest", "SegmentsLandInPlace", "",
       "several segments, inline and not, land in their destinations", true},
      {"PLACE-2", "PlacementTest", "NullDestinationDropsSegment", "",
       "a NULL destination drops that segment only", true},
      {"PLACE-3", "PlacementTest", "TooSmallCapacityRefused", "",
       "place() with a destination smaller than its segment is refused", true},
      {"PLACE-4", "PlacementTest", "WrongMsgIdRefused", "",
       "place()/discard() with a wrong msg_id or dest count are refused", true},
      {"PLACE-5", "PlacementTest", "InlineArrivalAnsweredByPlace", "",
       "an all-inline arrival answered by place() still completes", true},

      {"FAIL-1", "FailureTest", "PeerKilledWhileSending", "FERRY_CAP_DETECTS_PEER_DEATH",
       "a peer killed mid-message gives CONN_BROKEN/PEER_GONE in bounded time", true},
      {"FAIL-2", "FailureTest", "PeerKilledWithPendingSends",
       "FERRY_CAP_DETECTS_PEER_DEATH",
       "a peer killed with our sends pending fails them with PEER_GONE", true},
      {"FAIL-3", "FailureTest", "PeerCloseDetected", "FERRY_CAP_DETECTS_PEER_DEATH",
       "a peer's close() breaks our side; later sends are refused", true},
      {"FAIL-4", "FailureTest", "ConnectFailureFailsQueuedSends", "",
       "a failed connect fails the sends queued behind it", true},

      {"ERR-1", "ErrorTest", "FailingEventsCarryMessages", "",
       "every event with a failing status has a non-empty message", true},
      {"ERR-2", "ErrorTest", "FailingCallsFillErrorBuffer", "",
       "every failing control call fills the error buffer, within capacity", true},
      {"ERR-3", "ErrorTest", "AddressBuffersBounded", "",
       "address getters respect buf_len and report what does not fit", true},

      {"EDGE-1", "EdgeTest", "EmptyPartsMayBeNull", "",
       "NULL header, segment array, segment data and destinations are fine where the "
       "length or count is 0",
       true},
      {"EDGE-2", "EdgeTest", "SegmentLimitsAreExact", "",
       "max_segments segments arrive, one more is RESOURCE_EXHAUSTED; nothing over "
       "max_inline_size arrives inline",
       true},
      {"EDGE-3", "EdgeTest", "ProgressWithNoRoomLosesNothing", "",
       "progress() with max_events 0 and events NULL returns nothing and loses nothing",
       true},
      {"EDGE-4", "EdgeTest", "FailedConnectStaysFailed", "",
       "a failed connect is reported by CONNECTED only; send() then answers "
       "FAILED_PRECONDITION",
       true},
      {"EDGE-5", "EdgeTest", "ListenAddressInUse", "",
       "listen() never takes over a live listener's address (ALREADY_EXISTS)", true},
      {"EDGE-6", "EdgeTest", "CloseTwiceIsNoOp", "",
       "a second close() before CLOSED changes nothing: one CLOSED", true},
      {"EDGE-7", "EdgeTest", "CloseWithPlacementInFlight", "",
       "close() with a placement in flight ends it (OK or CANCELLED) before CLOSED",
       true},
      {"EDGE-8", "EdgeTest", "FiniWithEverythingOpen", "FERRY_FEATURE_MULTI_CONTEXT",
       "fini() with connections, operations and listeners open releases everything",
       true},
      {"EDGE-9", "EdgeTest", "ContextsOnSeparateThreads", "FERRY_FEATURE_MULTI_CONTEXT",
       "two contexts driven by two threads at once do not interfere", true},

      {"CONC-1", "ConcurrencyTest", "ConcurrentPosting", "FERRY_CAP_THREAD_SAFE",
       "4 threads posting while one progresses lose and duplicate nothing", true},
      {"CONC-2", "ConcurrencyTest", "CloseWhilePosting", "FERRY_CAP_THREAD_SAFE",
       "close() racing with posting threads completes everything once", true},

      {"WAKE-1", "WakeupTest", "WakeupFdSignalsArrival",
       "FERRY_CAP_WAKEUP_FD, not FERRY_CAP_BUSY_POLL",
       "the wakeup fd becomes readable when a message arrives", true},
      {"WAKE-2", "WakeupTest", "WakeupFdSignalsCompletion",
       "FERRY_CAP_WAKEUP_FD, not FERRY_CAP_BUSY_POLL",
       "the wakeup fd becomes readable when an own send can complete", true},
      {"WAKE-3", "WakeupTest", "WakeupFdQuietWhenIdle",
       "FERRY_CAP_WAKEUP_FD, not FERRY_CAP_BUSY_POLL",
       "the wakeup fd is not readable once everything has been returned", true},
      {"WAKE-4", "WakeupTest", "WakeupFdSignalsQueuedEvents",
       "FERRY_CAP_WAKEUP_FD, not FERRY_CAP_BUSY_POLL",
       "the wakeup fd signals events queued by close() or left over by a small "
       "max_events",
       true},

      // Device memory (ABI 0.2): tests/device_test.cc, or without the CUDA
      // toolkit tests/device_unavailable_test.cc (all not run).
      {"DEV-1", "DeviceTest", "MemoryServices", "FERRY_MEM_CUDA and a GPU",
       "mem_alloc/mem_free/mem_copy are offered and work: cuda:0, exact round trips, "
       "src_stream honoured, absurd sizes refused",
       true},
      {"DEV-2", "DeviceTest", "SegmentsBetweenProcesses", "FERRY_MEM_CUDA and a GPU",
       "device segments of 1 B to 64 MiB reach another process's device memory exactly; "
       "device->host, host->device and mixed messages too",
       true},
      {"DEV-3", "DeviceTest", "ReadsAfterProducerStream", "FERRY_MEM_CUDA and a GPU",
       "a segment still being written on segment.stream arrives with the final bytes; "
       "send() does not block on that stream",
       true},
      {"DEV-4", "DeviceTest", "FreedAndReusedMemory", "FERRY_MEM_CUDA and a GPU",
       "a segment from memory freed and allocated again (same address) arrives with the "
       "new bytes",
       true},
      {"DEV-5", "DeviceTest", "ReceiverKilledWithHandleOpen", "FERRY_MEM_CUDA and a GPU",
       "a receiver killed holding device handles fails the pending sends (PEER_GONE) in "
       "bounded time; a new connection still works",
       true},
  };
  return table;
}

namespace {

std::string StripPrefix(const std::string& suite) {
  size_t slash = suite.rfind('/');
  return slash == std::string::npos ? suite : suite.substr(slash + 1);
}

std::string StripSuffix(const std::string& test) {
  size_t slash = test.find('/');
  return slash == std::string::npos ? test : test.substr(0, slash);
}

}  // namespace

const Requirement* FindRequirement(const std::string& suite_name,
                                   const std::string& test_name) {
  const std::string suite = StripPrefix(suite_name);
  const std::string test = StripSuffix(test_name);
  for (const Requirement& r : Requirements()) {
    if (suite == r.suite && test == r.test) return &r;
  }
  return nullptr;
}

const Requirement* FindRequirementById(const std::string& id) {
  for (const Requirement& r : Requirements()) {
    if (id == r.id) return &r;
  }
  return nullptr;
}

}  // namespace ferry::conformance
