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

// Slabs of at most this many descriptors: one append per slab, and a slab returns only
// when all its descriptors did (a kept one holds back the others).
constexpr unsigned kMaxSlab = 16;

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
    count = count ? count : 1;
    slab_ = std::clamp(count / 8, 1u, kMaxSlab);
    const unsigned slabs = (count + slab_ - 1) / slab_;
    count_ = slabs * slab_;
    seg_size_ = seg_size;
    layout_ = layout;
    const size_t align = std::max<size_t>(layout.align, 64);
    stride_ = (layout.lead + seg_size + align - 1) / align * align;
    batch_ = std::max(count_ / 8, slab_);
    if (posix_memalign(reinterpret_cast<void **>(&buf_), align, stride_ * count_)) {
        ucs_error("portals: cannot allocate %u %s receive descriptors of %zu bytes", count_, name, stride_);
        return PTL_NO_SPACE;
    }
    release_desc_.super.cb = release_desc_cb;
    release_desc_.pool = this;
    release_fetched_.super.cb = release_fetched_cb;
    release_fetched_.pool = this;
    for (unsigned i = 0; i < count_; ++i) set_release(body(int(i)), layout_.headroom, &release_desc_.super);
    slabs_.assign(slabs, Slab{});
    for (unsigned s = 0; s < slabs; ++s) freed_.push_back(s);
    return repost();
}

void RxPool::cleanup() {
    for (Slab &s : slabs_)
        if (s.me != PTL_INVALID_HANDLE) PtlMEUnlink(s.me);
    if (catch_all_ != PTL_INVALID_HANDLE) PtlMEUnlink(catch_all_);
    catch_all_ = PTL_INVALID_HANDLE;
    slabs_.clear();
    freed_.clear();
    std::free(buf_);
    buf_ = nullptr;
}

// Appends every freed slab, then a new catch-all, then unlinks the old catch-all: the list
// stays [slabs..., catch-all] at every instant a message may arrive. A slab's ME starts at its
// first body: slot k is body k, and the headroom of each body is in the slot before it, which
// its message never reaches (seg_size); one that does (a peer configured with larger
// segments) spans slots and is still delivered whole.
int RxPool::repost() {
    for (unsigned s : freed_) {
        const int first = int(s * slab_);
        ptl_me_t me = make_me(body(first), size_t(slab_) * stride_,
                              PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTLX_ME_SLOTS | PTL_ME_NO_TRUNCATE, 0,
                              ~ptl_match_bits_t(0));
        me.min_free = stride_;
        Slab &slab = slabs_[s];
        int rc = PtlMEAppend(ni_, pt_, &me, PTL_OVERFLOW_LIST, element(first), &slab.me);
        if (rc != PTL_OK) {
            ucs_error("portals: PtlMEAppend of a receive slab failed: %d", rc);
            return rc;
        }
        slab.taken = 0;
        slab.unreleased = slab_;
        posted_ += slab_;
    }
    freed_.clear();
    ptl_me_t ca = make_me(nullptr, 0, PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL, 0, ~ptl_match_bits_t(0));
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
    const int i = int((static_cast<char *>(ev.start) - buf_) / ptrdiff_t(stride_));
    Slab &slab = slabs_[size_t(i) / slab_];
    // The slots it took (the engine's rule); the ones after the first are free again at once.
    const unsigned slots = unsigned(std::max<size_t>(1, (ev.mlength + stride_ - 1) / stride_));
    slab.taken += slots;
    posted_ -= slots;
    if (slab.taken >= slab_) slab.me = PTL_INVALID_HANDLE;  // it unlinked itself
    if (ev.mlength > seg_size_) {
        // Longer than a descriptor (a sender with larger segments): it covers the headroom of
        // the slot after it, which that slot's message and its handler write. Copied out now,
        // before they do, and all its slots are free again.
        RecvBuf b = alloc_fetched(ev.mlength);
        if (b.data) {
            std::memcpy(b.data, ev.start, ev.mlength);
            if ((slab.unreleased -= slots) == 0) freed_.push_back(unsigned(i) / slab_);
            return b;
        }
        ucs_error("portals: no memory to copy a %zu-byte message out of its receive slots",
                  size_t(ev.mlength));
    }
    slab.unreleased -= slots - 1;
    // The slot's release pointer may be where a longer message before it was.
    set_release(body(i), layout_.headroom, &release_desc_.super);
    RecvBuf b;
    b.data = body(i);
    b.length = ev.mlength;
    b.headroom = layout_.headroom;
    b.pool = this;
    b.index = i;
    return b;
}

void RxPool::release(int index) {
    const unsigned s = unsigned(index) / slab_;
    if (--slabs_[s].unreleased == 0) freed_.push_back(s);
    if (posted_ < batch_ && !freed_.empty()) repost();
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
