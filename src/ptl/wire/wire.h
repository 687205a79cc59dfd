// The wire contract (DESIGN decision 5): a wire moves messages reliably and in order per
// peer, each a fixed header plus inline payload, and moves bulk data between two processes'
// memory where it can. The engine never knows which wire it is on.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace ptl {

struct PeerId {
    uint32_t nid = 0;
    uint32_t pid = 0;
    bool operator==(const PeerId &) const = default;
};

struct PeerIdHash {
    size_t operator()(const PeerId &p) const {
        return (uint64_t(p.nid) << 32 | p.pid) * 0x9e3779b97f4a7c15ull >> 16;
    }
};

class Wire;

// A received message: the header bytes and payload stay valid during the callback only.
struct InMessage {
    PeerId from;
    const void *header;
    size_t header_len;
    const void *payload;
    size_t payload_len;
    // The wire it came through: bulk transfers a message asks for (rendezvous pulls, replies
    // written into the initiator) go through this one only. `from` is what the sender claims;
    // over tcp it could claim to be us, and the loopback wire's bulk path would then write
    // into our own memory wherever the message says. Null: no bulk (injected input).
    Wire *via = nullptr;
    // Non-null while the sender is still writing the payload (the shm wire streams large
    // ones): how many of its bytes are in. Read it only through arriving.h.
    const std::atomic<uint32_t> *arriving = nullptr;
};

using MessageHandler = std::function<void(const InMessage &)>;

class Wire {
public:
    virtual ~Wire() = default;

    // Queues a message; never blocks. Returns false only when the peer cannot be reached.
    virtual bool send(PeerId to, const void *header, size_t header_len, const struct iovec *payload,
                      int payload_count) = 0;

    // As send, for a message no one waits on at once (an acknowledgement): a wire whose every
    // send is a system call may hold it until the next send to the peer, which carries both,
    // or until the next progress, whichever comes first.
    virtual bool send_deferrable(PeerId to, const void *header, size_t header_len,
                                 const struct iovec *payload, int payload_count) {
        return send(to, header, header_len, payload, payload_count);
    }

    // Largest header + payload the wire carries in one message to `to` (connecting to it
    // first where the answer is the peer's: a shared-memory peer's ring may be smaller).
    virtual size_t max_inline(PeerId to) = 0;
    // The same for messages from `from` to us (a get's inline reply).
    virtual size_t max_inline_from(PeerId from) { return max_inline(from); }

    // Delivers received messages to `handler` and pushes queued sends; returns work done.
    virtual int progress(const MessageHandler &handler) = 0;

    // Bulk data between our memory and the peer's: reads pull from `remote`, writes push into
    // it, `remote_keys` (one per remote piece) being what the peer's export_memory gave.
    // Returns false if the peer is gone or an address is bad. Only when `has_bulk()`.
    virtual bool has_bulk(PeerId) const { return false; }
    virtual bool bulk_read(PeerId, const struct iovec *, int, const struct iovec *, int, const uint64_t *) {
        return false;
    }
    virtual bool bulk_write(PeerId, const struct iovec *, int, const struct iovec *, int, const uint64_t *) {
        return false;
    }
    // The same transfer without waiting for it, where the wire can (a device moves the data):
    // true if it started; then a later progress reports it to the BulkDone callback, once,
    // with `cookie` and whether every byte moved. Our pieces must stay valid until then. The
    // transfer fails by itself past the wire's deadline (or with its peer), so it always ends.
    using BulkDone = std::function<void(uint64_t cookie, bool ok)>;
    virtual bool bulk_async() const { return false; }
    virtual bool bulk_start(PeerId, bool /*read*/, const struct iovec *, int, const struct iovec *, int,
                            const uint64_t *, uint64_t /*cookie*/) {
        return false;
    }
    virtual void set_bulk_done(BulkDone) {}

    // Makes our `pieces` reachable by the peer's bulk transfers (reads, and writes too if
    // `writable`) until release_export(*id): fills one key per piece. False: they cannot be
    // (the data then travels inline).
    virtual bool export_memory(PeerId, const struct iovec *, int n, bool, uint64_t *keys, uint64_t *id) {
        for (int i = 0; i < n; ++i) keys[i] = 0;
        *id = 0;
        return true;
    }
    virtual void release_export(uint64_t) {}
    // Whether the peer reaches the piece export_memory gave `key` for with loads and stores
    // (the shm wire's adopted pages): a bulk transfer then costs one copy and no system call,
    // cheaper than the data inline at any size.
    virtual bool bulk_by_mapping(uint64_t /*key*/) const { return false; }

    // Whether the peer process is known to have gone away.
    virtual bool peer_dead(PeerId) { return false; }
    // Whether a process that sent us a message has gone away (looked up if need be).
    virtual bool sender_gone(PeerId from) { return peer_dead(from); }
    // Another wire carries everything to `peer` from now on: close our connections to it
    // without taking that for its death (a later send opens a new one).
    virtual void release_peer(PeerId) {}
    // Finds out, without waiting, whether `peer`'s process still exists; peer_dead tells later.
    virtual void probe_peer(PeerId) {}

    // One-sided access to memory a peer registered for it (the direct path over RDMA: the
    // peer's CPU takes no part). Wires without it keep these defaults.
    //
    // Registers [addr, addr + len) for peers' reads (and writes if `writable`) until
    // remote_deregister(*handle) returns, after which no access lands; fills the key peers
    // name it by.
    // `atomic`: also for the peers' fetch-and-adds on its 8-byte words (remote_counts()).
    virtual bool remote_register(void *, size_t, bool, bool, uint64_t *, uint64_t *) { return false; }
    // Whether remote_access can add to a counter of the peer's (the device does atomics).
    virtual bool remote_counts() const { return false; }
    virtual void remote_deregister(uint64_t) {}
    // Posts a read of the peer's [remote_addr, +len) into `local`, or a write of `local` there;
    // ordered after every message sent to the peer before it and before every message sent
    // after it: refused while the peer's engine has not handled every message we sent it (not
    // merely received: a direct operation may not overtake one), or is known dead. Completion (the data
    // placed at both ends) is reported with `cookie` to the handler given to set_remote_done, from progress.
    // False: not posted (take the message path). `must_copy`: `local` may change once the call returns
    // (PTL_MD_VOLATILE). A RemoteCount with an amount is added (fetch-and-add) to the peer's counter right
    // after the data, in the same post: both or neither.
    struct RemoteCount {
        uint64_t addr = 0, key = 0, amount = 0;
    };
    virtual bool remote_access(PeerId, bool, void *, size_t, uint64_t, uint64_t, uint64_t, bool,
                               const RemoteCount &) {
        return false;
    }
    // Device atomics on an 8-byte word of the peer's (memory it registered `atomic`), ordered
    // and refused as remote_access, with a RemoteCount likewise; the completion reports the
    // word's old value as `fetched`.
    enum class AtomicOp : uint8_t { FetchAdd, CompareSwap };
    virtual bool remote_atomic(PeerId, AtomicOp, uint64_t /*remote_addr*/, uint64_t /*key*/,
                               uint64_t /*operand*/, uint64_t /*compare*/, uint64_t /*cookie*/,
                               const RemoteCount &) {
        return false;
    }
    // Whether remote_atomic and own_atomic work here (the device does atomics).
    virtual bool remote_atomics() const { return false; }
    // The same atomic on our own registered word, by the device (so it is atomic with the peers'
    // device atomics there, which CPU atomics are not), waited for; false if the device failed.
    virtual bool own_atomic(AtomicOp, uint64_t /*addr*/, uint64_t /*key*/, uint64_t /*operand*/,
                            uint64_t /*compare*/, uint64_t * /*old*/) {
        return false;
    }
    using RemoteDone = std::function<void(uint64_t cookie, bool ok, uint64_t fetched)>;
    // Writes up to this size are copied in the call (`local` is free at once).
    virtual size_t remote_inline() const { return 0; }
    // Reports the completions of one-sided operations that are already in (see RemoteDone).
    virtual void reap_remote() {}
    virtual void set_remote_done(RemoteDone) {}
    // The engine holds messages back (held_messages.h): what it received is not yet handled.
    virtual void set_holding(bool) {}
    // The peer needs prompt word of what we handled (it has our exports): told as soon as
    // its messages run out, not only in batches.
    virtual void report_handled_promptly(PeerId) {}
    // Called with each peer whose connection to us the wire accepts (it may reach us now).
    virtual void set_peer_connected(std::function<void(PeerId)>) {}
    // Stops (true) or resumes returning the peer's flow-control credits, where the wire has
    // them: the engine queues that peer's messages (behind a transfer) and bounds the queue so.
    virtual void withhold_credits(PeerId, bool) {}
};

}  // namespace ptl
