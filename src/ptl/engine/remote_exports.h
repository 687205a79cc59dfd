// The direct path over RDMA (DESIGN decision 9, issue 32): list entries a process lets peers
// on other hosts reach by RDMA read and write, without its CPU; the shm wire's shared table
// (direct_exports.h) has no equivalent across hosts, so the exports travel as messages.
//
// Protocol. Every peer whose connection the wire accepts (a holder: it may reach us) is sent
// one kExportInfo per exported entry then, and another for each later export. Until the
// information arrives, its operations take the message path. An entry that counts on a CT
// names a counter word the owner registered for device atomics: initiators add to it by
// fetch-and-add right behind their data. To revoke, the owner sends kRevoke to every holder
// and waits, bounded by PTL_DIRECT_REVOKE_MS, for each kRevoked: a holder answers
// after dropping the entry, on the connection its own RDMA operations take, so the answer
// arrives behind every operation it had in flight. Then the owner deregisters the memory, after
// which no access can land. A holder too slow to answer in time meets a bad key on its next
// operation there, which costs it the connection (the wire reports the peer failed). Closing an
// NI does not wait: nothing may reach a closed NI, and its holders are usually closing too.
// An engine closing its RDMA side sends kReleased to every holder: from then on it reaches
// none of their memory, so their revocations need not wait for it (a peer that has exited
// answers nothing, and the wait would last until the wire declared it dead).
//
// Atomics: where the device does atomics, an entry's memory is registered for them too and
// its kExportInfo says so; holders then apply 8-byte integer sums, differences and
// compare-and-swaps with device atomics, and the owner applies every other 8-byte atomic there
// through the device as well (its own, its host's peers', and what arrives as messages), since
// device atomics are atomic only with each other. Smaller ones stay with the owner's CPU.
//
// Ordering: an initiator goes direct only while the wire says the target's engine has handled
// every message it sent there (Wire::remote_access refuses otherwise), and RC keeps RDMA operations in order
// with the messages around them (and each count with its data).
#pragma once

#include <portals4.h>

#include <cstdint>
#include <unordered_map>

#include "../wire/wire.h"
#include "direct_exports.h"

namespace ptl {
struct Entry;
}

namespace ptl::direct {

// Owner side: one exported entry, by slot.
struct RemoteExport {
    Entry *entry = nullptr;  // null: the slot is free
    uint64_t handle = 0;     // the wire's registration
    uint64_t key = 0;
    uint32_t gen = 0;
    bool device_atomics = false;  // registered for them: 8-byte atomics there go through the device
};

// A kExportInfo's payload: where initiators add their counts when the entry counts on a CT,
// and whether they may apply atomics there with the device.
struct RemoteExportInfo {
    uint64_t addr = 0;  // 0: the entry counts nothing
    uint64_t key = 0;
    uint32_t count_bytes = 0;  // PTL_LE_EVENT_CT_BYTES: add bytes, not operations
    uint32_t device_atomics = 0;
};

// Initiator side: one entry a peer exported to us.
struct RemoteTarget {
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t key = 0;
    uint32_t options = 0;
    uint32_t uid = 0;
    RemoteExportInfo info;
};

struct RemotePeer {
    std::unordered_map<EntryKey, RemoteTarget, EntryKeyHash> by_key;
    std::unordered_map<uint32_t, EntryKey> by_slot;
    // The last key looked for and not found: messages to one region the peer does not export
    // (UCT's active messages, a peer whose other regions are exported) cost no hash lookup.
    // Only an export makes it stale; a revocation cannot.
    EntryKey missed{~0u, 0};
};

// A one-sided operation in flight, named by its wire cookie.
struct RemoteOpRef {
    uint64_t op_id = 0;  // in its NI's pending table
    uint64_t length = 0;
    uint64_t offset = 0;
    PeerId peer{};
    uint8_t ni = 0;
    uint8_t op = 0;  // proto::Op: what the target's response would have been
    bool live = false;
};

}  // namespace ptl::direct
