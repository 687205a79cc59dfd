// A store-then-load handshake (Dekker's) between a side that runs it all the time and a side
// that runs it rarely, across processes: the hot side orders its store and load with a
// compiler barrier only, and the rare side makes every running thread of the hot processes
// execute a full fence with membarrier(2) (MEMBARRIER_CMD_GLOBAL_EXPEDITED). Either the rare
// side then sees the hot side's store, or the hot side's later load sees the rare side's.
// Hot processes must have registered (register_hot_side) before they rely on it.
#pragma once

#include <atomic>

namespace ptl::asymmetric_fence {

// Registers this process for the rare side's fences; false where the kernel has none (the
// hot side must then use a full fence of its own).
bool register_hot_side();
// The rare side's fence; false if membarrier failed (then nothing was fenced but the caller).
bool heavy();

inline void light() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
}

}  // namespace ptl::asymmetric_fence
