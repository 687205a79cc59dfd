// ptlrun -n N [--timeout SECONDS] program [args...]
//
// Starts N copies of a program on this host with the portals4_rt environment (rank, size,
// a shared segment for the barrier and the id exchange). Exits with the first non-zero exit
// status of a rank (128+signal for a rank killed by a signal), forwards SIGINT/SIGTERM/SIGHUP
// to the ranks, and with --timeout kills the whole job when it runs too long.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "job_segment.h"

namespace {

std::vector<pid_t> g_children;
volatile sig_atomic_t g_signal = 0;

void forward(int sig) {
    g_signal = sig;
    for (pid_t p : g_children)
        if (p > 0) kill(p, sig);
}

void usage() {
    std::fprintf(stderr,
                 "usage: ptlrun -n N [--timeout SECONDS] program [args...]\n"
                 "  Starts N ranks of a Portals program on this host (portals4_rt.h).\n");
}

}  // namespace

int main(int argc, char **argv) {
    int n = 0;
    double timeout = 0;
    int i = 1;
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if ((a == "-n" || a == "-np") && i + 1 < argc) {
            n = std::atoi(argv[++i]);
        } else if (a == "--timeout" && i + 1 < argc) {
            timeout = std::atof(argv[++i]);
        } else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else if (a == "--") {
            ++i;
            break;
        } else if (!a.empty() && a[0] == '-') {
            std::fprintf(stderr, "ptlrun: unknown option '%s'\n", a.c_str());
            usage();
            return 2;
        } else {
            break;
        }
    }
    if (n <= 0 || n > 4096 || i >= argc) {
        usage();
        return 2;
    }
    const std::string name = "/ptlrt-" + std::to_string(getpid());
    const size_t len = ptl::rt::job_segment_bytes(uint32_t(n));
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, off_t(len)) != 0) {
        std::fprintf(stderr, "ptlrun: cannot create %s: %s\n", name.c_str(), std::strerror(errno));
        return 1;
    }
    void *mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mem == MAP_FAILED) {
        std::fprintf(stderr, "ptlrun: mmap: %s\n", std::strerror(errno));
        shm_unlink(name.c_str());
        return 1;
    }
    auto *seg = new (mem) ptl::rt::JobSegment();
    seg->size = uint32_t(n);
    for (int r = 0; r < n; ++r) new (&seg->os_pids[r]) std::atomic<int32_t>(0);
    seg->magic = ptl::rt::kJobMagic;

    struct sigaction sa{};
    sa.sa_handler = forward;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);

    g_children.assign(size_t(n), 0);
    for (int r = 0; r < n; ++r) {
        pid_t p = fork();
        if (p < 0) {
            std::fprintf(stderr, "ptlrun: fork: %s\n", std::strerror(errno));
            forward(SIGTERM);
            break;
        }
        if (p == 0) {
            setenv("PTLRT_SHM", name.c_str(), 1);
            setenv("PTLRT_RANK", std::to_string(r).c_str(), 1);
            setenv("PTLRT_SIZE", std::to_string(n).c_str(), 1);
            execvp(argv[i], argv + i);
            std::fprintf(stderr, "ptlrun: cannot run '%s': %s\n", argv[i], std::strerror(errno));
            _exit(127);
        }
        g_children[size_t(r)] = p;
        seg->os_pids[r].store(p);
    }

    int result = 0;
    int left = n;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool timed_out = false;
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, timeout > 0 ? WNOHANG : 0);
        if (p == 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (!timed_out && double(t.tv_sec - t0.tv_sec) + double(t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout) {
                std::fprintf(stderr, "ptlrun: timeout after %.0f s, killing the job\n", timeout);
                timed_out = true;
                forward(SIGKILL);
            }
            usleep(10000);
            continue;
        }
        if (p < 0) {
            if (errno == EINTR) continue;
            break;
        }
        --left;
        int code = 0;
        if (WIFEXITED(status)) code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) code = 128 + WTERMSIG(status);
        for (int r = 0; r < n; ++r)
            if (g_children[size_t(r)] == p) {
                g_children[size_t(r)] = 0;
                if (code) std::fprintf(stderr, "ptlrun: rank %d exited with status %d\n", r, code);
            }
        if (code && !result) result = code;
    }
    munmap(mem, len);
    shm_unlink(name.c_str());
    if (timed_out && !result) result = 124;
    return result;
}
