/* portals-ucx extensions to Portals 4.3. Not part of the specification: a client that uses
 * them runs only on portals-ucx. The UCT component uses them to drive the engine from
 * uct_iface_progress() and to sleep on a file descriptor (uct_iface_event_arm). */
#ifndef PORTALS4_EXT_H
#define PORTALS4_EXT_H

#include <portals4.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the engine once from an application poll loop: delivers incoming messages, retries
 * queued sends, fires triggered operations. Returns the number of messages handled (>= 0),
 * or PTL_NO_INIT. While an application keeps calling it, the progress thread stays idle. */
int PtlXProgress(void);

/* PtlPut, and then the MD's [local_offset, local_offset + length) copied to `copy_to`
 * (length bytes of the caller's memory, outside the MD) before the engine handles any message
 * that arrives after the put: a copy the target may fetch later (a message it truncated),
 * made while the message travels instead of before it leaves. A put that cannot travel inline
 * at once (its target may read the data later) is copied first and sent from the copy where the
 * MD covers `copy_to`. Returns what PtlPut would; after an error the bytes at `copy_to` are
 * unspecified. */
int PtlXPutAndCopy(ptl_handle_md_t md_handle, ptl_size_t local_offset, ptl_size_t length,
                   ptl_ack_req_t ack_req, ptl_process_t target_id, ptl_pt_index_t pt_index,
                   ptl_match_bits_t match_bits, ptl_size_t remote_offset, void *user_ptr,
                   ptl_hdr_data_t hdr_data, void *copy_to);

/* An ME option (with PTL_ME_MANAGE_LOCAL and a non-zero min_free): the ME is a row of slots of
 * min_free bytes, and each message takes whole slots of its own, at least one: the local
 * offset advances to the slot boundary after it, so the next message starts a slot. The ME
 * unlinks once no slot can start (the local offset reached its length); the last slot may be
 * shorter than the others. Receive buffers that need room before each message (UCT's
 * rx_headroom) can so share one ME instead of an ME each, and a message that does not fit
 * what is left (PTL_ME_NO_TRUNCATE) never reaches past the ME. */
#define PTLX_ME_SLOTS (1u << 30)

/* An ME option (with PTL_ME_MANAGE_LOCAL and a non-zero min_free): the ME is a pool of slots of
 * min_free bytes at offsets the application gives it with PtlXMEGiveSlots, and never unlinks by
 * itself. Each message takes the slot given longest ago and lands at its offset, at most
 * min_free bytes of it (more is truncated, or with PTL_ME_NO_TRUNCATE the ME does not match);
 * while no slot is given, the ME does not match and the message goes on down the list. Slots
 * come back in any order and in batches as the application is done with them: receive
 * buffers a consumer keeps for a while (UCT's descriptors) cost no append or unlink per
 * message. Not with PTL_IOVEC, PTL_ME_USE_ONCE, PTL_ME_LOCAL_INC_UH_RLENGTH or PTLX_ME_SLOTS. */
#define PTLX_ME_SLOT_POOL (1u << 29)

/* Gives `count` slots, by their offsets in the ME, to a PTLX_ME_SLOT_POOL ME; they are taken in
 * the order given, after those given before. PTL_ARG_INVALID (nothing given) for a bad handle,
 * an ME without the option, a slot that does not fit in the ME, or more slots held at once
 * than the ME has room for (its length / min_free). */
int PtlXMEGiveSlots(ptl_handle_me_t me, const ptl_size_t *offsets, unsigned count);

/* An MD option: an operation from this MD that the engine completes within the call (the
 * direct path: the target is on this host and its entry needs no software at the target, see
 * the README) posts no event and no count on the initiator's side and returns PTLX_DONE
 * instead of PTL_OK: it is complete, data in place, when the call returns. Any other
 * operation from the MD behaves as without the option. The MD that decides is the one that
 * would report completion: the get MD of PtlGet, PtlFetchAtomic and PtlSwap, else the put
 * MD. For clients that complete operations themselves when they can (the UCT component's
 * RMA and atomics, which then return UCS_OK). */
#define PTLX_MD_COMPLETE_IN_CALL (1u << 27)
#define PTLX_DONE 64
/* Arms a one-shot wake-up: the next event posted to `eq` writes an 8-byte 1 to `fd` (an
 * eventfd or a pipe). Returns PTL_OK when armed, PTL_IN_USE when events are already waiting
 * (not armed: read them first), PTL_FAIL with PTL_PROGRESS=manual (no thread would deliver
 * while the caller sleeps), PTL_ARG_INVALID for a bad handle or fd. */
int PtlXEQArm(ptl_handle_eq_t eq, int fd);

/* Whether the physical NI under `ni` has a wire to node `nid`: its own node always; other
 * nodes when the tcp wire is up (not with PTL_WIRE=shm, or when its port could not be bound).
 * Returns 1 or 0, or PTL_ARG_INVALID for a bad handle, PTL_NO_INIT. */
int PtlXNidReachable(ptl_handle_ni_t ni, ptl_nid_t nid);

/* Whether messages this NI drops for want of a match (no flow control) are answered with an
 * ACK or REPLY carrying PTL_NI_DROPPED, as PTL_NOTIFY_DROPS=1 does for every NI. The spec's
 * default is no answer (digest X3), which leaves such a get, or a put waiting for its ACK,
 * pending forever at the initiator; the UCT component turns it on for its NI, since UCX
 * needs every operation to complete. Returns PTL_OK, PTL_ARG_INVALID, PTL_NO_INIT. */
int PtlXNINotifyDrops(ptl_handle_ni_t ni, int enable);

/* Whether the physical process `peer` (nid, pid) is, as far as this process knows, alive:
 * 0 once its wire saw it die (its process is gone, or its connection was reset or timed
 * out), 1 otherwise, PTL_ARG_INVALID for a bad handle, PTL_NO_INIT. Operations to it fail by
 * themselves; this is for a client waiting on the peer with no operation of its own in
 * flight (the UCT component's rendezvous sends, which wait for the peer to fetch). */
int PtlXPeerAlive(ptl_handle_ni_t ni, ptl_process_t peer);

/* Makes room for at least `count` events in `eq` (as if PtlEQAlloc had been given `count`),
 * keeping the events queued in order; never shrinks it. For a client whose number of event
 * sources grows while it runs (the UCT component's rendezvous sends). Returns PTL_OK,
 * PTL_NO_SPACE beyond PtlEQAlloc's limit (2^26), PTL_ARG_INVALID, PTL_NO_INIT. */
int PtlXEQGrow(ptl_handle_eq_t eq, ptl_size_t count);

/* PtlEQGet without progress: returns an event already in `eq` (PTL_OK or PTL_EQ_DROPPED),
 * else PTL_EQ_EMPTY at once, without first reading the wires. For a client that needs only
 * what was delivered so far (the UCT component checks it before posting a receive). Also
 * PTL_ARG_INVALID, PTL_NO_INIT. */
int PtlXEQTake(ptl_handle_eq_t eq, ptl_event_t *event);

/* PtlXEQTake for up to `max` events at once, in order, under one lock: the number taken goes
 * to `*taken` (may be NULL). Returns PTL_OK or PTL_EQ_DROPPED (events were lost before the
 * first one taken) when at least one was taken, else PTL_EQ_EMPTY; PTL_ARG_INVALID for a bad
 * handle, a NULL `events` or `max` 0; PTL_NO_INIT. */
int PtlXEQTakeMany(ptl_handle_eq_t eq, ptl_event_t *events, unsigned max, unsigned *taken);

/* PtlXProgress followed by PtlXEQTakeMany, under one lock: a poll loop's whole step. Returns
 * what PtlXEQTakeMany would (PTL_ARG_INVALID without running the engine). A poll that can
 * find nothing (this thread saw `eq` empty, no event was posted since, no message waits on
 * the shared-memory wire and nothing else needs progress) returns PTL_EQ_EMPTY without the
 * engine's lock; such skipped polls only postpone work, two calls in sixteen always run it. */
int PtlXProgressEQ(ptl_handle_eq_t eq, ptl_event_t *events, unsigned max, unsigned *taken);

/* What the process's wires hold on the RDMA device and in the kernel (the same for every NI;
 * zeros where no verbs wire is open, but for tcp_connections):
 *   pinned_bytes      registered for the wires themselves: receive and send buffers, and the
 *                     device's queues (their sizes estimated from the entries the device gave)
 *   registered_bytes  application memory registered with the device: the registration
 *                     cache's regions, in use or kept, and one-sided exports
 *   rdma_peers        peers with an RDMA connection up
 *   tcp_connections   sockets of the tcp wire, both directions (an RDMA peer's closes once its
 *                     QP is up: they carry setup and the peers without RDMA)
 *   rdma_qps_closed   RDMA connections closed to stay within PTL_VERBS_MAX_QPS, by either side
 *   pages_adopted     ranges of this process's memory copied into a memory file so that peers
 *                     on this host reach them directly (the direct path; each range once while
 *                     it stays mapped)
 *   adopted_bytes     bytes those copies moved
 *   adoptions_reused  requests answered from a range adopted before (no copy)
 *   peer_maps         peers' adopted files this process mapped (each an open of /proc/PID/fd
 *                     and an mmap, once per file while the peer keeps it)
 *   kernel_copies     bulk transfers with a peer on this host made by cross-memory attach
 *                     (process_vm_readv/writev: a system call each), for memory the peer
 *                     cannot map above PTL_SHM_COPY_MAX; the rest moves through the ring
 *                     or a mapping
 *   kernel_copy_bytes bytes they moved
 *   shm_copy_max      memory a peer on this host cannot map moves through the ring up to this
 *                     size, by cross-memory attach above it (PTL_SHM_COPY_MAX, or what the
 *                     start-up measurement of PTL_SHM_COPY_MAX=auto chose)
 * Returns PTL_OK, PTL_ARG_INVALID for a bad handle or a NULL `usage`, PTL_NO_INIT. PTL_TRACE
 * prints the same figures as each connection comes up. */
typedef struct {
    ptl_size_t pinned_bytes;
    ptl_size_t registered_bytes;
    ptl_size_t rdma_peers;
    ptl_size_t tcp_connections;
    ptl_size_t rdma_qps_closed;
    ptl_size_t pages_adopted;
    ptl_size_t adopted_bytes;
    ptl_size_t adoptions_reused;
    ptl_size_t peer_maps;
    ptl_size_t kernel_copies;
    ptl_size_t kernel_copy_bytes;
    ptl_size_t shm_copy_max;
} ptlx_wire_usage_t;
/* The struct grows at its end as figures are added: a caller says how much of it it has, and
 * only that much is written (binaries built against an older header keep working). */
int PtlXWireUsageSized(ptl_handle_ni_t ni, ptlx_wire_usage_t *usage, size_t size);
#define PtlXWireUsage(ni, usage) PtlXWireUsageSized((ni), (usage), sizeof *(usage))
/* The symbol binaries built before PtlXWireUsageSized call: writes the first three fields, the
 * struct's size then. */
int(PtlXWireUsage)(ptl_handle_ni_t ni, ptlx_wire_usage_t *usage);

#ifdef __cplusplus
}
#endif

#endif
