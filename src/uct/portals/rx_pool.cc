#include "rx_pool.h"

#include "me.h"

extern "C" {
#include <ucs/debug/log.h>
}

#include <cstdlib>
#include <cstring>

namespace uct_portals {

namespace {

// An element: [uct_recv_desc_t* | rx_headroom | body]. UCT finds the release callback in
// the pointer just before the descriptor (uct_recv_desc()).
constexpr size_t kDescPtr = sizeof(uct_recv_desc_t *);

void fetched_release_cb(uct_recv_desc_t *, void *desc) {
    std::free(static_cast<char *>(desc) - kDescPtr);
}
uct_recv_desc_t fetched_release = {fetched_release_cb};

ptl_me_t slot_me(void *start, size_t length) {
    return make_me(start, length, PTL_ME_OP_PUT | PTL_ME_USE_ONCE | PTL_ME_MANAGE_LOCAL, 0,
                   ~ptl_match_bits_t(0));
}

}  // namespace

int RxPool::init(ptl_handle_ni_t ni, ptl_pt_index_t pt, unsigned count, size_t seg_size, unsigned headroom,
                 const char *name) {
    ni_ = ni;
    pt_ = pt;
    count_ = count ? count : 1;
    seg_size_ = seg_size;
    headroom_ = headroom;
    stride_ = (kDescPtr + headroom + seg_size + 63) & ~size_t(63);
    batch_ = count_ / 8 ? count_ / 8 : 1;
    if (posix_memalign(reinterpret_cast<void **>(&buf_), 64, stride_ * count_)) {
        ucs_error("portals: cannot allocate %u %s receive descriptors of %zu bytes", count_, name, stride_);
        return PTL_NO_SPACE;
    }
    release_desc_.super.cb = release_desc_cb;
    release_desc_.pool = this;
    mes_.assign(count_, PTL_INVALID_HANDLE);
    for (unsigned i = 0; i < count_; ++i) {
        *reinterpret_cast<uct_recv_desc_t **>(element(int(i))) = &release_desc_.super;
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
        char *body = element(i) + kDescPtr + headroom_;
        ptl_me_t me = slot_me(body, seg_size_);
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
    b.data = element(i) + kDescPtr + headroom_;
    b.length = ev.mlength;
    b.headroom = headroom_;
    b.pool = this;
    b.index = i;
    return b;
}

void RxPool::release(int index) {
    freed_.push_back(index);
    if (freed_.size() >= batch_ || posted_ < batch_) repost();
}

void RxPool::release_desc_cb(uct_recv_desc_t *self, void *desc) {
    RxPool *p = reinterpret_cast<ReleaseDesc *>(self)->pool;
    const int i = int((static_cast<char *>(desc) - kDescPtr - p->buf_) / ptrdiff_t(p->stride_));
    p->release(i);
}

RecvBuf RxPool::alloc_fetched(size_t length, unsigned headroom) {
    RecvBuf b;
    char *e = static_cast<char *>(std::malloc(kDescPtr + headroom + (length ? length : 1)));
    if (!e) return b;
    *reinterpret_cast<uct_recv_desc_t **>(e) = &fetched_release;
    b.data = e + kDescPtr + headroom;
    b.length = length;
    b.headroom = headroom;
    return b;
}

void RxPool::release_buf(const RecvBuf &b) {
    if (!b.data || b.borrowed) return;
    if (b.pool) {
        b.pool->release(b.index);
    } else {
        std::free(b.data - b.headroom - kDescPtr);
    }
}

}  // namespace uct_portals
