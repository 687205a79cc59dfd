/*
 * portals4_rt.h — the small launch runtime of portals-ucx.
 *
 * Programs started by `ptlrun -n N` learn their rank and the job size and can exchange
 * data (such as the physical ids a logical NI needs for PtlSetMap) with the other ranks.
 * Without ptlrun the program is rank 0 of 1.
 */
#ifndef PORTALS4_RT_H
#define PORTALS4_RT_H

#include <portals4.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 on success, -1 if the launcher's environment is present but unusable. */
int ptlrt_init(void);
int ptlrt_rank(void);
int ptlrt_size(void);
/* Every rank contributes `len` (<= 256) bytes; `out` receives size*len bytes in rank order.
 * 0 on success, -1 on timeout (PTLRT_TIMEOUT seconds, default 120) or a dead rank. */
int ptlrt_allgather(const void *in, void *out, size_t len);
int ptlrt_barrier(void);
/* PtlGetPhysId on `ni`, allgather, then PtlSetMap when `ni` is logical; the map is also
 * returned in `map` (size entries) when not NULL. Returns a Portals code or PTL_FAIL. */
int ptlrt_exchange_ids(ptl_handle_ni_t ni, ptl_process_t *map);
void ptlrt_fini(void);

#ifdef __cplusplus
}
#endif

#endif
