// Receive descriptors of one receive portal. Each descriptor holds one message, with UCT's
// rx_headroom in front so a callback may keep it (UCT_CB_PARAM_FLAG_DESC) and release it later
// with uct_iface_release_desc. All of them are the slots of one permanent ME on the overflow
// list (PTLX_ME_SLOT_POOL, portals4_ext.h): a slot is a descriptor's body, seg_size bytes, and
// the engine puts each message in the slot given to it longest ago. Released descriptors go
// back in batches (PtlXMEGiveSlots), in any order: a descriptor a handler keeps stays out
// meanwhile and holds up no other. The engine takes slots in the order given, so the slot of
// the next message is the front of our own record of that order (no lookup, no division).
// Behind the pool sits a zero-length catch-all ME: a message that finds no slot (or is longer
// than seg_size) is truncated there instead of dropped, and fetched from its sender. Giving
// back is left for a progress call that finds nothing to do (give_back_when_idle), off a
// ping-pong's critical path, unless a batch gathered or the pool runs low.
#pragma once

extern "C" {
#include <portals4.h>
#include <portals4_ext.h>
#include <uct/api/uct.h>
}

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uct_portals {

class RxPool;

// Where a message body sits in a receive buffer: [uct_recv_desc_t* | rx_headroom | body],
// with the body placed so that body + align_offset is a multiple of align (UCT's
// am_alignment/am_align_offset; without them, a cache line). `lead` is the body's offset
// from the start of a buffer aligned to `align`.
struct BufLayout {
    unsigned headroom = 0;
    size_t align = 64;
    size_t lead = 0;
    void init(unsigned rx_headroom, size_t alignment, size_t align_offset);
};

// A received message body: in a descriptor of a pool, or in a buffer fetched from the sender.
struct RecvBuf {
    char *data = nullptr;
    size_t length = 0;
    RxPool *pool = nullptr;  // the pool it belongs to (fetched buffers follow its layout)
    int index = -1;          // the descriptor in `pool`, unless fetched
    unsigned headroom = 0;
    bool fetched = false;   // a heap buffer, freed on release
    bool borrowed = false;  // the user's posted buffer: nothing to release
};

class RxPool {
public:
    int init(ptl_handle_ni_t ni, ptl_pt_index_t pt, unsigned count, size_t seg_size, const BufLayout &layout,
             const char *name);
    void cleanup();

    // Classifies an event's user_ptr.
    bool is_catch_all(const void *user_ptr) const { return user_ptr == this; }
    // The descriptor a PUT event of the pool's ME landed in.
    RecvBuf take(const ptl_event_t &ev);
    // The descriptor may be reused; given back at once when a batch gathered or the pool runs low.
    void release(int index);
    // For a progress call that found nothing to do: gives back what was released meanwhile.
    void give_back_when_idle() {
        if (!returned_.empty()) give_back();
    }
    unsigned posted() const { return posted_; }
    // A heap buffer with the same layout, for a message fetched from its sender.
    RecvBuf alloc_fetched(size_t length);
    // Releases a message body that UCT did not keep.
    static void release_buf(const RecvBuf &b);

private:
    static void release_desc_cb(uct_recv_desc_t *self, void *desc);
    static void release_fetched_cb(uct_recv_desc_t *self, void *desc);
    char *element(unsigned i) const { return buf_ + size_t(i) * stride_; }
    char *body(unsigned i) const { return element(i) + layout_.lead; }
    int give_back();

    struct ReleaseDesc {
        uct_recv_desc_t super;
        RxPool *pool;
    };
    ReleaseDesc release_desc_{}, release_fetched_{};
    BufLayout layout_;

    ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
    ptl_pt_index_t pt_ = 0;
    unsigned count_ = 0, posted_ = 0, batch_ = 1;
    size_t seg_size_ = 0, stride_ = 0;
    char *buf_ = nullptr;
    ptl_handle_me_t me_ = PTL_INVALID_HANDLE, catch_all_ = PTL_INVALID_HANDLE;
    // The descriptors the engine holds, in the order it takes them (a ring of count_).
    std::vector<unsigned> order_;
    unsigned order_head_ = 0;
    std::vector<unsigned> returned_;   // released, not yet given back
    std::vector<ptl_size_t> offsets_;  // give_back's argument, kept to avoid reallocating
};

}  // namespace uct_portals
