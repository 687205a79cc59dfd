/* Shared by the MPI and OpenSHMEM test programs: a CHECK that counts failures instead of
 * aborting (so every rank reports what it saw), a data pattern that differs per sender, size
 * and offset, and the per-rank verdict line "<program>: rank R of N on HOST: ok|FAILED" (the
 * multi-host test reads the host names from it). */
#ifndef INTEGRATION_CHECK_H
#define INTEGRATION_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_rank, check_errors;

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "rank %d: %s:%d: ", check_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
            ++check_errors;                                                      \
        }                                                                        \
    } while (0)

static inline unsigned char pattern(int sender, size_t size, size_t i) {
    return (unsigned char)(sender * 131 + size * 7 + i * 13 + 1);
}

static inline void fill(unsigned char *buf, int sender, size_t size) {
    for (size_t i = 0; i < size; ++i) buf[i] = pattern(sender, size, i);
}

/* 1 when buf holds sender's pattern for size; reports the first wrong byte. */
static inline int verify(const unsigned char *buf, int sender, size_t size, const char *what) {
    for (size_t i = 0; i < size; ++i)
        if (buf[i] != pattern(sender, size, i)) {
            CHECK(0, "%s: %zu B from %d: byte %zu is %u, want %u", what, size, sender, i, buf[i],
                  pattern(sender, size, i));
            return 0;
        }
    return 1;
}

static inline void *xmalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu B)\n", check_rank, size);
        abort();
    }
    return p;
}

/* "<program>: rank R of N on HOST: ok|FAILED", once every rank knows the total. */
static inline void check_report(const char *program, int nranks, int total_errors) {
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    printf("%s: rank %d of %d on %s: %s\n", program, check_rank, nranks, host,
           total_errors ? "FAILED" : "ok");
    fflush(stdout);
}

#endif
