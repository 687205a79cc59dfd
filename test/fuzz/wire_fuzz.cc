// libFuzzer target for what a remote peer controls: the tcp wire's byte stream. Each input
// follows a valid hello and is parsed by the tcp FrameReader, cut where the input's first
// byte says; every frame it delivers goes into a live engine as a received message (puts,
// gets, atomics, responses, garbage) against MEs whose buffers are exact-size heap blocks, so
// AddressSanitizer catches any write outside an ME. Built and run by contrib/fuzz.sh.
#include <portals4.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../src/ptl/engine/engine.h"
#include "../../src/ptl/wire/tcp/tcp_frame.h"
#include "../ptl_descriptors.h"

namespace {

struct Target {
    ptl_handle_ni_t ni{};
    ptl_handle_eq_t eq{};
    ptl_process_t self{};
    std::vector<char *> buffers;
    std::vector<ptl_handle_me_t> entries;

    Target() {
        setenv("PTL_PROGRESS", "manual", 1);  // deterministic: only this thread moves data
        setenv("PTL_WIRE", "shm", 1);         // no listening port; responses loop back to us
        if (PtlInit() != PTL_OK ||
            PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr,
                      &ni) != PTL_OK ||
            PtlGetPhysId(ni, &self) != PTL_OK || PtlEQAlloc(ni, 1024, &eq) != PTL_OK)
            abort();
        for (ptl_pt_index_t pt = 0; pt < 4; ++pt) {
            ptl_pt_index_t got;
            if (PtlPTAlloc(ni, pt == 3 ? PTL_PT_FLOWCTRL : 0, eq, pt, &got) != PTL_OK) abort();
        }
    }

    // Entries of every kind the target path distinguishes, refreshed for each input.
    void append(ptl_pt_index_t pt, size_t len, unsigned opts, ptl_list_t list, uint64_t bits, uint64_t ignore,
                ptl_size_t min_free = 0) {
        char *mem = static_cast<char *>(malloc(len ? len : 1));
        buffers.push_back(mem);
        ptl_me_t me = ptltest::me_desc(mem, len, opts, bits, ignore);
        me.min_free = min_free;
        ptl_handle_me_t h;
        if (PtlMEAppend(ni, pt, &me, list, nullptr, &h) == PTL_OK) entries.push_back(h);
    }

    void setup_entries() {
        const unsigned rw = PTL_ME_OP_PUT | PTL_ME_OP_GET;
        append(0, 64, rw, PTL_PRIORITY_LIST, 0, ~uint64_t(0));
        append(0, 16, rw | PTL_ME_USE_ONCE | PTL_ME_NO_TRUNCATE, PTL_PRIORITY_LIST, 7, 0);
        append(1, 256, rw | PTL_ME_MANAGE_LOCAL, PTL_OVERFLOW_LIST, 0, ~uint64_t(0), 32);
        append(2, 8, PTL_ME_OP_GET, PTL_PRIORITY_LIST, 0, ~uint64_t(0));
        append(3, 0, rw, PTL_PRIORITY_LIST, 1, 0);
    }

    // Everything goes before the next input: entries (use-once ones may be gone already),
    // unexpected headers, queued events; the buffers are freed, so a late write is caught.
    void settle() {
        for (int i = 0; i < 4; ++i) ptl::engine().progress();
        const ptl_me_t any = ptltest::me_desc(nullptr, 0, PTL_ME_OP_PUT | PTL_ME_OP_GET, 0, ~uint64_t(0));
        for (ptl_pt_index_t pt = 0; pt < 4; ++pt) {
            PtlMESearch(ni, pt, &any, PTL_SEARCH_DELETE, nullptr);
        }
        // With their unexpected headers gone every entry unlinks, or went by itself (a consumed
        // use-once ME answers PTL_IN_USE, T14). A buffer must never be freed under a linked
        // entry: the PTs must now be empty, or the harness stops.
        for (ptl_handle_me_t h : entries) PtlMEUnlink(h);
        entries.clear();
        for (ptl_pt_index_t pt = 0; pt < 4; ++pt) {
            ptl_pt_index_t got;
            const int freed = PtlPTFree(ni, pt);
            const int alloc = PtlPTAlloc(ni, pt == 3 ? PTL_PT_FLOWCTRL : 0, eq, pt, &got);
            if (freed != PTL_OK || alloc != PTL_OK) {
                std::fprintf(stderr, "harness: PT %u not reusable: PtlPTFree %d, PtlPTAlloc %d\n", pt, freed,
                             alloc);
                abort();
            }
        }
        ptl_event_t ev;
        for (int rc = PTL_OK; rc == PTL_OK || rc == PTL_EQ_DROPPED;) rc = PtlEQGet(eq, &ev);
        for (char *b : buffers) free(b);
        buffers.clear();
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Target *t = new Target();
    if (size == 0) return 0;
    const size_t cut = size_t(data[0]) * 13 + 1;  // how the stream arrives in reads
    ++data;
    --size;
    t->setup_entries();
    ptl::tcp::FrameReader reader(uint64_t(1) << 20, 4096);
    std::vector<uint8_t> stream(sizeof(ptl::tcp::Hello));
    const ptl::tcp::Hello hello{ptl::tcp::kHelloMagic, ptl::tcp::kVersion, 0, t->self.phys.nid,
                                t->self.phys.pid};
    std::memcpy(stream.data(), &hello, sizeof hello);
    stream.insert(stream.end(), data, data + size);
    const ptl::PeerId from{t->self.phys.nid, t->self.phys.pid};
    const auto deliver = [&](const void *h, size_t hl, const void *p, size_t pl) {
        ptl::engine().inject(ptl::InMessage{from, h, hl, p, pl});
    };
    for (size_t off = 0; off < stream.size();) {
        size_t room;
        char *dst = reader.space(&room);
        if (room == 0) break;
        const size_t n = std::min({room, cut, stream.size() - off});
        std::memcpy(dst, stream.data() + off, n);
        off += n;
        if (!reader.commit(n, deliver)) break;
    }
    t->settle();
    return 0;
}
