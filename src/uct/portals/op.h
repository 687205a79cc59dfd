// An operation in flight: its address is the user_ptr of the engine operation it started.
#pragma once

extern "C" {
#include <portals4.h>
#include <uct/api/uct.h>
}

#include <cstddef>
#include <cstdint>

namespace uct_portals {

struct Ep;
struct Peer;

enum class OpType : uint8_t { Put, Get, GetBcopy, AtomicPost, AtomicFetch, Probe, Rndv, Recovery };

// What the engine reads and writes through an op's memory: the operands (read at the call)
// and the old value of a fetching atomic, which the engine's progress thread may write at any
// moment from the call on, even before the call returns. Nothing of ours writes them then.
struct OpEngineWords {
    uint64_t operand = 0, compare = 0, fetched = 0;
};

// The rest of an op, reset each time it is taken.
struct OpState {
    OpType type{};
    Ep *ep = nullptr;  // nullptr once the ep is destroyed (or for a receiver's fetch)
    uct_completion_t *comp = nullptr;
    uint64_t seq = 0;  // order of issue on the ep (flush)
    // get_bcopy
    uct_unpack_callback_t unpack_cb = nullptr;
    void *unpack_arg = nullptr;
    size_t length = 0;
    // fetching atomics: the old value (OpEngineWords::fetched) is copied to result
    void *result = nullptr;
    unsigned result_size = 0;
    bool acked = false;  // a rendezvous' announcement arrived
    // rendezvous: the MEs exposing the data and the announcement (RndvInfo + header)
    ptl_handle_me_t src_me = PTL_INVALID_HANDLE, announce_me = PTL_INVALID_HANDLE;
    char *announcement = nullptr;
    bool cancelled = false;  // rendezvous cancelled while its GET was on its way
    // get_bcopy lands here first
    char *bounce = nullptr;
    // a receiver fetching a message: truncated at its catch-all, or a rendezvous' data
    int64_t rx_id = -1;      // the RxEvent in rx_fifo (Ring id) whose truncated body this fetches
    Peer *window = nullptr;  // a flush probe's peer
    uct_tag_context_t *ctx = nullptr;
    ucs_status_t rndv_status = UCS_OK;
    struct Op *next_free = nullptr;
};

// One operation in flight; its address is the user_ptr of the engine operation.
struct Op : OpEngineWords, OpState {};

}  // namespace uct_portals
