// One way of learning rank, size and exchanging data with the other ranks of a job: ptlrun's
// shared segment, a PMIx server (Open MPI's mpirun, PRRTE, Slurm) or a PMI-1 server (Hydra).
// portals4_rt.h picks one in ptlrt_init (runtime.cc).
#pragma once

#include <cstddef>
#include <map>
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
    // Every rank's `len` (1..PTLRT_MAX_GATHER) bytes into `out`, in rank order. False on timeout or a failed
    // job.
    virtual bool allgather(const void *in, void *out, size_t len) = 0;
    virtual bool barrier() = 0;

    // A PMI-1 key-value space (portals4/pmi.h): puts become visible to every rank after the
    // next kvs_fence, which is also a barrier. The defaults carry the puts in allgather rounds
    // (kvs_by_gather.cc); launchers with a key-value store of their own use it instead.
    virtual std::string kvs_name() const { return std::string("ptlrt-") + name(); }
    virtual size_t kvs_key_max() const { return 256; }
    virtual size_t kvs_value_max() const { return 4096; }
    virtual bool kvs_put(const std::string &key, const std::string &value);
    virtual bool kvs_commit() { return true; }
    virtual bool kvs_fence();
    // False when no rank put `key` before the last fence.
    virtual bool kvs_get(const std::string &key, std::string &value);

private:
    std::map<std::string, std::string> kvs_unpublished_;
    std::map<std::string, std::string> kvs_published_;
};

// Each returns nullptr and says why in `why` when its environment is present but unusable.
std::unique_ptr<Launcher> open_ptlrun_launcher(std::string &why);
std::unique_ptr<Launcher> open_pmix_launcher(std::string &why);
std::unique_ptr<Launcher> open_pmi1_launcher(std::string &why);
// A job of one: the program was started without a launcher.
std::unique_ptr<Launcher> open_singleton_launcher();

// PTLRT_TIMEOUT, default 120 s: how long a barrier or an allgather may wait.
double timeout_seconds();
inline double monotonic_seconds() {
    return double(monotonic_ns()) * 1e-9;
}

}  // namespace ptl::rt
