/* LD_PRELOAD for a ucx_perftest server in UCT mode: PERFTEST_DEV_SWAP=A=B makes it open device B
 * where the client asked for A (and A where it asked for B).
 *
 * Why: a ucx_perftest server takes every test parameter from its client, the UCT device
 * included, so a client on rxe1 makes its server open rxe1 too. On soft-RoCE that is not the
 * same measurement as ours: rxe hands a packet for its own address straight to its receive
 * path (loopback), skipping UDP, IP and the link that the portals rows (each side on its own
 * device) go through. With the swap, both UCX rows and portals rows cross the wire.
 *
 *   cc -shared -fPIC -o perftest_dev_swap.so bench/perftest_dev_swap.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uct/api/uct.h>

/* "A:1" -> "B:1" and back: a device name is the part before ':'. */
static int swapped(const char *dev, char *out, size_t out_len) {
    const char *spec = getenv("PERFTEST_DEV_SWAP"), *eq = spec ? strchr(spec, '=') : NULL;
    if (!eq) return 0;
    const size_t a_len = (size_t)(eq - spec), b_len = strlen(eq + 1), d_len = strcspn(dev, ":");
    const char *to = NULL;
    size_t to_len = 0;
    if (d_len == a_len && !strncmp(dev, spec, a_len)) to = eq + 1, to_len = b_len;
    if (d_len == b_len && !strncmp(dev, eq + 1, b_len)) to = spec, to_len = a_len;
    if (!to) return 0;
    snprintf(out, out_len, "%.*s%s", (int)to_len, to, dev + d_len);
    return 1;
}

ucs_status_t uct_md_query_tl_resources(uct_md_h md, uct_tl_resource_desc_t **resources_p,
                                       unsigned *num_resources_p) {
    static ucs_status_t (*real)(uct_md_h, uct_tl_resource_desc_t **, unsigned *);
    if (!real) real = (ucs_status_t(*)(uct_md_h, uct_tl_resource_desc_t **, unsigned *))dlsym(
                   RTLD_NEXT, "uct_md_query_tl_resources");
    ucs_status_t status = real(md, resources_p, num_resources_p);
    if (status != UCS_OK) return status;
    for (unsigned i = 0; i < *num_resources_p; ++i) {
        char name[UCT_DEVICE_NAME_MAX];
        if (swapped((*resources_p)[i].dev_name, name, sizeof name))
            memcpy((*resources_p)[i].dev_name, name, sizeof name);
    }
    return status;
}

ucs_status_t uct_iface_open(uct_md_h md, uct_worker_h worker, const uct_iface_params_t *params,
                            const uct_iface_config_t *config, uct_iface_h *iface_p) {
    static ucs_status_t (*real)(uct_md_h, uct_worker_h, const uct_iface_params_t *,
                                const uct_iface_config_t *, uct_iface_h *);
    if (!real)
        real = (ucs_status_t(*)(uct_md_h, uct_worker_h, const uct_iface_params_t *,
                                const uct_iface_config_t *, uct_iface_h *))dlsym(RTLD_NEXT, "uct_iface_open");
    uct_iface_params_t p = *params;
    char name[UCT_DEVICE_NAME_MAX];
    if ((p.field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE) && p.open_mode == UCT_IFACE_OPEN_MODE_DEVICE &&
        swapped(p.mode.device.dev_name, name, sizeof name)) {
        fprintf(stderr, "perftest_dev_swap: %s opened as %s\n", p.mode.device.dev_name, name);
        p.mode.device.dev_name = name;
    }
    return real(md, worker, &p, config, iface_p);
}
