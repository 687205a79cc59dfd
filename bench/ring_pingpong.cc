// The shared-memory ring alone, without the engine: two processes ping-pong messages of the
// engine's size (a 72-byte header and an 8-byte payload) through two rings, and print the
// one-way latency. It is the floor under portals' shm am_lat, to set next to UCX posix's
// (bench/ring_floor.sh runs both): the rest of portals' latency is the engine and adapter.
// With a larger payload, each side copies it in from its own buffer and out into another as
// it arrives (streamed from 16 KiB, as the engine reads it into a posted receive): the floor
// under a medium message's two copies.
//   bench/ring_pingpong [iterations] [header bytes] [payload bytes]
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../src/ptl/wire/shm/shm_ring.h"

using ptl::shm::CellHead;
using ptl::shm::Ring;

namespace {

uint64_t now_ns() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return uint64_t(t.tv_sec) * 1000000000ull + uint64_t(t.tv_nsec);
}

// Waits for the next message, touches its last header byte as the engine would read it,
// copies its payload into `to` as it arrives, and frees its cells.
void receive(Ring &rx, size_t header_len, char *to) {
    const CellHead *h;
    while (!(h = rx.peek())) {
    }
    volatile char last = reinterpret_cast<const char *>(h + 1)[header_len - 1];
    (void)last;
    const char *payload = reinterpret_cast<const char *>(h + 1) + h->header_len;
    for (size_t done = 0; done < h->payload_len;) {
        const size_t in = Ring::arrived(h);
        if (in > done) {
            std::memcpy(to + done, payload + done, in - done);
            done = in;
        }
    }
    rx.release(h);
}

void send(Ring &tx, const char *header, size_t header_len, const char *payload, size_t payload_len) {
    iovec iov{const_cast<char *>(payload), payload_len};
    while (!tx.try_push(0, 0, header, header_len, &iov, 1, payload_len)) {
    }
}

}  // namespace

int main(int argc, char **argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 200000;
    const size_t header_len = argc > 2 ? size_t(std::atoi(argv[2])) : 72;
    const size_t payload_len = argc > 3 ? size_t(std::atoll(argv[3])) : 8;
    constexpr uint32_t kCells = 4096, kCellSize = 256;  // the wire's defaults
    constexpr size_t kMaxPayload = size_t(kCells / 4) * kCellSize - sizeof(CellHead) - 128;
    if (iters < 1 || header_len < 1 || header_len > 128 || payload_len > kMaxPayload) {
        std::fprintf(stderr,
                     "usage: ring_pingpong [iterations] [header bytes, 1..128] [payload bytes, 0..%zu]\n",
                     kMaxPayload);
        return 2;
    }
    // Separate buffers to copy from and into, as an application's send and receive buffers.
    std::vector<char> out(std::max<size_t>(payload_len, 1), 'p'), in(std::max<size_t>(payload_len, 1));
    const size_t size = Ring::segment_size(kCells, kCellSize);
    void *seg[2];
    for (void *&s : seg) {
        s = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (s == MAP_FAILED) {
            std::perror("ring_pingpong: mmap");
            return 1;
        }
        Ring::format(s, kCells, kCellSize, getpid());
    }
    char header[128] = {};
    const int warmup = std::min(iters, 10000);
    const pid_t child = fork();
    if (child < 0) {
        std::perror("ring_pingpong: fork");
        return 1;
    }
    Ring rx, tx;
    if (child == 0) {
        rx.attach(seg[1], size);
        tx.attach(seg[0], size);
        for (int i = 0; i < warmup + iters; ++i) {
            receive(rx, header_len, in.data());
            send(tx, header, header_len, out.data(), payload_len);
        }
        _exit(0);
    }
    rx.attach(seg[0], size);
    tx.attach(seg[1], size);
    std::vector<uint64_t> rtt(static_cast<size_t>(iters));
    for (int i = 0; i < warmup + iters; ++i) {
        const uint64_t t0 = now_ns();
        send(tx, header, header_len, out.data(), payload_len);
        receive(rx, header_len, in.data());
        if (i >= warmup) rtt[size_t(i - warmup)] = now_ns() - t0;
    }
    int status = 0;
    waitpid(child, &status, 0);
    std::sort(rtt.begin(), rtt.end());
    auto one_way_us = [&](double q) { return double(rtt[size_t(q * (iters - 1))]) / 2000.0; };
    std::printf(
        "ring one-way latency (us), %d iterations, %zu-byte header + %zu bytes: p10 %.3f p50 %.3f p90 %.3f\n",
        iters, header_len, payload_len, one_way_us(0.1), one_way_us(0.5), one_way_us(0.9));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
