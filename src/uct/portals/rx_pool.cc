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

// Descriptors per ME at most: one append serves this many messages.
constexpr unsigned kMaxRun = 16;

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
    // A receiver that is never idle re-posts when fewer than a quarter are posted: one sender
    // may have its TX_WINDOW (64 by default, a quarter of the default 256) in flight, and what
    // the pool lacks then meets the catch-all and is fetched, a round trip per message.
    batch_ = count_ / 4 ? count_ / 4 : 1;
    // Each re-post also swaps the catch-all (two more list operations): idle ones gather a run.
    idle_batch_ = std::min(batch_, kMaxRun);
    if (posix_memalign(reinterpret_cast<void **>(&buf_), align, stride_ * count_)) {
        ucs_error("portals: cannot allocate %u %s receive descriptors of %zu bytes", count_, name, stride_);
        return PTL_NO_SPACE;
    }
    release_desc_.super.cb = release_desc_cb;
    release_desc_.pool = this;
    release_fetched_.super.cb = release_fetched_cb;
    release_fetched_.pool = this;
    for (unsigned i = 0; i < count_; ++i) set_release(body(int(i)), layout_.headroom, &release_desc_.super);
    slots_.assign(count_, Slot::Free);
    runs_.assign(count_, Run{});
    for (unsigned k = count_; k-- > 0;) spare_runs_.push_back(k);
    free_ = count_;
    return repost();
}

void RxPool::cleanup() {
    for (Run &r : runs_)
        if (r.me != PTL_INVALID_HANDLE) PtlMEUnlink(r.me);
    if (catch_all_ != PTL_INVALID_HANDLE) PtlMEUnlink(catch_all_);
    catch_all_ = PTL_INVALID_HANDLE;
    runs_.clear();
    spare_runs_.clear();
    slots_.clear();
    std::free(buf_);
    buf_ = nullptr;
}

// A run's ME starts at its first body: slot k is body first + k, and the headroom of each body
// is in the slot before it. A message longer than seg_size may reach into it within the run
// (it is copied out at once, take), never past the run: the ME ends where the headroom of the
// descriptor after it begins (that one may be kept by a handler meanwhile).
int RxPool::post_run(unsigned first, unsigned len) {
    ptl_me_t me = make_me(body(int(first)), size_t(len) * stride_ - layout_.lead,
                          PTL_ME_OP_PUT | PTL_ME_MANAGE_LOCAL | PTLX_ME_SLOTS | PTL_ME_NO_TRUNCATE, 0,
                          ~ptl_match_bits_t(0));
    me.min_free = stride_;
    Run &r = runs_[spare_runs_.back()];
    const int rc = PtlMEAppend(ni_, pt_, &me, PTL_OVERFLOW_LIST, &r, &r.me);
    if (rc != PTL_OK) {
        ucs_error("portals: PtlMEAppend of %u receive descriptors failed: %d", len, rc);
        return rc;
    }
    spare_runs_.pop_back();
    r.len = len;
    r.taken = 0;
    for (unsigned i = first; i < first + len; ++i) slots_[i] = Slot::Posted;
    posted_ += len;
    free_ -= len;
    return PTL_OK;
}

// Appends every run of free descriptors, then a new catch-all, then unlinks the old
// catch-all: the list stays [runs..., catch-all] at every instant a message may arrive.
int RxPool::repost() {
    for (unsigned i = 0; i < count_ && free_ > 0;) {
        if (slots_[i] != Slot::Free) {
            ++i;
            continue;
        }
        unsigned len = 1;
        while (len < kMaxRun && i + len < count_ && slots_[i + len] == Slot::Free) ++len;
        if (int rc = post_run(i, len); rc != PTL_OK) return rc;
        i += len;
    }
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
    const unsigned i = unsigned((static_cast<char *>(ev.start) - buf_) / ptrdiff_t(stride_));
    // The slots it took (the engine's rule); the ones after the first are free again at once.
    const unsigned slots = unsigned(std::max<size_t>(1, (ev.mlength + stride_ - 1) / stride_));
    Run &r = *static_cast<Run *>(ev.user_ptr);
    r.taken += slots;
    if (r.taken >= r.len) {  // it unlinked itself
        r.me = PTL_INVALID_HANDLE;
        spare_runs_.push_back(unsigned(&r - runs_.data()));
    }
    posted_ -= slots;
    for (unsigned k = i + 1; k < i + slots && k < count_; ++k) slots_[k] = Slot::Free;
    free_ += slots - 1;
    if (ev.mlength > seg_size_) {
        // Longer than a descriptor (a sender with larger segments): it covers the headroom of
        // the slot after it, which that slot's message and its handler write. Copied out now,
        // before they do.
        RecvBuf b = alloc_fetched(ev.mlength);
        if (b.data) {
            std::memcpy(b.data, ev.start, ev.mlength);
            slots_[i] = Slot::Free;
            ++free_;
            return b;
        }
        // Delivered cut to a descriptor: the slots after it are free and may be rewritten.
        ucs_error(
            "portals: no memory to copy a %zu-byte message out of its receive slots; delivering %zu bytes",
            size_t(ev.mlength), seg_size_);
    }
    slots_[i] = Slot::Held;
    // The slot's release pointer may be where a longer message before it was.
    set_release(body(int(i)), layout_.headroom, &release_desc_.super);
    RecvBuf b;
    b.data = body(int(i));
    b.length = std::min<size_t>(ev.mlength, seg_size_);
    b.headroom = layout_.headroom;
    b.pool = this;
    b.index = int(i);
    return b;
}

void RxPool::release(int index) {
    slots_[size_t(index)] = Slot::Free;
    ++free_;
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
