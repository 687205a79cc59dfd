// One way of learning rank, size and exchanging data with the other ranks of a job: ptlrun's
// shared segment, a PMIx server (Open MPI's mpirun, PRRTE, Slurm) or a PMI-1 server (Hydra).
// portals4_rt.h picks one in ptlrt_init (runtime.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "../util/clock.h"

namespace ptl::rt {

class Launcher {
public:
    virtual ~Launcher() = default;
    virtual const char *name() const = 0;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Every rank's `len` (1..PTLRT_MAX_GATHER) bytes into `out`, in rank order. False on timeout or a failed job.
    virtual bool allgather(const void *in, void *out, size_t len) = 0;
    virtual bool barrier() = 0;
};

// Each returns nullptr and says why in `why` when its environment is present but unusable.
std::unique_ptr<Launcher> open_ptlrun_launcher(std::string &why);
std::unique_ptr<Launcher> open_pmix_launcher(std::string &why);
std::unique_ptr<Launcher> open_pmi1_launcher(std::string &why);

// PTLRT_TIMEOUT, default 120 s: how long a barrier or an allgather may wait.
double timeout_seconds();
inline double monotonic_seconds() {
    return double(monotonic_ns()) * 1e-9;
}

}  // namespace ptl::rt
