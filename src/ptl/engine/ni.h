// A logical network interface (§3.6): its portal table, objects, map, status registers and
// the operations it has in flight as an initiator.
#pragma once

#include <portals4.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "../wire/wire.h"
#include "ct.h"
#include "entry.h"
#include "eq.h"
#include "handle.h"
#include "md.h"
#include "pending_table.h"
#include "pt.h"

namespace ptl {

class Engine;

class Ni {
public:
    Ni(Engine *e, uint32_t index, unsigned options, const ptl_ni_limits_t &limits);
    ~Ni();

    Engine *engine;
    uint32_t index;
    unsigned options;
    uint32_t handle;
    uint32_t refs = 1;
    ptl_ni_limits_t limits;
    bool matching() const { return options & PTL_NI_MATCHING; }
    bool logical() const { return options & PTL_NI_LOGICAL; }

    std::vector<Pt> pts;
    SlotTable<Md> mds;
    SlotTable<Entry> entries;
    SlotTable<Eq> eqs;
    SlotTable<Ct> cts;
    std::vector<ptl_process_t> map;
    bool map_set = false;
    ptl_rank_t self_rank = PTL_RANK_ANY;  // ours in map, found once by set_map (every put carries it)
    bool notify_drops = false;  // PtlXNINotifyDrops: drops answered with PTL_NI_DROPPED (X3)
    std::atomic<ptl_sr_value_t> sr[PTL_SR_LAST] = {};
    uint64_t next_seq = 1;
    PendingTable pending;
    uint32_t triggered = 0;
    uint32_t unexpected = 0;  // headers held across all PTs (max_unexpected_headers)
    uint32_t bundle_depth = 0;
    std::vector<Entry *> zombies;  // auto-unlinked entries freed at the next append

    // Inline: every data operation and poll looks one up (an out-of-line chain of three
    // calls was ~40 instructions in the per-message profile).
    Md *md(ptl_handle_md_t h) const { return lookup(mds, ObjType::Md, h); }
    Entry *entry(uint32_t h, bool me) const { return lookup(entries, me ? ObjType::Me : ObjType::Le, h); }
    Eq *eq(ptl_handle_eq_t h) const { return lookup(eqs, ObjType::Eq, h); }
    Ct *ct(ptl_handle_ct_t h) const { return lookup(cts, ObjType::Ct, h); }

    void count(ptl_sr_index_t r, int amount = 1) { sr[r].fetch_add(amount, std::memory_order_relaxed); }
    template <typename T>
    T *lookup(const SlotTable<T> &table, ObjType type, uint32_t h) const {
        const HandleParts p = split_handle(h);
        if (p.type != type || p.ni != index) return nullptr;
        return table.get(p.slot, p.gen);
    }
    // The (nid, pid) of a target: through the map on logical NIs (LA2).
    bool resolve(ptl_process_t target, PeerId *out) const {
        if (!logical()) {
            *out = {target.phys.nid, target.phys.pid};
            return true;
        }
        if (target.rank >= map.size()) return false;
        *out = {map[target.rank].phys.nid, map[target.rank].phys.pid};
        return true;
    }
    // The rank of a physical peer through our map, for events and match_id on logical NIs.
    ptl_rank_t rank_of(PeerId p) const;
};

}  // namespace ptl
