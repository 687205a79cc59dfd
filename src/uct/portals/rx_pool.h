// Receive descriptors of one receive portal. Each descriptor is a use-once ME on the overflow
// list holding one message, with UCT's rx_headroom in front so a callback may keep it
// (UCT_CB_PARAM_FLAG_DESC) and release it later with uct_iface_release_desc. Behind the
// descriptors sits a zero-length catch-all ME: a message that finds no free descriptor is
// truncated there instead of dropped, and fetched from its sender. Released descriptors go
// back in batches, followed by a fresh catch-all before the old one is unlinked, so the list
// always ends with a catch-all and descriptors are never stranded behind it.
#pragma once

extern "C" {
#include <portals4.h>
#include <uct/api/uct.h>
}

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uct_portals {

class RxPool;

// A received message body: in a descriptor of a pool, or in a buffer fetched from the sender.
struct RecvBuf {
    char *data = nullptr;
    size_t length = 0;
    RxPool *pool = nullptr;  // null: a fetched buffer (freed on release)
    int index = -1;          // the descriptor in `pool`
    unsigned headroom = 0;
    bool borrowed = false;  // the user's posted buffer: nothing to release
};

class RxPool {
public:
    int init(ptl_handle_ni_t ni, ptl_pt_index_t pt, unsigned count, size_t seg_size, unsigned headroom,
             const char *name);
    void cleanup();

    // Classifies an event's user_ptr.
    bool is_catch_all(const void *user_ptr) const { return user_ptr == this; }
    bool owns(const void *user_ptr) const {
        return user_ptr >= buf_ && user_ptr < buf_ + size_t(count_) * stride_;
    }
    // The descriptor a PUT event landed in (the ME's user_ptr is its element).
    RecvBuf take(const ptl_event_t &ev);
    // The descriptor may be reused; re-posts in batches.
    void release(int index);
    unsigned posted() const { return posted_; }
    unsigned headroom() const { return headroom_; }

    // A malloc'd buffer with the same layout, for a message fetched from its sender.
    static RecvBuf alloc_fetched(size_t length, unsigned headroom);
    // Releases a message body that UCT did not keep.
    static void release_buf(const RecvBuf &b);

private:
    static void release_desc_cb(uct_recv_desc_t *self, void *desc);
    char *element(int i) const { return buf_ + size_t(i) * stride_; }
    int repost();

    struct ReleaseDesc {
        uct_recv_desc_t super;
        RxPool *pool;
    };
    ReleaseDesc release_desc_{};
    ptl_handle_ni_t ni_ = PTL_INVALID_HANDLE;
    ptl_pt_index_t pt_ = 0;
    unsigned count_ = 0, headroom_ = 0, posted_ = 0, batch_ = 1;
    size_t seg_size_ = 0, stride_ = 0;
    char *buf_ = nullptr;
    std::vector<ptl_handle_me_t> mes_;
    std::vector<int> freed_;
    ptl_handle_me_t catch_all_ = PTL_INVALID_HANDLE;
};

}  // namespace uct_portals
