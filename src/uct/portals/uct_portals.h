/* The UCT component "portals": objects shared by the C glue (component.c: UCX class,
 * config and ops tables, where UCX's macros need C) and the C++ implementation. Everything
 * below goes through the Portals engine (DESIGN: UCT mapping); no data moves around it. */
#ifndef UCT_PORTALS_H
#define UCT_PORTALS_H

#include <portals4.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>

#include "ucx_compat.h"

#ifdef __cplusplus
extern "C" {
#endif

#define UCT_PORTALS_NAME "portals"

/* What a packed rkey holds: the ME of a registration (DESIGN: rkey = {key, base}). */
typedef struct uct_portals_rkey {
    uint64_t key;  /* match bits of the registration ME */
    uint64_t base; /* its start address: remote offset = remote address - base */
    uint32_t pt;   /* portal index of the registering MD (or iface) */
    uint32_t reserved;
} uct_portals_rkey_t;

typedef struct uct_portals_md_config {
    uct_md_config_t super;
    int rcache_enable;             /* UCX_PORTALS_RCACHE: yes/no/try */
    uct_portals_rcache_config_t rcache; /* UCX_PORTALS_RCACHE_* */
} uct_portals_md_config_t;

typedef struct uct_portals_md {
    uct_md_t super;
    ptl_handle_ni_t ni;
    ptl_pt_index_t rma_pt; /* registrations are MEs on this portal */
    uint64_t next_key;
    ucs_rcache_t *rcache; /* NULL: every deregistration unlinks its ME at once */
    ucs_linear_func_t reg_cost;
} uct_portals_md_t;

typedef struct uct_portals_iface_config {
    uct_iface_config_t super;
    size_t seg_size;       /* largest AM / eager message body */
    unsigned rx_descs;     /* receive descriptors on each receive portal */
    unsigned tx_descs;     /* send buffers of messages the receiver has not processed yet */
    unsigned tx_window;    /* of them, held by one peer iface at most */
    unsigned grant_batch;  /* messages processed before the sender is told without waiting */
    unsigned tx_queue_len; /* operations in flight per iface */
    unsigned rndv_queue_len; /* rendezvous sends in flight per iface */
    int tm_enable;         /* tag offload by the engine's match lists */
    unsigned tm_list_size; /* posted tagged receives */
    size_t tm_min_recv;    /* smallest receive UCP offloads (min_recv) */
    size_t eager_max;      /* largest eager tagged message (send buffers hold one) */
    size_t rndv_max_hdr;   /* user header of a rendezvous */
    double latency_ns;     /* reported to UCP: engine overhead per message */
    double bandwidth_mbs;  /* reported to UCP */
    int stats;             /* print the tag-matching counters when the iface closes */
} uct_portals_iface_config_t;

/* The C++ side (iface_impl.h); opaque to C. */
typedef struct uct_portals_iface_impl uct_portals_iface_impl_t;

typedef struct uct_portals_iface {
    uct_base_iface_t super;
    uct_portals_iface_impl_t *impl;
} uct_portals_iface_t;

typedef struct uct_portals_ep {
    uct_base_ep_t super;
    struct uct_portals_ep_impl *impl;
} uct_portals_ep_t;

/* The address of an iface: its process and portals; the device address is the nid. */
typedef struct uct_portals_iface_addr {
    uint32_t pid;
    uint8_t am_pt;
    uint8_t tag_pt;
    uint8_t ctl_pt;
    uint8_t reserved;
} UCS_S_PACKED uct_portals_iface_addr_t;

typedef struct uct_portals_device_addr {
    uint32_t nid;
} UCS_S_PACKED uct_portals_device_addr_t;

extern uct_component_t uct_portals_component;

/* md.cc */
ucs_status_t uct_portals_query_md_resources(uct_component_t *component, uct_md_resource_desc_t **resources_p,
                                            unsigned *num_resources_p);
ucs_status_t uct_portals_md_open(uct_component_t *component, const char *md_name,
                                 const uct_md_config_t *config, uct_md_h *md_p);
ucs_status_t uct_portals_rkey_unpack(uct_component_t *component, UCT_PORTALS_RKEY_UNPACK_ARGS, uct_rkey_t *rkey_p,
                                     void **handle_p);
ucs_status_t uct_portals_rkey_release(uct_component_t *component, uct_rkey_t rkey, void *handle);
ucs_status_t uct_portals_rkey_compare(uct_component_t *component, uct_rkey_t rkey1, uct_rkey_t rkey2,
                                      const uct_portals_rkey_compare_params_t *params, int *result);
ucs_status_t uct_portals_query_tl_devices(uct_md_h md, uct_tl_device_resource_t **tl_devices_p,
                                          unsigned *num_tl_devices_p);

/* iface.cc: construction, destruction and the iface-level operations */
ucs_status_t uct_portals_iface_init(uct_portals_iface_t *iface, uct_md_h md, const uct_iface_params_t *params,
                                    const uct_portals_iface_config_t *config);
void uct_portals_iface_cleanup(uct_portals_iface_t *iface);
ucs_status_t uct_portals_iface_query(uct_iface_h tl_iface, uct_iface_attr_t *attr);
ucs_status_t uct_portals_iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t *addr);
ucs_status_t uct_portals_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t *addr);
unsigned uct_portals_iface_progress(uct_iface_h tl_iface);
ucs_status_t uct_portals_iface_flush(uct_iface_h tl_iface, unsigned flags, uct_completion_t *comp);
ucs_status_t uct_portals_iface_fence(uct_iface_h tl_iface, unsigned flags);
ucs_status_t uct_portals_iface_event_fd_get(uct_iface_h tl_iface, int *fd_p);
ucs_status_t uct_portals_iface_event_arm(uct_iface_h tl_iface, unsigned events);
void uct_portals_iface_progress_enable(uct_iface_h tl_iface, unsigned flags);
void uct_portals_iface_progress_disable(uct_iface_h tl_iface, unsigned flags);

/* ep.cc */
ucs_status_t uct_portals_ep_init(uct_portals_ep_t *ep, const uct_ep_params_t *params);
void uct_portals_ep_cleanup(uct_portals_ep_t *ep);
ucs_status_t uct_portals_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t *comp);
ucs_status_t uct_portals_ep_fence(uct_ep_h tl_ep, unsigned flags);
ucs_status_t uct_portals_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t *req, unsigned flags);
void uct_portals_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void *arg);

/* rma.cc */
ucs_status_t uct_portals_ep_put_short(uct_ep_h tl_ep, const void *buffer, unsigned length,
                                      uint64_t remote_addr, uct_rkey_t rkey);
ssize_t uct_portals_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void *arg, uint64_t remote_addr,
                                 uct_rkey_t rkey);
ucs_status_t uct_portals_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                      uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);
ucs_status_t uct_portals_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb, void *arg,
                                      size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                                      uct_completion_t *comp);
ucs_status_t uct_portals_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t *iov, size_t iovcnt,
                                      uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp);

/* amo.cc */
ucs_status_t uct_portals_ep_atomic32_post(uct_ep_h tl_ep, unsigned opcode, uint32_t value,
                                          uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t uct_portals_ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode, uint64_t value,
                                          uint64_t remote_addr, uct_rkey_t rkey);
ucs_status_t uct_portals_ep_atomic32_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode, uint32_t value,
                                           uint32_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                                           uct_completion_t *comp);
ucs_status_t uct_portals_ep_atomic64_fetch(uct_ep_h tl_ep, uct_atomic_op_t opcode, uint64_t value,
                                           uint64_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                                           uct_completion_t *comp);
ucs_status_t uct_portals_ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare, uint32_t swap,
                                           uint64_t remote_addr, uct_rkey_t rkey, uint32_t *result,
                                           uct_completion_t *comp);
ucs_status_t uct_portals_ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare, uint64_t swap,
                                           uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                                           uct_completion_t *comp);

/* am.cc */
ucs_status_t uct_portals_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header, const void *payload,
                                     unsigned length);
ucs_status_t uct_portals_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t *iov, size_t iovcnt);
ssize_t uct_portals_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb, void *arg,
                                unsigned flags);
ucs_status_t uct_portals_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void *header, unsigned header_length,
                                     const uct_iov_t *iov, size_t iovcnt, unsigned flags,
                                     uct_completion_t *comp);

/* tag.cc */
ucs_status_t uct_portals_ep_tag_eager_short(uct_ep_h tl_ep, uct_tag_t tag, const void *data, size_t length);
ssize_t uct_portals_ep_tag_eager_bcopy(uct_ep_h tl_ep, uct_tag_t tag, uint64_t imm,
                                       uct_pack_callback_t pack_cb, void *arg, unsigned flags);
ucs_status_t uct_portals_ep_tag_eager_zcopy(uct_ep_h tl_ep, uct_tag_t tag, uint64_t imm, const uct_iov_t *iov,
                                            size_t iovcnt, unsigned flags, uct_completion_t *comp);
ucs_status_ptr_t uct_portals_ep_tag_rndv_zcopy(uct_ep_h tl_ep, uct_tag_t tag, const void *header,
                                               unsigned header_length, const uct_iov_t *iov, size_t iovcnt,
                                               unsigned flags, uct_completion_t *comp);
ucs_status_t uct_portals_ep_tag_rndv_cancel(uct_ep_h tl_ep, void *op);
ucs_status_t uct_portals_ep_tag_rndv_request(uct_ep_h tl_ep, uct_tag_t tag, const void *header,
                                             unsigned header_length, unsigned flags);
ucs_status_t uct_portals_iface_tag_recv_zcopy(uct_iface_h tl_iface, uct_tag_t tag, uct_tag_t tag_mask,
                                              const uct_iov_t *iov, size_t iovcnt, uct_tag_context_t *ctx);
ucs_status_t uct_portals_iface_tag_recv_cancel(uct_iface_h tl_iface, uct_tag_context_t *ctx, int force);

#ifdef __cplusplus
}
#endif

#endif
