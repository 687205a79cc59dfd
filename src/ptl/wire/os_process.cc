#include "os_process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ptl {

bool os_process_gone(pid_t pid) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT;
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
    const char *close_paren = std::strrchr(buf, ')');
    if (!close_paren || close_paren[1] != ' ') return false;
    const char state = close_paren[2];
    return state == 'Z' || state == 'X';
}

}  // namespace ptl
