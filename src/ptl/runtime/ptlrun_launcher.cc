// The launcher for jobs started by ptlrun on one host: a shared segment with a futex barrier
// and one gather slot per rank (job_segment.h).
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "../wire/os_process.h"
#include "job_segment.h"
#include "launcher.h"

namespace ptl::rt {
namespace {

class PtlrunLauncher final : public Launcher {
public:
    PtlrunLauncher(JobSegment *seg, size_t len, int rank) : seg_(seg), len_(len), rank_(rank) {}
    ~PtlrunLauncher() override { munmap(seg_, len_); }

    const char *name() const override { return "ptlrun"; }
    int rank() const override { return rank_; }
    int size() const override { return int(seg_->size); }

    bool barrier() override {
        const uint32_t gen = seg_->generation.load(std::memory_order_acquire);
        if (seg_->arrived.fetch_add(1) + 1 == seg_->size) {
            seg_->arrived.store(0);
            seg_->generation.fetch_add(1, std::memory_order_release);
            syscall(SYS_futex, &seg_->generation, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
            return true;
        }
        const double deadline = monotonic_seconds() + timeout_seconds();
        while (seg_->generation.load(std::memory_order_acquire) == gen) {
            struct timespec ts {
                0, 50 * 1000 * 1000
            };
            syscall(SYS_futex, &seg_->generation, FUTEX_WAIT, gen, &ts, nullptr, 0);
            if (seg_->generation.load() != gen) break;
            if (monotonic_seconds() > deadline || someone_died()) return false;
        }
        return true;
    }

    bool allgather(const void *in, void *out, size_t len) override {
        if (len > kSlotBytes) return false;
        char *slots = job_slots(seg_);
        std::memcpy(slots + size_t(rank_) * kSlotBytes, in, len);
        if (!barrier()) return false;
        for (uint32_t r = 0; r < seg_->size; ++r)
            std::memcpy(static_cast<char *>(out) + size_t(r) * len, slots + size_t(r) * kSlotBytes, len);
        return barrier();
    }

private:
    bool someone_died() const {
        for (uint32_t r = 0; r < seg_->size; ++r) {
            if (os_process_gone(seg_->os_pids[r].load())) return true;
        }
        return false;
    }

    JobSegment *seg_;
    size_t len_;
    int rank_;
};

}  // namespace

std::unique_ptr<Launcher> open_ptlrun_launcher(std::string &why) {
    const char *name = std::getenv("PTLRT_SHM");
    const char *rank_s = std::getenv("PTLRT_RANK");
    const char *size_s = std::getenv("PTLRT_SIZE");
    if (!name || !rank_s || !size_s) {
        why = "PTLRT_SHM, PTLRT_RANK and PTLRT_SIZE must all be set (start the program with ptlrun)";
        return nullptr;
    }
    const int rank = std::atoi(rank_s);
    const int size = std::atoi(size_s);
    if (size <= 0 || rank < 0 || rank >= size) {
        why = "PTLRT_RANK/PTLRT_SIZE out of range";
        return nullptr;
    }
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        why = std::string("cannot open the job segment ") + name + ": " + std::strerror(errno);
        return nullptr;
    }
    const size_t len = job_segment_bytes(uint32_t(size));
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        why = std::string("cannot map the job segment: ") + std::strerror(errno);
        return nullptr;
    }
    auto *seg = static_cast<JobSegment *>(p);
    if (seg->magic != kJobMagic || int(seg->size) != size) {
        munmap(p, len);
        why = "the job segment does not belong to this job";
        return nullptr;
    }
    seg->os_pids[rank].store(getpid());
    return std::make_unique<PtlrunLauncher>(seg, len, rank);
}

}  // namespace ptl::rt
