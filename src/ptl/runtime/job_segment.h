// The shared segment ptlrun creates for one job: a barrier and a gather area.
#pragma once

#include <atomic>
#include <cstdint>

namespace ptl::rt {

constexpr size_t kSlotBytes = 256;
constexpr uint64_t kJobMagic = 0x50544c52554e4a42ull;

struct JobSegment {
    uint64_t magic;
    uint32_t size;
    alignas(64) std::atomic<uint32_t> arrived;
    alignas(64) std::atomic<uint32_t> generation;
    alignas(64) std::atomic<int32_t> os_pids[1];  // size entries follow; then the slots
};

inline size_t job_segment_bytes(uint32_t size) {
    return sizeof(JobSegment) + size * sizeof(std::atomic<int32_t>) + 64 + size_t(size) * kSlotBytes;
}
inline char *job_slots(JobSegment *s) {
    auto p = reinterpret_cast<uintptr_t>(&s->os_pids[s->size]);
    return reinterpret_cast<char *>((p + 63) & ~uintptr_t(63));
}

}  // namespace ptl::rt
