// Portal table entry (§3.7): priority and overflow lists, the hidden unexpected list, its EQ
// and its enabled state. Matching keeps posting order across exact and wildcard entries
// while finding exact-match entries in O(1) (DESIGN decision 4): entries without ignore bits
// live in per-match-bits FIFOs, the rest in one FIFO, and the lower sequence number wins.
#pragma once

#include <portals4.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "entry.h"
#include "ilist.h"

namespace ptl {

struct Eq;

using EntryList = IList<Entry, &Entry::hook>;
using UhList = IList<UnexpectedHeader, &UnexpectedHeader::all_hook>;
using UhBucket = IList<UnexpectedHeader, &UnexpectedHeader::bucket_hook>;

// The bucket of `bits` in a map of lists by match bits, made if missing, from a kept node
// when there is one. A bucket that empties stays in the map (drop_empty_buckets_if_many):
// the next entry with those bits (a ping-pong's next receive has its tag) finds it with one
// lookup, and an unlink touches no map at all (append + unlink of such an entry: 1,150
// instructions with a map node made and freed per message, 1,088 with nodes kept, before
// buckets stayed).
template <typename Map>
typename Map::mapped_type &bucket_of(Map &map, std::vector<typename Map::node_type> &spare,
                                     ptl_match_bits_t bits) {
    auto it = map.find(bits);
    if (it != map.end()) return it->second;
    if (spare.empty()) return map[bits];
    typename Map::node_type node = std::move(spare.back());
    spare.pop_back();
    node.key() = bits;
    return map.insert(std::move(node)).position->second;
}

// After an unlink: once the empty buckets outnumber the `live` ones' elements by
// kKeptEmptyBuckets, drops them all, keeping their nodes for bucket_of. Most exact entries
// have match bits of their own (a rendezvous' key) and live for one message: a sweep per
// kKeptEmptyBuckets of them costs about what dropping each bucket at its unlink did, and
// the map stays within 2 x live + kKeptEmptyBuckets buckets.
constexpr size_t kKeptEmptyBuckets = 64;
template <typename Map>
void drop_empty_buckets_if_many(Map &map, std::vector<typename Map::node_type> &spare, size_t live) {
    if (map.size() <= 2 * live + kKeptEmptyBuckets) [[likely]]
        return;
    for (auto it = map.begin(); it != map.end();) {
        auto here = it++;
        if (!here->second.empty()) continue;
        if (spare.size() < kKeptEmptyBuckets)
            spare.push_back(map.extract(here));
        else
            map.erase(here);
    }
}

// One list (priority or overflow) of one PT.
struct MatchList {
    using ExactMap = std::unordered_map<ptl_match_bits_t, EntryList>;
    EntryList wildcard;
    ExactMap exact;
    std::vector<ExactMap::node_type> spare;  // see bucket_of
    uint32_t size = 0;
    uint32_t exact_size = 0;  // entries in `exact`, whose buckets may be empty

    void add(Entry *e);
    void remove(Entry *e);

    // The first entry in posting order for which `accept` is true, considering only entries
    // that could match `bits`.
    template <typename Accept>
    Entry *find(ptl_match_bits_t bits, Accept &&accept) {
        Entry *best = nullptr;
        if (exact_size) {
            auto it = exact.find(bits);
            if (it != exact.end())
                for (Entry *e = it->second.front(); e; e = it->second.next(e))
                    if (accept(e)) {
                        best = e;
                        break;
                    }
        }
        for (Entry *e = wildcard.front(); e; e = wildcard.next(e)) {
            if (best && e->seq > best->seq) break;
            if (accept(e)) return e;
        }
        return best;
    }
};

// Unexpected headers in arrival order, also bucketed by match bits for exact appends.
struct UnexpectedList {
    using BucketMap = std::unordered_map<ptl_match_bits_t, UhBucket>;
    UhList all;
    BucketMap by_bits;
    std::vector<BucketMap::node_type> spare;  // see bucket_of
    uint32_t size = 0;

    void add(UnexpectedHeader *u);
    void remove(UnexpectedHeader *u);
};

struct Pt {
    bool allocated = false;
    bool enabled = false;
    unsigned options = 0;
    Eq *eq = nullptr;
    MatchList lists[2];  // PTL_PRIORITY_LIST, PTL_OVERFLOW_LIST
    UnexpectedList unexpected;
    uint32_t busy = 0;            // operations being delivered (PtlPTDisable waits for them)
    uint32_t exports = 0;         // entries peers reach directly (direct.cc)
    uint64_t unlink_read_ns = 0;  // when the application last read an AUTO_UNLINK of this portal

    uint32_t entries() const { return lists[0].size + lists[1].size; }
};

}  // namespace ptl
