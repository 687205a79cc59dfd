// The shared-memory ring alone, between threads over one segment: each thread attaches its
// own Ring, as separate processes do. Producers retry a full ring; every wait has a deadline.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../src/ptl/wire/arriving.h"
#include "../src/ptl/wire/shm/shm_ring.h"
#include "../src/ptl/wire/shm/wake_socket.h"

using ptl::shm::CellHead;
using ptl::shm::Ring;

namespace {

constexpr auto kDeadline = std::chrono::seconds(60);

struct Segment {
    Segment(uint32_t ncells, uint32_t cell_size) : size(Ring::segment_size(ncells, cell_size)) {
        base = std::aligned_alloc(ptl::shm::kCacheLine, (size + ptl::shm::kCacheLine - 1) /
                                                            ptl::shm::kCacheLine * ptl::shm::kCacheLine);
        Ring::format(base, ncells, cell_size, getpid());
    }
    ~Segment() { std::free(base); }
    void attach(Ring &r) const { ASSERT_TRUE(r.attach(base, size)); }
    size_t size;
    void *base;
};

struct MsgHeader {
    uint32_t producer;
    uint32_t seq;
};

unsigned char pattern(uint32_t producer, uint32_t seq, size_t i) {
    return static_cast<unsigned char>(producer * 131 + seq * 7 + i);
}

bool push(Ring &r, uint32_t producer, uint32_t seq, const std::vector<unsigned char> &payload) {
    const MsgHeader h{producer, seq};
    iovec iov{const_cast<unsigned char *>(payload.data()), payload.size()};
    return r.try_push(1, producer, &h, sizeof h, &iov, 1, payload.size());
}

// Pushes until it goes in; false past the deadline or once `stop` is set.
bool push_retrying(Ring &r, uint32_t producer, uint32_t seq, const std::vector<unsigned char> &payload,
                   const std::atomic<bool> &stop) {
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (!push(r, producer, seq, payload)) {
        if (stop || std::chrono::steady_clock::now() > until) return false;
        std::this_thread::yield();
    }
    return true;
}

// Frees every message there is; -1 past `max` (a run that does not move the consumer on).
int drain(Ring &r, int max) {
    int n = 0;
    while (const CellHead *h = r.peek()) {
        if (++n > max) return -1;
        r.release(h);
    }
    return n;
}

// Producer threads, each attached on its own, pushing `per_producer` messages of
// length_of(producer, seq) bytes of pattern(); any failure sets `failed` (and stops them).
template <class LengthOf>
std::vector<std::thread> start_producers(const Segment &seg, uint32_t producers, uint32_t per_producer,
                                         LengthOf length_of, std::atomic<bool> &failed) {
    std::vector<std::thread> threads;
    for (uint32_t p = 0; p < producers; ++p)
        threads.emplace_back([&seg, &failed, length_of, p, per_producer] {
            Ring r;
            seg.attach(r);
            for (uint32_t s = 0; s < per_producer && !failed; ++s) {
                std::vector<unsigned char> payload(length_of(p, s));
                for (size_t i = 0; i < payload.size(); ++i) payload[i] = pattern(p, s, i);
                if (!push_retrying(r, p, s, payload, failed)) failed = true;
            }
        });
    return threads;
}

MsgHeader header_of(const CellHead *h) {
    MsgHeader m;
    std::memcpy(&m, h + 1, sizeof m);
    return m;
}

}  // namespace

// Three producers of messages from empty to several cells long, through a ring small enough
// to wrap (padding runs) and fill up all the time: each message arrives once, whole, and in
// its producer's order.
TEST(ShmRing, MessagesOfManyProducersArriveWholeAndInOrderPerProducer) {
    constexpr uint32_t kCells = 64, kCellSize = 128, kProducers = 3, kPerProducer = 5000;
    Segment seg(kCells, kCellSize);
    Ring consumer;
    seg.attach(consumer);
    const size_t max_payload = consumer.max_message_bytes() - sizeof(MsgHeader);
    std::atomic<bool> failed{false};
    std::vector<std::thread> producers = start_producers(
        seg, kProducers, kPerProducer,
        [&](uint32_t p, uint32_t s) { return (s * 37 + p * 11) % (max_payload + 1); }, failed);
    // Checks one message; a failure stops everything (the producers too).
    std::vector<uint32_t> next(kProducers, 0);
    auto check = [&](const CellHead *h) {
        const MsgHeader m = header_of(h);
        if (h->header_len != sizeof(MsgHeader) || m.producer >= kProducers || h->src_pid != m.producer) {
            ADD_FAILURE() << "a message of no producer: header_len " << h->header_len << " producer "
                          << m.producer;
            return false;
        }
        if (m.seq != next[m.producer]) {
            ADD_FAILURE() << "producer " << m.producer << ": seq " << m.seq << ", expected "
                          << next[m.producer];
            return false;
        }
        ++next[m.producer];
        const size_t len = (m.seq * 37 + m.producer * 11) % (max_payload + 1);
        const auto *payload = reinterpret_cast<const unsigned char *>(h + 1) + h->header_len;
        for (size_t i = 0; i < len && h->payload_len == len; ++i)
            if (payload[i] != pattern(m.producer, m.seq, i)) {
                ADD_FAILURE() << "producer " << m.producer << " seq " << m.seq << ": byte " << i
                              << " differs";
                return false;
            }
        if (h->payload_len != len) {
            ADD_FAILURE() << "producer " << m.producer << " seq " << m.seq << ": " << h->payload_len
                          << " bytes";
            return false;
        }
        return true;
    };
    uint64_t received = 0;
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (received < uint64_t(kProducers) * kPerProducer && !failed) {
        const CellHead *h = consumer.peek();
        if (!h) {
            if (std::chrono::steady_clock::now() > until) break;
            std::this_thread::yield();
            continue;
        }
        if (!check(h)) failed = true;
        consumer.release(h);
        ++received;
    }
    failed = failed || received != uint64_t(kProducers) * kPerProducer;
    for (auto &t : producers) t.join();
    EXPECT_EQ(received, uint64_t(kProducers) * kPerProducer);
    EXPECT_EQ(consumer.peek(), nullptr);
}

// Messages large enough to be streamed (published after their first part) from three
// producers: the consumer copies each out as it arrives (copy_arriving, as the engine does)
// and frees it only once all of it is in; every byte arrives, in order per producer.
TEST(ShmRing, StreamedMessagesCopiedOutAsTheyArriveArriveWhole) {
    constexpr uint32_t kCells = 1024, kCellSize = 256, kProducers = 3, kPerProducer = 300;
    Segment seg(kCells, kCellSize);
    Ring consumer;
    seg.attach(consumer);
    const size_t max_payload = consumer.max_message_bytes() - sizeof(MsgHeader);
    ASSERT_GT(max_payload, 2 * ptl::shm::kStreamFrom);
    auto length_of = [&](uint32_t p, uint32_t s) { return (s * 7919 + p * 104729) % (max_payload + 1); };
    std::atomic<bool> failed{false};
    std::vector<std::thread> producers = start_producers(seg, kProducers, kPerProducer, length_of, failed);
    std::vector<uint32_t> next(kProducers, 0);
    std::vector<unsigned char> out(max_payload);
    uint64_t received = 0, streamed = 0;
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (received < uint64_t(kProducers) * kPerProducer && !failed) {
        const CellHead *h = consumer.peek();
        if (!h) {
            if (std::chrono::steady_clock::now() > until) break;
            std::this_thread::yield();
            continue;
        }
        const MsgHeader m = header_of(h);
        ptl::InMessage in;
        in.payload = reinterpret_cast<const char *>(h + 1) + h->header_len;
        in.payload_len = h->payload_len;
        if (Ring::arrived(h) < h->payload_len) {
            in.arriving = &h->arrived;
            ++streamed;
        }
        const bool ok = m.producer < kProducers && m.seq == next[m.producer] &&
                        h->payload_len == length_of(m.producer, m.seq) &&
                        ptl::copy_arriving(in, 0, h->payload_len,
                                           [&](size_t at, const char *from, size_t n) {
                                               std::memcpy(out.data() + at, from, n);
                                               return true;
                                           }) &&
                        ptl::payload_arrived(in, in.payload_len);
        if (!ok) {
            ADD_FAILURE() << "message " << received << ": producer " << m.producer << " seq " << m.seq;
            failed = true;
            break;
        }
        for (size_t i = 0; i < h->payload_len; ++i)
            if (out[i] != pattern(m.producer, m.seq, i)) {
                ADD_FAILURE() << "producer " << m.producer << " seq " << m.seq << ": byte " << i
                              << " differs";
                failed = true;
                break;
            }
        ++next[m.producer];
        consumer.release(h);
        ++received;
    }
    failed = failed || received != uint64_t(kProducers) * kPerProducer;
    for (auto &t : producers) t.join();
    EXPECT_EQ(received, uint64_t(kProducers) * kPerProducer);
    // Not a condition of correctness, but of the test's meaning: some were read while arriving.
    RecordProperty("read_while_arriving", int(streamed));
}

// A small ring with one producer and the consumer.
class OneProducerRing : public ::testing::Test {
protected:
    static constexpr uint32_t kCells = 64, kCellSize = 128;
    void SetUp() override {
        seg.attach(producer);
        seg.attach(consumer);
    }
    Segment seg{kCells, kCellSize};
    Ring producer, consumer;
};

// A full ring refuses instead of overwriting what the consumer has not freed, and takes
// messages again once it has (the producer's idea of the free room is refreshed).
TEST_F(OneProducerRing, AFullRingRefusesUntilTheConsumerFreesCells) {
    const std::vector<unsigned char> small(8, 0x5a);
    uint32_t pushed = 0;
    while (pushed < 2 * kCells && push(producer, 0, pushed, small)) ++pushed;
    EXPECT_EQ(pushed, kCells);  // one cell each
    EXPECT_FALSE(push(producer, 0, pushed, small));
    const CellHead *h = consumer.peek();
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(header_of(h).seq, 0u);
    consumer.release(h);
    EXPECT_TRUE(push(producer, 0, pushed, small));
    EXPECT_FALSE(push(producer, 0, pushed + 1, small));
    for (uint32_t s = 1; s <= pushed; ++s) {
        h = consumer.peek();
        ASSERT_NE(h, nullptr) << s;
        EXPECT_EQ(header_of(h).seq, s);
        consumer.release(h);
    }
    EXPECT_EQ(consumer.peek(), nullptr);
}

// A cell that was inside a message run holds message bytes where a run's head keeps its
// sequence number. When the consumer reaches that cell on the next lap before anything was
// written there, it must find nothing - whatever those bytes were. Here they are exactly the
// number that would read as published.
TEST_F(OneProducerRing, ACellReachedBeforeItsRunIsWrittenHoldsNothing) {
    // A three-cell run at positions 0-2; cell 1 next comes up as position 65, which reads as
    // published when its sequence number is 66.
    const size_t seq_in_payload = kCellSize + offsetof(CellHead, seq) - sizeof(CellHead) - sizeof(MsgHeader);
    std::vector<unsigned char> big(2 * kCellSize, 0);
    const uint64_t forged = kCells + 1 + 1;
    std::memcpy(big.data() + seq_in_payload, &forged, sizeof forged);
    ASSERT_TRUE(push(producer, 0, 0, big));
    ASSERT_EQ(drain(consumer, 2), 1);
    const std::vector<unsigned char> small(8, 0);
    for (uint32_t s = 1; s <= kCells - 3 + 1; ++s) {  // positions 3..64
        ASSERT_TRUE(push(producer, 0, s, small)) << s;
        ASSERT_EQ(drain(consumer, 2), 1) << s;
    }
    EXPECT_FALSE(consumer.may_hold_message());
    EXPECT_EQ(consumer.peek(), nullptr);
}

// A consumer that sleeps in poll() (it also waits on the verbs completion channel) is woken by
// a byte to its WakeSocket; one asleep on the futex, or awake, gets none.
TEST(ShmRing, AProducerWakesAConsumerAsleepOnItsSocketBySendingItAByte) {
    Segment seg(64, 256);
    Ring consumer, producer;
    seg.attach(consumer);
    seg.attach(producer);
    ptl::shm::WakeSocket ws;
    std::string err;
    ASSERT_TRUE(ws.open(&err)) << err;  // named after this process, the ring's owner
    auto woken = [&](int ms) {
        pollfd p{ws.fd(), POLLIN, 0};
        const bool r = poll(&p, 1, ms) == 1;
        ws.drain();
        return r;
    };
    ptl::shm::RingControl *c = consumer.control();
    const uint32_t bell = c->doorbell.load();
    c->sleeping.store(ptl::shm::kSleepsOnSocket);
    ASSERT_TRUE(push(producer, 1, 0, std::vector<unsigned char>(8, 'a')));
    EXPECT_TRUE(woken(10000));
    EXPECT_EQ(c->sleeping.load(), ptl::shm::kAwake);  // one wake per sleep
    EXPECT_EQ(c->doorbell.load(), bell + 1);
    ASSERT_TRUE(push(producer, 1, 1, std::vector<unsigned char>(8, 'b')));  // awake now: no byte
    c->sleeping.store(ptl::shm::kSleepsOnFutex);
    ASSERT_TRUE(push(producer, 1, 2, std::vector<unsigned char>(8, 'c')));  // a futex wake, no byte
    EXPECT_FALSE(woken(0));
    EXPECT_EQ(c->sleeping.load(), ptl::shm::kAwake);
}

// The wake-up handshake sits at the reservation (version 7): a producer looks at the flag just
// after its CAS, before writing, and no fence follows the payload. So a consumer that raises
// the flag while a run is being written must see it reserved and stay awake (the producer saw
// no flag and will ring no bell); with no run reserved it may sleep, and a producer reserving
// after the flag went up rings the bell when it publishes.
TEST(ShmRing, AConsumerArmingWhileARunIsWrittenSeesItReservedAndOneArmedBeforeIsWoken) {
    Segment seg(64, 256);
    Ring consumer, producer;
    seg.attach(consumer);
    seg.attach(producer);
    ptl::shm::RingControl *c = consumer.control();
    EXPECT_TRUE(consumer.nothing_reserved());
    const uint32_t bell = c->doorbell.load();
    const char payload[16] = "sixteen bytes..";
    bool seen_reserved = false, seen_published = true;
    ASSERT_TRUE(producer.try_push_filled(1, 1, sizeof(MsgHeader), payload, sizeof payload, [&](void *at) {
        const MsgHeader h{1, 0};
        std::memcpy(at, &h, sizeof h);
        c->sleeping.store(ptl::shm::kSleepsOnFutex);  // the consumer arms mid-write
        seen_reserved = !consumer.nothing_reserved();
        seen_published = consumer.may_hold_message();
    }));
    EXPECT_TRUE(seen_reserved);
    EXPECT_FALSE(seen_published);
    EXPECT_EQ(c->doorbell.load(), bell);  // armed after the reservation: no bell, so no sleep
    EXPECT_EQ(drain(consumer, 1), 1);
    EXPECT_TRUE(consumer.nothing_reserved());  // now it may sleep, the flag still up
    ASSERT_TRUE(push(producer, 1, 1, std::vector<unsigned char>(8, 'b')));
    EXPECT_EQ(c->doorbell.load(), bell + 1);  // reserved while armed: woken on publish
    EXPECT_EQ(c->sleeping.load(), ptl::shm::kAwake);
    EXPECT_FALSE(consumer.nothing_reserved());
    EXPECT_EQ(drain(consumer, 1), 1);
}

// A producer killed between its reservation and its publication (a real process here, ended
// inside the write) left its run unwritten at the head of the ring: every later message, of
// every producer, waited behind it for good. The consumer's occasional check skips such a run
// once it has seen it unwritten twice and its sender (the head's) is gone; while the sender
// lives, or on the first sighting, it waits. Messages reserved after it arrive.
TEST(ShmRing, ARunWhoseProducerDiedBeforePublishingItIsSkippedOnceItsSenderIsGone) {
    constexpr uint32_t kCells = 64, kCellBytes = 256, kDeadSender = 77, kLiveSender = 78;
    const size_t size = Ring::segment_size(kCells, kCellBytes);
    void *base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(base, MAP_FAILED);
    Ring::format(base, kCells, kCellBytes, getpid());
    Ring consumer, live;
    ASSERT_TRUE(consumer.attach(base, size));
    ASSERT_TRUE(live.attach(base, size));
    const std::vector<unsigned char> payload(600, 'x');  // a run of several cells
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        Ring dying;
        if (!dying.attach(base, size)) _exit(2);
        dying.try_push_filled(1, kDeadSender, sizeof(MsgHeader), payload.data(), payload.size(),
                              [](void *) { _exit(0); });
        _exit(3);  // not reached: the run was reserved, then the process ended
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    ASSERT_TRUE(push(live, kLiveSender, 1, std::vector<unsigned char>(32, 'y')));
    EXPECT_EQ(consumer.peek(), nullptr);  // held back behind the unwritten run

    bool sender_gone = false;
    std::vector<uint32_t> asked;
    const auto gone = [&](uint32_t, uint32_t pid) {
        asked.push_back(pid);
        return sender_gone;
    };
    EXPECT_EQ(consumer.reclaim_abandoned(gone), 0u);  // first sighting: it may be being written
    EXPECT_TRUE(asked.empty());
    EXPECT_EQ(consumer.reclaim_abandoned(gone), 0u);  // its sender still holds its pid
    EXPECT_EQ(asked, std::vector<uint32_t>{kDeadSender});
    EXPECT_EQ(consumer.peek(), nullptr);
    sender_gone = true;
    const uint64_t skipped = consumer.reclaim_abandoned(gone);
    EXPECT_EQ(skipped, (sizeof(CellHead) + sizeof(MsgHeader) + payload.size() + kCellBytes - 1) / kCellBytes);
    EXPECT_EQ(consumer.take_malformed(), 1u);  // the skipped run is counted
    const CellHead *h = consumer.peek();
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(header_of(h).producer, kLiveSender);
    consumer.release(h);
    EXPECT_EQ(consumer.peek(), nullptr);
    EXPECT_EQ(consumer.reclaim_abandoned(gone), 0u);  // nothing reserved any more
    EXPECT_TRUE(consumer.nothing_reserved());
    munmap(base, size);
}
