// The debug-dump signal (docs/debugging.md, "When a job hangs"): a person
// who finds a job stuck sends the process a signal and gets every live
// worker of that process dumped (Agent::DebugDump), without a debugger and
// without the application's help.
//
// Which signal: FERRY_DEBUG_SIGNAL (read once, when the process's first
// worker starts): unset or empty = SIGUSR1; "USR2", "SIGUSR2" or a number
// = that signal; "off" (or "0", "none") = no signal. ferry takes the signal
// only when nobody else did: if the application installed its own handler
// before the first worker started, ferry leaves it alone (and says so in
// the log, at info level).
//
// Where it writes: stderr, always (one block per worker between "--- ferry
// debug dump" lines), and, when FERRY_DEBUG_DIR names a directory (read at
// each dump), a file there per worker, ferry-dump.<job>.<worker>.<pid>.json,
// replaced whole at each dump (written aside, then renamed).
//
// Why a pipe and a thread: a signal handler may only call async-signal-safe
// functions, and a dump takes locks and allocates. The handler writes one
// byte to a pipe; a thread of ferry's, started with the handler, reads it
// and does the dumps.
#pragma once

#include <memory>

namespace ferry {

class Agent;

namespace debug_signal {

// Installs the handler on the first call (see above) and adds `agent` to
// the workers each signal dumps; an agent destroyed since is skipped.
void Watch(const std::shared_ptr<Agent>& agent);

}  // namespace debug_signal
}  // namespace ferry
