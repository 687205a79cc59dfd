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

ptl_me_t slot_me(void *start, size_t length) {
    return make_me(start, length, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL, 0,
                   ~ptl_match_bits_t(0));
}

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
    batch_ = count_ / 8 ? count_ / 8 : 1;
    // Each re-post also swaps the catch-all (two more list operations): idle ones gather a few.
    idle_batch_ = std::min(batch_, 16u);
    if (posix_memalign(reinterpret_cast<void **>(&buf_), align, stride_ * count_)) {
        ucs_error("portals: cannot allocate %u %s receive descriptors of %zu bytes", count_, name, stride_);
        return PTL_NO_SPACE;
    }
    release_desc_.super.cb = release_desc_cb;
    release_desc_.pool = this;
    release_fetched_.super.cb = release_fetched_cb;
    release_fetched_.pool = this;
    mes_.assign(count_, PTL_INVALID_HANDLE);
    for (unsigned i = 0; i < count_; ++i) {
        set_release(body(int(i)), layout_.headroom, &release_desc_.super);
        freed_.push_back(int(i));
    }
    return repost();
}

void RxPool::cleanup() {
    for (ptl_handle_me_t &h : mes_)
        if (h != PTL_INVALID_HANDLE) PtlMEUnlink(h);
    if (catch_all_ != PTL_INVALID_HANDLE) PtlMEUnlink(catch_all_);
    catch_all_ = PTL_INVALID_HANDLE;
    mes_.clear();
    freed_.clear();
    std::free(buf_);
    buf_ = nullptr;
}

// Appends every freed descriptor, then a new catch-all, then unlinks the old catch-all: the
// list stays [descriptors..., catch-all] at every instant a message may arrive.
int RxPool::repost() {
    for (int i : freed_) {
        ptl_me_t me = slot_me(body(i), seg_size_);
        int rc = PtlMEAppend(ni_, pt_, &me, PTL_OVERFLOW_LIST, element(i), &mes_[size_t(i)]);
        if (rc != PTL_OK) {
            ucs_error("portals: PtlMEAppend of a receive descriptor failed: %d", rc);
            return rc;
        }
        ++posted_;
    }
    freed_.clear();
    ptl_me_t ca = slot_me(nullptr, 0);
    ca.options &= ~unsigned(PTL_ME_USE_ONCE);
    ptl_handle_me_t old = catch_all_;
    int rc = PtlMEAppend(ni_, pt_, &ca, PTL_OVERFLOW_LIST, this, &catch_all_);
    if (rc != PTL_OK) {
        ucs_error("portals: PtlMEAppend of the catch-all failed: %d", rc);
        return rc;
    }
    if (old != PTL_INVALID_HANDLE) PtlMEUnlink(old);
    return PTL_OK;
}

RecvBuf RxPool::take(const ptl_event_t &ev) {
    const int i = int((static_cast<char *>(ev.user_ptr) - buf_) / ptrdiff_t(stride_));
    mes_[size_t(i)] = PTL_INVALID_HANDLE;
    --posted_;
    RecvBuf b;
    b.data = body(i);
    b.length = ev.mlength;
    b.headroom = layout_.headroom;
    b.pool = this;
    b.index = i;
    return b;
}

void RxPool::release(int index) {
    freed_.push_back(index);
    if (posted_ < batch_) repost();
}

void RxPool::release_desc_cb(uct_recv_desc_t *self, void *desc) {
    RxPool *p = reinterpret_cast<ReleaseDesc *>(self)->pool;
    const int i = int((static_cast<char *>(desc) - p->buf_) / ptrdiff_t(p->stride_));
    p->release(i);
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
