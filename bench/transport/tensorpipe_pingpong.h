// TensorPipe as a reference: the same ping-pong over TensorPipe's public C++
// API (libtensorpipe, Debian's git20220513 snapshot), with a Context that
// has exactly one transport, `shm`, and one channel, `basic`: the message's
// 16-byte metadata and descriptor travel over the shm connection, and its
// one tensor (the payload) over the basic channel, which copies it through
// further shm connections.
//
// TensorPipe is callback-based; the benchmark's interface is synchronous.
// The bridge keeps TensorPipe's own habits: a reply is chained inside the
// callbacks on TensorPipe's loop thread (readDescriptor -> read -> write), as
// TensorPipe's benchmark_pipe does, and the calling thread only waits for
// the counters those callbacks bump: in busy mode it spins (yielding, since
// TensorPipe's threads share its CPU), in sleep mode it waits on a condition
// variable.
//
// Whatever the mode, TensorPipe's shm transport runs a reactor thread that
// busy-polls (BusyPollingLoop: poll, else sched_yield) for as long as the
// context lives. That is why this reference is measured in a pass of its own
// (reference.h: `isolated`): its spinning threads would otherwise keep both
// CPUs awake while the other columns run, and their sleep-mode figures would
// no longer be sleeping figures.
#pragma once

#include "transport/reference.h"

#include <memory>

namespace ferry::bench {

std::unique_ptr<Reference> MakeTensorPipeShmReference();

}  // namespace ferry::bench
