// The operations an NI has in flight as an initiator, keyed by the id their responses echo.
// A slot array rather than a hash map: every acknowledged put adds and removes one, and the
// map's node allocation and hashing showed in the per-message profile. The id carries the
// slot and that slot's generation, so a stale or forged response finds nothing.
#pragma once

#include <portals4.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../wire/wire.h"

namespace ptl {

// An operation whose response (ACK, REPLY or rendezvous completion) is still due.
struct PendingOp {
    uint8_t op;  // proto::Op
    ptl_handle_md_t put_md;
    ptl_handle_md_t get_md;
    ptl_size_t local_get_offset;
    ptl_size_t length;
    void *user_ptr;
    PeerId peer;
    ptl_ack_req_t ack_req;
    bool send_due;       // rendezvous put: SEND waits until the target pulled the data
    bool reply_due;      // get/fetch/swap
    uint64_t export_id;  // the wire's hold on our memory for the target's bulk transfer
    // A volatile put's copy that the target's bulk transfer reads (new[]; freed with export_id).
    char *bounce;
};

class PendingTable {
public:
    // Stores `op`; returns the id its response will carry (never 0).
    uint64_t add(const PendingOp &op) {
        uint32_t slot;
        if (!free_.empty()) {
            slot = free_.back();
            free_.pop_back();
        } else {
            slot = uint32_t(slots_.size());
            slots_.push_back({});
        }
        Slot &s = slots_[slot];
        if (++s.gen == 0) s.gen = 1;  // ids are never 0
        s.live = true;
        s.issued = next_issue_++;
        s.op = op;
        ++live_;
        return uint64_t(s.gen) << 32 | slot;
    }

    // Removes the operation `id` names into `out`; false if there is none (a stale id).
    bool take(uint64_t id, PendingOp *out) {
        return take_if(id, out, [](const PendingOp &) { return true; });
    }

    // As take, for a response: only the peer the operation went to may answer it, so a
    // response from any other process (a guessed id) leaves the operation waiting.
    bool take_response(uint64_t id, PeerId from, PendingOp *out) {
        return take_if(id, out, [from](const PendingOp &op) { return op.peer == from; });
    }

    bool empty() const { return live_ == 0; }

    // The ids of the operations `pred` selects, oldest first.
    template <typename Pred>
    std::vector<uint64_t> select(Pred &&pred) const {
        std::vector<std::pair<uint64_t, uint64_t>> hits;  // (issued, id)
        for (uint32_t i = 0; i < slots_.size(); ++i) {
            const Slot &s = slots_[i];
            if (s.live && pred(s.op)) hits.push_back({s.issued, uint64_t(s.gen) << 32 | i});
        }
        std::sort(hits.begin(), hits.end());
        std::vector<uint64_t> ids;
        for (auto &h : hits) ids.push_back(h.second);
        return ids;
    }

private:
    template <typename Accept>
    bool take_if(uint64_t id, PendingOp *out, Accept &&accept) {
        const uint32_t slot = uint32_t(id), gen = uint32_t(id >> 32);
        if (slot >= slots_.size() || !slots_[slot].live || slots_[slot].gen != gen) return false;
        Slot &s = slots_[slot];
        if (!accept(s.op)) return false;
        *out = s.op;
        s.live = false;
        free_.push_back(slot);
        --live_;
        return true;
    }

    struct Slot {
        uint32_t gen = 0;
        bool live = false;
        uint64_t issued = 0;  // issue order, for failing operations oldest first
        PendingOp op{};
    };
    std::vector<Slot> slots_;
    std::vector<uint32_t> free_;
    uint64_t next_issue_ = 0;
    uint32_t live_ = 0;
};

}  // namespace ptl
