// Checked handles (DESIGN decision 3): a 32-bit handle encodes object type, logical NI,
// slot and generation, so a stale or foreign handle is detected, never dereferenced.
// Layout: type[31:29] ni[28:27] slot[26:8] generation[7:0]. The all-ones slot/generation
// pattern is reserved, which makes PTL_EQ_NONE (type 1) and PTL_CT_NONE (type 2) decode
// to "no object" exactly as in the reference header.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace ptl {

enum class ObjType : uint32_t { None = 0, Eq = 1, Ct = 2, Md = 3, Le = 4, Me = 5, Ni = 6, Bad = 7 };

struct HandleParts {
    ObjType type;
    uint32_t ni;
    uint32_t slot;
    uint32_t gen;
};

constexpr uint32_t kSlotBits = 19;
constexpr uint32_t kMaxSlots = (1u << kSlotBits) - 1;  // the last slot is reserved
constexpr uint32_t kGenMask = 0xff;

constexpr uint32_t make_handle(ObjType t, uint32_t ni, uint32_t slot, uint32_t gen) {
    return (static_cast<uint32_t>(t) << 29) | ((ni & 3u) << 27) | ((slot & kMaxSlots) << 8) |
           (gen & kGenMask);
}

constexpr HandleParts split_handle(uint32_t h) {
    return {static_cast<ObjType>(h >> 29), (h >> 27) & 3u, (h >> 8) & kMaxSlots, h & kGenMask};
}

// Objects of one type on one NI. Slots are reused with a bumped generation, so the handle of
// a freed object stays invalid until its slot has been reused 256 times.
template <typename T>
class SlotTable {
public:
    explicit SlotTable(uint32_t capacity = kMaxSlots) : capacity_(capacity) {}

    // Returns the slot, or UINT32_MAX when the table is at capacity.
    uint32_t insert(std::unique_ptr<T> obj) {
        uint32_t slot;
        if (!free_.empty()) {
            slot = free_.back();
            free_.pop_back();
        } else {
            if (slots_.size() >= capacity_ || slots_.size() >= kMaxSlots) return UINT32_MAX;
            slot = static_cast<uint32_t>(slots_.size());
            slots_.push_back({});
        }
        slots_[slot].obj = std::move(obj);
        ++live_;
        return slot;
    }

    uint32_t gen(uint32_t slot) const { return slots_[slot].gen; }

    T *get(uint32_t slot, uint32_t gen) const {
        if (slot >= slots_.size()) return nullptr;
        const Slot &s = slots_[slot];
        if (!s.obj || s.gen != gen) return nullptr;
        return s.obj.get();
    }

    // A fresh object, from the spares of removed ones when there are (entries come and go
    // with every message on a use-once receive buffer; the allocator showed in profiles).
    std::unique_ptr<T> make() {
        if (spare_.empty()) return std::make_unique<T>();
        std::unique_ptr<T> obj = std::move(spare_.back());
        spare_.pop_back();
        *obj = T{};
        return obj;
    }
    // Removes the object and keeps it as a spare for make().
    void recycle(uint32_t slot) {
        std::unique_ptr<T> obj = remove(slot);
        if (obj && spare_.size() < kMaxSpares) spare_.push_back(std::move(obj));
    }

    std::unique_ptr<T> remove(uint32_t slot) {
        Slot &s = slots_[slot];
        std::unique_ptr<T> obj = std::move(s.obj);
        s.gen = (s.gen + 1) & kGenMask;
        if (s.gen == kGenMask) s.gen = 0;  // keep the reserved pattern unreachable
        free_.push_back(slot);
        --live_;
        return obj;
    }

    uint32_t live() const { return live_; }
    void set_capacity(uint32_t c) { capacity_ = c; }

    template <typename F>
    void for_each(F &&f) {
        for (auto &s : slots_)
            if (s.obj) f(*s.obj);
    }

private:
    struct Slot {
        uint32_t gen = 0;
        std::unique_ptr<T> obj;
    };
    static constexpr size_t kMaxSpares = 256;
    std::vector<Slot> slots_;
    std::vector<uint32_t> free_;
    std::vector<std::unique_ptr<T>> spare_;
    uint32_t capacity_;
    uint32_t live_ = 0;
};

}  // namespace ptl
