#include "rx_pool.h"

#include "me.h"

extern "C" {
#include <ucs/debug/log.h>
}

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace uct_portals {

namespace {

// UCT finds the release callback in the pointer just before the descriptor
// (uct_recv_desc()); the descriptor is the start of the headroom.
constexpr size_t kDescPtr = sizeof(uct_recv_desc_t *);

void set_release(char *body, unsigned headroom, uct_recv_desc_t *release) {
    *reinterpret_cast<uct_recv_desc_t **>(body - headroom - kDescPtr) = release;
}

// Released descriptors given back together: one engine call per this many messages.
constexpr unsigned kGiveBatch = 16;

}  // namespace

void BufLayout::init(unsigned rx_headroom, size_t alignment, size_t align_offset) {
    headroom = rx_headroom;
    align = alignment;
    lead = (kDescPtr + headroom + align_offset + align - 1) / align * align - align_offset;
}

int RxPool::init(ptl_handle_ni_t ni, ptl_pt_index_t pt, unsigned count, size_t seg_size,
                 const BufLayout &layout, const char *name) {
    ni_ = ni;
    pt_ = pt;
    count_ = count ? count : 1;
    seg_size_ = seg_size;
    layout_ = layout;
    const size_t align = std::max<size_t>(layout.align, 64);
    stride_ = (layout.lead + seg_size + align - 1) / align * align;
    // A receiver that is never idle gives back at once when fewer than a quarter are with the
    // engine: one sender may have its TX_WINDOW (64 by default, a quarter of the default 256)
    // in flight, and what the pool lacks then meets the catch-all and is fetched, a round trip
    // per message.
    batch_ = count_ / 4 ? count_ / 4 : 1;
    if (posix_memalign(reinterpret_cast<void **>(&buf_), align, stride_ * count_)) {
        ucs_error("portals: cannot allocate %u %s receive descriptors of %zu bytes", count_, name, stride_);
        return PTL_NO_SPACE;
    }
    release_desc_.super.cb = release_desc_cb;
    release_desc_.pool = this;
    release_fetched_.super.cb = release_fetched_cb;
    release_fetched_.pool = this;
    for (unsigned i = 0; i < count_; ++i) set_release(body(i), layout_.headroom, &release_desc_.super);
    order_.assign(count_, 0);
    order_head_ = 0;
    returned_.clear();
    returned_.reserve(count_);
    offsets_.assign(count_, 0);

    // Slot k is body k, seg_size bytes: it ends before the headroom of body k + 1 begins.
    ptl_me_t me = make_me(body(0), size_t(count_ - 1) * stride_ + seg_size_,
                          PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTLX_ME_SLOT_POOL | PTL_ME_NO_TRUNCATE, 0,
                          ~ptl_match_bits_t(0));
    me.min_free = seg_size_;
    int rc = PtlMEAppend(ni_, pt_, &me, PTL_OVERFLOW_LIST, nullptr, &me_);
    if (rc != PTL_OK) {
        ucs_error("portals: PtlMEAppend of %u %s receive descriptors failed: %d", count_, name, rc);
        return rc;
    }
    const ptl_me_t ca = make_me(nullptr, 0, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~ptl_match_bits_t(0));
    rc = PtlMEAppend(ni_, pt_, &ca, PTL_OVERFLOW_LIST, this, &catch_all_);
    if (rc != PTL_OK) {
        ucs_error("portals: PtlMEAppend of the %s catch-all failed: %d", name, rc);
        return rc;
    }
    for (unsigned i = 0; i < count_; ++i) returned_.push_back(i);
    return give_back();
}

void RxPool::cleanup() {
    if (me_ != PTL_INVALID_HANDLE) PtlMEUnlink(me_);
    if (catch_all_ != PTL_INVALID_HANDLE) PtlMEUnlink(catch_all_);
    me_ = catch_all_ = PTL_INVALID_HANDLE;
    order_.clear();
    returned_.clear();
    posted_ = 0;
    std::free(buf_);
    buf_ = nullptr;
}

// The engine takes them after those it holds, in this order: so they join our record of it.
int RxPool::give_back() {
    const unsigned n = unsigned(returned_.size());
    unsigned tail = order_head_ + posted_;
    for (unsigned k = 0; k < n; ++k, ++tail) {
        const unsigned i = returned_[k];
        offsets_[k] = ptl_size_t(i) * stride_;
        order_[tail < count_ ? tail : tail - count_] = i;
    }
    const int rc = PtlXMEGiveSlots(me_, offsets_.data(), n);
    if (rc != PTL_OK) {
        ucs_error("portals: giving %u receive descriptors back failed: %d", n, rc);
        return rc;
    }
    posted_ += n;
    returned_.clear();
    return PTL_OK;
}

RecvBuf RxPool::take(const ptl_event_t &ev) {
    unsigned i = order_[order_head_];
    order_head_ = order_head_ + 1 == count_ ? 0 : order_head_ + 1;
    --posted_;
    if (body(i) != ev.start) [[unlikely]] {
        // Out of step with the engine (not expected): the slot is found by its address.
        ucs_error("portals: receive slot %p, expected %p", ev.start, static_cast<void *>(body(i)));
        i = unsigned((static_cast<char *>(ev.start) - body(0)) / ptrdiff_t(stride_));
    }
    RecvBuf b;
    b.data = body(i);
    b.length = std::min<size_t>(ev.mlength, seg_size_);
    b.headroom = layout_.headroom;
    b.pool = this;
    b.index = int(i);
    return b;
}

void RxPool::release(int index) {
    returned_.push_back(unsigned(index));
    if (returned_.size() >= kGiveBatch || posted_ < batch_) give_back();
}

void RxPool::release_desc_cb(uct_recv_desc_t *self, void *desc) {
    RxPool *p = reinterpret_cast<ReleaseDesc *>(self)->pool;
    const int i = int((static_cast<char *>(desc) - p->buf_) / ptrdiff_t(p->stride_));
    p->release(i);  // a descriptor a handler kept: rare, the division is fine
}

void RxPool::release_fetched_cb(uct_recv_desc_t *self, void *desc) {
    const BufLayout &l = reinterpret_cast<ReleaseDesc *>(self)->pool->layout_;
    std::free(static_cast<char *>(desc) + l.headroom - l.lead);
}

RecvBuf RxPool::alloc_fetched(size_t length) {
    RecvBuf b;
    void *e = nullptr;
    if (posix_memalign(&e, std::max<size_t>(layout_.align, sizeof(void *)),
                       layout_.lead + (length ? length : 1)))
        return b;
    b.data = static_cast<char *>(e) + layout_.lead;
    set_release(b.data, layout_.headroom, &release_fetched_.super);
    b.length = length;
    b.headroom = layout_.headroom;
    b.pool = this;
    b.fetched = true;
    return b;
}

void RxPool::release_buf(const RecvBuf &b) {
    if (!b.data || b.borrowed) return;
    if (b.fetched) {
        release_fetched_cb(&b.pool->release_fetched_.super, b.data - b.headroom);
    } else {
        b.pool->release(b.index);
    }
}

}  // namespace uct_portals
