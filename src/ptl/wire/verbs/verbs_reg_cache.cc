#include "verbs_reg_cache.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

namespace ptl::verbs {

struct RegCache::Region {
    uintptr_t start = 0, end = 0;
    ibv_mr *mr = nullptr;
    bool writable = false;
    bool cached = false;
    bool dead = false;  // dropped from the cache while held: deregistered at its last release
    uint32_t users = 0;
    std::list<Region *>::iterator lru;  // in unused_ while cached, alive and not held
    size_t *registered = nullptr;       // the cache's count of registered bytes
    size_t bytes() const { return end - start; }
    Region(uintptr_t s, uintptr_t e, ibv_mr *m, size_t *count) : start(s), end(e), mr(m), registered(count) {
        *registered += bytes();
    }
    ~Region() {
        *registered -= bytes();
        ibv_dereg_mr(mr);
    }
};

namespace {

constexpr int kWritable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
constexpr int kReadOnly = IBV_ACCESS_REMOTE_READ;

uintptr_t page_size() {
    static const uintptr_t size = uintptr_t(sysconf(_SC_PAGESIZE));
    return size;
}

}  // namespace

RegCache::RegCache(ibv_pd *pd, std::unique_ptr<UnmapWatch> watch, size_t max_bytes)
    : pd_(pd), watch_(std::move(watch)), max_bytes_(max_bytes) {}

RegCache::~RegCache() {
    for (auto &[start, r] : by_start_) delete r;
}

uint32_t RegCache::lkey(const Region *r) {
    return r->mr->lkey;
}

uint32_t RegCache::rkey(const Region *r) {
    return r->mr->rkey;
}

RegCache::Region *RegCache::acquire(const void *addr, size_t len, bool writable) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    if (!watch_) return register_uncached(a, a + len, writable);
    apply_invalidations();
    const uintptr_t start = a & ~(page_size() - 1);
    const uintptr_t end = (a + len + page_size() - 1) & ~(page_size() - 1);
    if (auto it = by_start_.upper_bound(start); it != by_start_.begin()) {
        Region *r = std::prev(it)->second;
        if (r->end >= end && (r->writable || !writable)) {
            if (r->users++ == 0) {
                unused_.erase(r->lru);
                unused_bytes_ -= r->bytes();
            }
            ++stats_.hits;
            return r;
        }
    }
    ++stats_.misses;
    if (Region *r = register_cached(start, end, writable)) return r;
    ++stats_.uncached;
    return register_uncached(a, a + len, writable);
}

void RegCache::release(Region *r) {
    if (--r->users > 0) return;
    if (!r->cached || r->dead) {
        delete r;
        return;
    }
    unused_.push_back(r);
    r->lru = std::prev(unused_.end());
    unused_bytes_ += r->bytes();
    trim(0);
}

RegCache::Region *RegCache::register_uncached(uintptr_t start, uintptr_t end, bool writable) {
    ibv_mr *mr =
        ibv_reg_mr(pd_, reinterpret_cast<void *>(start), end - start, writable ? kWritable : kReadOnly);
    if (!mr) return nullptr;
    Region *r = new Region(start, end, mr, &registered_bytes_);
    r->writable = writable;
    r->users = 1;
    return r;
}

// The request and every cached region it overlaps, registered as one: pages of an overlapped
// region were mapped when it was registered and no event has said otherwise since.
RegCache::Region *RegCache::register_cached(uintptr_t start, uintptr_t end, bool writable) {
    auto first = by_start_.upper_bound(start);
    if (first != by_start_.begin() && std::prev(first)->second->end > start) --first;
    std::vector<Region *> overlapped;
    uintptr_t ustart = start, uend = end;
    for (auto it = first; it != by_start_.end() && it->second->start < end; ++it) {
        overlapped.push_back(it->second);
        ustart = std::min(ustart, it->second->start);
        uend = std::max(uend, it->second->end);
    }
    if (!watch_->watch(ustart, uend)) return nullptr;
    for (Region *o : overlapped) retire(o, false);  // replaced by the union, or lost with it
    trim(uend - ustart);
    void *base = reinterpret_cast<void *>(ustart);
    bool w = true;
    ibv_mr *mr = ibv_reg_mr(pd_, base, uend - ustart, kWritable);
    if (!mr && !unused_.empty()) {  // perhaps past the locked-memory limit: give back what waits
        trim(max_bytes_);
        mr = ibv_reg_mr(pd_, base, uend - ustart, kWritable);
    }
    if (!mr && !writable) {  // read-only memory (a source in .rodata)
        w = false;
        mr = ibv_reg_mr(pd_, base, uend - ustart, kReadOnly);
    }
    if (!mr) {
        watch_->unwatch(ustart, uend);
        return nullptr;
    }
    Region *r = new Region(ustart, uend, mr, &registered_bytes_);
    r->writable = w;
    r->cached = true;
    r->users = 1;
    by_start_[ustart] = r;
    return r;
}

void RegCache::retire(Region *r, bool unwatch) {
    by_start_.erase(r->start);
    if (unwatch) watch_->unwatch(r->start, r->end);
    if (r->users > 0) {
        r->dead = true;
        return;
    }
    unused_.erase(r->lru);
    unused_bytes_ -= r->bytes();
    delete r;
}

// Unused regions, oldest use first, until `room` more bytes fit under the bound.
void RegCache::trim(size_t room) {
    while (!unused_.empty() && unused_bytes_ + room > max_bytes_) {
        ++stats_.evicted;
        retire(unused_.front(), true);
    }
}

void RegCache::apply_invalidations() {
    gone_.clear();
    if (!watch_->take(gone_)) {
        while (!by_start_.empty()) {
            ++stats_.invalidated;
            retire(by_start_.begin()->second, true);
        }
        return;
    }
    for (const UnmapWatch::Range &g : gone_) {
        auto it = by_start_.upper_bound(g.start);
        if (it != by_start_.begin() && std::prev(it)->second->end > g.start) --it;
        while (it != by_start_.end() && it->second->start < g.end) {
            Region *r = (it++)->second;
            ++stats_.invalidated;
            retire(r, true);
        }
    }
}

}  // namespace ptl::verbs
