// Whether a peer's operating-system process still runs.
#pragma once

#include <sys/types.h>

namespace ptl {

// True when `pid` no longer exists or has exited and waits to be reaped (a zombie): a
// launcher that reaps late (Hydra's proxy reaps only when the job ends) must not keep a dead
// peer alive. Reads /proc, so callers rate-limit it.
bool os_process_gone(pid_t pid);

}  // namespace ptl
