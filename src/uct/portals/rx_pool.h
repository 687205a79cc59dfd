// Receive descriptors of one receive portal. Each descriptor holds one message, with UCT's
// rx_headroom in front so a callback may keep it (UCT_CB_PARAM_FLAG_DESC) and release it later
// with uct_iface_release_desc. Free descriptors next to each other go to the engine together,
// up to 16 at a time, as one locally managed ME on the overflow list whose slots they are
// (PTLX_ME_SLOTS): each message starts a descriptor of its own, and the ME unlinks by itself
// once its last slot is taken, so there is one PtlMEAppend per run of descriptors rather
// than per message. A descriptor a handler keeps only splits the runs around it. Behind the
// runs sits a zero-length catch-all ME: a message that finds no free descriptor is truncated
// there instead of dropped, and fetched from its sender. Runs go back followed by a fresh
// catch-all before the old one is unlinked, so the list always ends with a catch-all and
// descriptors are never stranded behind it. The re-post is left for a progress call that finds
// nothing to do (repost_when_idle), off a ping-pong's critical path, unless the pool runs low.
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
    // The descriptor a PUT event landed in (the ME's user_ptr is its Run).
    RecvBuf take(const ptl_event_t &ev);
    // The descriptor may be reused; re-posts at once only when the pool runs low.
    void release(int index);
    // For a progress call that found nothing to do: re-posts what was released meanwhile,
    // once there is a run's worth.
    void repost_when_idle() {
        if (free_ >= idle_batch_) repost();
    }
    unsigned posted() const { return posted_; }
    // A heap buffer with the same layout, for a message fetched from its sender.
    RecvBuf alloc_fetched(size_t length);
    // Releases a message body that UCT did not keep.
    static void release_buf(const RecvBuf &b);

private:
    static void release_desc_cb(uct_recv_desc_t *self, void *desc);
    static void release_fetched_cb(uct_recv_desc_t *self, void *desc);
    char *element(int i) const { return buf_ + size_t(i) * stride_; }
    char *body(int i) const { return element(i) + layout_.lead; }
    int repost();

    struct ReleaseDesc {
        uct_recv_desc_t super;
        RxPool *pool;
    };
    ReleaseDesc release_desc_{}, release_fetched_{};
    BufLayout layout_;
    enum class Slot : uint8_t { Free, Posted, Held };
    // An ME over descriptors [first, first + len): `taken` of its slots were consumed; it
    // unlinks itself when all were. A record per ME, not per first descriptor: a run may start
    // where one still linked began (its first message was released before the rest came).
    struct Run {
        ptl_handle_me_t me = PTL_INVALID_HANDLE;
        unsigned len = 0, taken = 0;
    };
    int post_run(unsigned first, unsigned len);

    ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
    ptl_pt_index_t pt_ = 0;
    unsigned count_ = 0, posted_ = 0, free_ = 0, batch_ = 1, idle_batch_ = 1;
    size_t seg_size_ = 0, stride_ = 0;
    char *buf_ = nullptr;
    std::vector<Slot> slots_;
    std::vector<Run> runs_;             // count_ records: never more MEs than descriptors
    std::vector<unsigned> spare_runs_;  // records of no ME
    ptl_handle_me_t catch_all_ = PTL_INVALID_HANDLE;
};

}  // namespace uct_portals
