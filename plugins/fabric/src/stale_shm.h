// Removing shared-memory regions that libfabric's shm provider left behind
// for this process's pid.
//
// The shm provider (used directly, and by EFA for peers on the same host)
// names each endpoint's region /dev/shm/<pid>:<domain>:<endpoint> and
// unlinks it only when the endpoint is closed. A process that dies without
// closing (SIGKILL, a crash) leaves it behind, and a later process that is
// given the same pid (pids wrap at pid_max, 32768 here) opens that stale
// region instead of a new one: with libfabric 1.17 its endpoint then fails
// to open, or the process dies of SIGBUS when the stale file is shorter than
// the provider expects (both seen here: a CI run failed one way, a
// reproduction with an empty file the other).
//
// Two kinds of region are stale, and removed before the plugin opens an
// endpoint:
//   - one named for this process's pid but created before this process
//     started: its creator had the pid first and is gone;
//   - one named for a pid that no process has now: its creator died without
//     closing it (each such leak holds the region's memory, 16 MiB with
//     libfabric 1.17's defaults, until someone removes it).
// Regions of this process (another context, or other libfabric use in it)
// are newer than its start and are left alone, as are other users' files and
// regions of live processes. Like the provider's own naming, this assumes
// that the processes sharing /dev/shm share one pid namespace.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace ferry_fabric {

// Removes the stale regions in /dev/shm owned by this user; logs each.
// Never fails (a region it cannot remove is left for the provider to
// report).
void RemoveStaleShmRegions();

// The rule itself, for tests: in `dir`, the regular files named
// "<pid>:<digits>:<digits>" owned by `uid` that are either this process's
// (`self`) and older than `started` (seconds since the epoch) less a
// 2-second margin (the boot time the start is computed from has
// whole-second resolution), or another pid's for which `alive` is false.
// Returns the names it removed.
std::vector<std::string> RemoveStaleRegions(const std::string& dir, pid_t self, uid_t uid,
                                            double started,
                                            const std::function<bool(pid_t)>& alive);

}  // namespace ferry_fabric
