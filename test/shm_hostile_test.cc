// The shared-memory wire against bad input: any local process of the same user can write
// into a receive ring, and a run's head decides how much of the ring the consumer reads. Runs
// whose head cannot be a producer's are dropped and counted in PTL_SR_MALFORMED_MESSAGES
// (digest §16, status registers), nothing of them reaches an ME, and the messages after them
// still arrive.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

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
    // `bend` may rewrite the head before it is published.
    template <typename Bend>
    void forge_put(const std::string &data, Bend bend) {
        RingControl *c = producer_.control();
        const uint64_t cell_size = c->cell_size, ncells = c->ncells;
        const ptl::proto::Header h = put_header(data.size());
        const uint64_t cells = (sizeof(CellHead) + sizeof h + data.size() + cell_size - 1) / cell_size;
        const uint64_t pos = c->enqueue_pos.fetch_add(cells);
        ASSERT_LE((pos & (ncells - 1)) + cells, ncells) << "the test's run would wrap";
        auto *head = reinterpret_cast<CellHead *>(static_cast<char *>(base_) + sizeof(RingControl) +
                                                  (pos & (ncells - 1)) * cell_size);
        head->ncells = uint32_t(cells);
        head->kind = ptl::shm::kMessage;
        head->header_len = sizeof h;
        head->payload_len = uint32_t(data.size());
        head->src_nid = self_.phys.nid;
        head->src_pid = self_.phys.pid;
        std::memcpy(reinterpret_cast<char *>(head + 1), &h, sizeof h);
        std::memcpy(reinterpret_cast<char *>(head + 1) + sizeof h, data.data(), data.size());
        bend(*head);
        head->seq.store(pos + 1, std::memory_order_release);
        producer_.ring_doorbell_if_sleeping();
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
