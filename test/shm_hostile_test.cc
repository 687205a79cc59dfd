// The shared-memory wire against bad input: any local process of the same user can write
// into a receive ring, and a run's head decides how much of the ring the consumer reads. Runs
// whose head cannot be a producer's are dropped and counted in PTL_SR_MALFORMED_MESSAGES
// (digest §16, status registers), nothing of them reaches an ME, and the messages after them
// still arrive.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../src/ptl/wire/shm/shm_ring.h"
#include "hostile_ni.h"

using namespace ptltest;
using ptl::shm::CellHead;
using ptl::shm::Ring;
using ptl::shm::RingControl;

namespace {

class ShmHostile : public HostileNi {
protected:
    void SetUp() override {
        HostileNi::SetUp();
        if (HasFatalFailure()) return;
        const ptl_me_t me = me_desc(buf_, sizeof buf_, PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, kMatchBits);
        ASSERT_EQ(PtlMEAppend(ni_, pt_, &me, PTL_PRIORITY_LIST, nullptr, &me_), PTL_OK);
        map_own_ring();
    }
    void TearDown() override {
        if (base_) munmap(base_, len_);
        HostileNi::TearDown();
    }
    // The NI's receive ring, mapped as another local process would map it.
    void map_own_ring() {
        char name[96];
        std::snprintf(name, sizeof name, "/ptl4-%u-%08x-%u", unsigned(getuid()), self_.phys.nid,
                      self_.phys.pid);
        const int fd = shm_open(name, O_RDWR, 0);
        ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
        struct stat st {};
        ASSERT_EQ(fstat(fd, &st), 0);
        len_ = size_t(st.st_size);
        base_ = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        ASSERT_NE(base_, MAP_FAILED);
        ASSERT_TRUE(producer_.attach(base_, len_));
    }
    // Writes a put of `data` the way a producer does (reserve, fill, publish), except that
    // `bend` may rewrite the head before it is published; returns the head.
    template <typename Bend>
    CellHead *forge_put(const std::string &data, Bend bend, ptl_match_bits_t bits = kMatchBits) {
        RingControl *c = producer_.control();
        const uint64_t cell_size = c->cell_size, ncells = c->ncells;
        ptl::proto::Header h = put_header(data.size());
        h.match_bits = bits;
        const uint64_t cells = (sizeof(CellHead) + sizeof h + data.size() + cell_size - 1) / cell_size;
        const uint64_t pos = c->enqueue_pos.fetch_add(cells);
        EXPECT_LE((pos & (ncells - 1)) + cells, ncells) << "the test's run would wrap";
        auto *head = reinterpret_cast<CellHead *>(static_cast<char *>(base_) + sizeof(RingControl) +
                                                  (pos & (ncells - 1)) * cell_size);
        head->ncells = uint32_t(cells);
        head->kind = ptl::shm::kMessage;
        head->header_len = sizeof h;
        head->payload_len = uint32_t(data.size());
        head->src_nid = self_.phys.nid;
        head->src_pid = self_.phys.pid;
        head->arrived.store(uint32_t(data.size()), std::memory_order_relaxed);
        std::memcpy(reinterpret_cast<char *>(head + 1), &h, sizeof h);
        std::memcpy(reinterpret_cast<char *>(head + 1) + sizeof h, data.data(), data.size());
        bend(*head);
        head->seq.store(pos + 1, std::memory_order_release);
        producer_.ring_doorbell_if_sleeping();
        return head;
    }
    void put(const std::string &data) {
        const ptl::proto::Header h = put_header(data.size());
        iovec iov{const_cast<char *>(data.data()), data.size()};
        ASSERT_TRUE(producer_.try_push(self_.phys.nid, self_.phys.pid, &h, sizeof h, &iov, 1, data.size()));
        producer_.ring_doorbell_if_sleeping();
    }

    ptl_handle_me_t me_{};
    char buf_[64] = {};
    void *base_ = nullptr;
    size_t len_ = 0;
    Ring producer_;
};

}  // namespace

TEST_F(ShmHostile, RunsWhoseHeadCannotBeAProducersAreDroppedCountedAndDoNotStopTheRing) {
    const ptl_sr_value_t before = malformed();
    // Lengths beyond the run: the consumer would read past its cells (and past the ring).
    forge_put("lengths", [](CellHead &h) { h.payload_len = 1u << 30; });
    // A run past the ring's end (runs never wrap).
    forge_put("too far", [](CellHead &h) { h.ncells = 1u << 20; });
    // No run at all, and a kind nobody writes.
    forge_put("no cell", [](CellHead &h) { h.ncells = 0; });
    forge_put("kind 77", [](CellHead &h) { h.kind = 77; });
    put("arrives");

    const ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.mlength, 7u);
    EXPECT_STREQ(buf_, "arrives");
    EXPECT_EQ(malformed() - before, 4);
    ptl_event_t more;
    EXPECT_EQ(PtlEQGet(eq_, &more), PTL_EQ_EMPTY) << "a forged run was delivered: event " << more.type;
}

// A large message is published after its first part (CellHead::arrived counts what is in) and
// read as the rest arrives. A sender that writes the rest later is waited for: the put lands
// whole. One whose process is gone before it wrote the rest is dropped and counted (its entry
// reports the put failed, as for a payload shorter than its header says), and the ring goes
// on with the messages after it.
class ShmStreamed : public ShmHostile {
protected:
    static constexpr ptl_match_bits_t kBigBits = 9;
    static constexpr size_t kBig = 40000, kFirstPart = 8192;
    void SetUp() override {
        ShmHostile::SetUp();
        if (HasFatalFailure()) return;
        const ptl_me_t me =
            me_desc(big_.data(), big_.size(), PTL_ME_OP_PUT | PTL_ME_EVENT_LINK_DISABLE, kBigBits);
        ASSERT_EQ(PtlMEAppend(ni_, pt_, &me, PTL_PRIORITY_LIST, nullptr, &big_me_), PTL_OK);
        data_.resize(kBig);
        for (size_t i = 0; i < kBig; ++i) data_[i] = char('a' + i % 23);
    }
    std::vector<char> big_ = std::vector<char>(kBig + 64, 0);
    ptl_handle_me_t big_me_{};
    std::string data_;
};

TEST_F(ShmStreamed, APutWhoseSenderWritesTheRestLaterLandsWhole) {
    const ptl_sr_value_t before = malformed();
    CellHead *head = forge_put(
        data_, [](CellHead &h) { h.arrived.store(kFirstPart); }, kBigBits);
    char *payload = reinterpret_cast<char *>(head + 1) + head->header_len;
    std::memset(payload + kFirstPart, 0, kBig - kFirstPart);  // not there yet
    std::thread sender([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the reader waits meanwhile
        std::memcpy(payload + kFirstPart, data_.data() + kFirstPart, kBig - kFirstPart);
        head->arrived.store(uint32_t(kBig), std::memory_order_release);
    });
    const ptl_event_t ev = next_event(eq_);
    sender.join();
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    EXPECT_EQ(ev.mlength, kBig);
    EXPECT_EQ(std::memcmp(big_.data(), data_.data(), kBig), 0);
    EXPECT_EQ(malformed() - before, 0);
}

TEST_F(ShmStreamed, APutWhoseSenderDiedBeforeTheRestArrivedIsDroppedCountedAndTheRingGoesOn) {
    const ptl_sr_value_t before = malformed();
    forge_put(
        data_,
        [&](CellHead &h) {
            h.arrived.store(kFirstPart);
            h.src_pid = self_.phys.pid + 7919;  // a sender with no ring: no process behind it
        },
        kBigBits);
    put("arrives");
    const ptl_event_t dropped = next_event(eq_);
    EXPECT_EQ(dropped.type, PTL_EVENT_PUT);
    EXPECT_EQ(dropped.ni_fail_type, PTL_NI_SEGV);
    EXPECT_EQ(dropped.match_bits, kBigBits);
    const ptl_event_t ev = next_event(eq_);
    EXPECT_EQ(ev.type, PTL_EVENT_PUT);
    EXPECT_EQ(ev.ni_fail_type, PTL_NI_OK);
    EXPECT_STREQ(buf_, "arrives");
    EXPECT_EQ(malformed() - before, 1);
}
