/*
 * portals4_rt.h — the small launch runtime of portals-ucx.
 *
 * A program learns its rank and the job size and exchanges data (such as the physical ids a
 * logical NI needs for PtlSetMap) with the other ranks, whichever launcher started it:
 *   ptlrun -n N            (one host, no launcher needed)
 *   mpirun / prterun / srun --mpi=pmix   (PMIx; libpmix is loaded at run time)
 *   mpiexec.hydra / mpiexec.mpich        (PMI-1 over PMI_FD)
 * PTLRT_LAUNCHER=auto|ptlrun|pmix|pmi1|none overrides the detection. Without a launcher the
 * program is rank 0 of 1.
 */
#ifndef PORTALS4_RT_H
#define PORTALS4_RT_H

#include <portals4.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most bytes one rank contributes to ptlrt_allgather. */
#define PTLRT_MAX_GATHER 256

/* 0 on success; -1 (with the reason on stderr) if the launcher's environment is present but
 * unusable. Call once from one thread before the other functions. */
int ptlrt_init(void);
/* "ptlrun", "pmix", "pmi1" or "none". */
const char *ptlrt_launcher(void);
int ptlrt_rank(void);
int ptlrt_size(void);
/* Every rank contributes `len` (<= PTLRT_MAX_GATHER) bytes; `out` receives size*len bytes in
 * rank order. 0 on success, -1 on timeout (PTLRT_TIMEOUT seconds, default 120) or a failed job. */
int ptlrt_allgather(const void *in, void *out, size_t len);
int ptlrt_barrier(void);
/* PtlGetPhysId on `ni`, allgather, then PtlSetMap when `ni` is logical; the map is also
 * returned in `map` (size entries) when not NULL. Returns a Portals code or PTL_FAIL. */
int ptlrt_exchange_ids(ptl_handle_ni_t ni, ptl_process_t *map);
/* A PMI-1 style key-value space over the same launchers (libportals_runtime's PMI_KVS_* use it;
 * portals4/pmi.h). A put is seen by its own rank at once and by every rank after the next
 * ptlrt_kvs_fence, which is also a barrier of all ranks. Keys and values are strings shorter
 * than the limits. 0 on success, -1 on failure (too long, no launcher, a failed job). */
const char *ptlrt_kvs_name(void);
size_t ptlrt_kvs_key_max(void);
size_t ptlrt_kvs_value_max(void);
int ptlrt_kvs_put(const char *key, const char *value);
int ptlrt_kvs_commit(void);
int ptlrt_kvs_fence(void);
/* The value's length, with up to len - 1 bytes and a NUL copied to value; -1 if no rank put
 * key before the last fence. */
long ptlrt_kvs_get(const char *key, char *value, size_t len);
/* Leaves the launcher (PMIx_Finalize, PMI finalize); also done at exit. */
void ptlrt_fini(void);

#ifdef __cplusplus
}
#endif

#endif
