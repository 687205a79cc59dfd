// Memory registrations kept between operations. A region stays registered while its pages are
// the ones the process maps at those addresses: the UnmapWatch reports every range unmapped,
// emptied or moved, and acquire() drops the regions it touched before it looks anything up.
// Without a watch (no userfaultfd here) or for memory it cannot watch (file-backed mappings),
// every use registers the memory and its release deregisters it, as correct and slower.
// Cached regions never overlap: a request that overlaps some is registered as their union.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "../../util/unmap_watch.h"

namespace ptl::verbs {

struct RegCacheStats {
    uint64_t hits = 0, misses = 0, uncached = 0, invalidated = 0, evicted = 0;
};

class RegCache {
public:
    struct Region;

    // `watch` may be null: nothing is cached then. max_bytes bounds what unused cached
    // regions keep pinned.
    RegCache(ibv_pd *pd, std::unique_ptr<UnmapWatch> watch, size_t max_bytes);
    ~RegCache();
    RegCache(const RegCache &) = delete;
    RegCache &operator=(const RegCache &) = delete;

    // A registration covering [addr, addr + len), writable by the device (RDMA read
    // into it, RDMA write from a peer) where asked. Null if the memory cannot be registered.
    Region *acquire(const void *addr, size_t len, bool writable);
    void release(Region *r);
    static uint32_t lkey(const Region *r);
    static uint32_t rkey(const Region *r);

    bool caching() const { return watch_ != nullptr; }
    const RegCacheStats &stats() const { return stats_; }
    // Bytes registered now: regions in use and those kept for reuse.
    size_t registered_bytes() const { return registered_bytes_; }

private:
    void apply_invalidations();
    void retire(Region *r, bool unwatch);
    Region *register_uncached(uintptr_t start, uintptr_t end, bool writable);
    Region *register_cached(uintptr_t start, uintptr_t end, bool writable);
    void trim(size_t room);

    ibv_pd *pd_;
    std::unique_ptr<UnmapWatch> watch_;
    size_t max_bytes_;
    size_t unused_bytes_ = 0;
    size_t registered_bytes_ = 0;
    std::map<uintptr_t, Region *> by_start_;  // cached regions, by their first address
    std::list<Region *> unused_;              // cached regions nobody holds, oldest use first
    std::vector<UnmapWatch::Range> gone_;
    RegCacheStats stats_;
};

}  // namespace ptl::verbs
