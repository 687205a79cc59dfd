#include "asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ptl::asymmetric_fence {

namespace {

long membarrier(int cmd) {
    return syscall(__NR_membarrier, cmd, 0, 0);
}

bool register_for(int fence, int registration) {
    const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
    return cmds > 0 && (cmds & fence) && membarrier(registration) == 0;
}

}  // namespace

bool register_hot_side() {
    return register_for(MEMBARRIER_CMD_GLOBAL_EXPEDITED, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
}

bool heavy() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

}  // namespace ptl::asymmetric_fence
