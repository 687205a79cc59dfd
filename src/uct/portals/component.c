/* UCX registration of the "portals" component: configuration tables (UCX_PORTALS_*), the
 * UCS classes of iface and ep, and the operation tables. Kept in C because UCX's class and
 * table macros rely on C designated initialisers; every operation lives in the C++ files. */
#include "uct_portals.h"

#include <ucs/type/class.h>

static ucs_config_field_t uct_portals_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_portals_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"RCACHE", "try",
     "Keep registrations in a registration cache: a deregistered region stays exposed (its\n"
     "rkey valid) until the memory is unmapped or the cache evicts it, as on UCX's IB and\n"
     "KNEM memory domains. UCP's tag-offload rendezvous relies on this: it deregisters a\n"
     "receive buffer whose rkey it has just sent to the peer.",
     ucs_offsetof(uct_portals_md_config_t, rcache_enable), UCS_CONFIG_TYPE_TERNARY},

    {"", "", NULL, ucs_offsetof(uct_portals_md_config_t, rcache),
     UCS_CONFIG_TYPE_TABLE(UCT_PORTALS_RCACHE_CONFIG_TABLE)},

    {NULL}
};

static ucs_config_field_t uct_portals_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_portals_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},

    {"SEG_SIZE", "8k",
     "Largest active message; each receive descriptor holds one (and an eager tagged message\n"
     "up to this size that meets no posted receive).",
     ucs_offsetof(uct_portals_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"RX_DESCS", "256",
     "Receive descriptors posted on each receive portal (active messages, unexpected tagged\n"
     "messages). A message that finds none is still delivered: the receiver fetches it from\n"
     "the sender, which keeps it until then.",
     ucs_offsetof(uct_portals_iface_config_t, rx_descs), UCS_CONFIG_TYPE_UINT},

    {"TX_DESCS", "256",
     "Send buffers for active and eager tagged messages; each is held until the receiver\n"
     "reports the message processed (no acknowledgement per message: reports come in\n"
     "batches or with the receiver's own messages). When none is free, sends return\n"
     "UCS_ERR_NO_RESOURCE.",
     ucs_offsetof(uct_portals_iface_config_t, tx_descs), UCS_CONFIG_TYPE_UINT},

    {"TX_WINDOW", "64",
     "Send buffers one peer interface may hold at a time; beyond, sends to it return\n"
     "UCS_ERR_NO_RESOURCE until it reports messages processed.",
     ucs_offsetof(uct_portals_iface_config_t, tx_window), UCS_CONFIG_TYPE_UINT},

    {"GRANT_BATCH", "16",
     "A receiver reports processed messages to their sender when this many are owed (or\n"
     "with its next message to that sender, when the sender asked, or after 1 ms idle).\n"
     "Keep it below the senders' TX_WINDOW.",
     ucs_offsetof(uct_portals_iface_config_t, grant_batch), UCS_CONFIG_TYPE_UINT},

    {"TX_QUEUE_LEN", "1024",
     "Operations in flight on one interface before sends return UCS_ERR_NO_RESOURCE.",
     ucs_offsetof(uct_portals_iface_config_t, tx_queue_len), UCS_CONFIG_TYPE_UINT},

    {"RNDV_QUEUE_LEN", "16384",
     "Tagged rendezvous sends in flight on one interface before tag_rndv_zcopy returns\n"
     "UCS_ERR_NO_RESOURCE. They wait for their receiver but use none of the send resources\n"
     "above (which the receiver's answers may need); each holds two match entries.",
     ucs_offsetof(uct_portals_iface_config_t, rndv_queue_len), UCS_CONFIG_TYPE_UINT},

    {"TM_ENABLE", "y",
     "Tag matching by the Portals engine's priority and overflow lists (UCT tag offload).\n"
     "With n, the iface offers no tag operations and UCP matches tags in software over\n"
     "active messages, as on UCX's rc_x with RC_TM_ENABLE=n.",
     ucs_offsetof(uct_portals_iface_config_t, tm_enable), UCS_CONFIG_TYPE_BOOL},

    {"TM_LIST_SIZE", "1024",
     "Tagged receives that can be posted at once (uct_iface_tag_recv_zcopy).",
     ucs_offsetof(uct_portals_iface_config_t, tm_list_size), UCS_CONFIG_TYPE_UINT},

    {"TM_MIN_RECV", "4k",
     "Smallest receive UCP gives the engine to match (the iface's min_recv; UCP also needs\n"
     "UCX_TM_THRESH): smaller ones UCP matches in software, their messages landing in a\n"
     "receive descriptor first. At most SEG_SIZE + 1 (a larger message meeting no posted\n"
     "receive is fetched from its sender).",
     ucs_offsetof(uct_portals_iface_config_t, tm_min_recv), UCS_CONFIG_TYPE_MEMUNITS},

    {"EAGER_MAX", "16k",
     "Largest eager tagged message (short, bcopy, zcopy); larger ones go by rendezvous. Send\n"
     "buffers are this size (or SEG_SIZE, if larger). An eager message larger than SEG_SIZE\n"
     "that meets no posted receive finds no receive descriptor: the receiver fetches it\n"
     "from the sender's buffer.",
     ucs_offsetof(uct_portals_iface_config_t, eager_max), UCS_CONFIG_TYPE_MEMUNITS},

    {"RNDV_MAX_HDR", "128",
     "Largest user header of a tagged rendezvous (UCP needs at least 17 bytes).",
     ucs_offsetof(uct_portals_iface_config_t, rndv_max_hdr), UCS_CONFIG_TYPE_MEMUNITS},

    {"LATENCY", "800ns",
     "One-way latency reported to UCP for lane selection.",
     ucs_offsetof(uct_portals_iface_config_t, latency_ns), UCS_CONFIG_TYPE_TIME},

    {"BANDWIDTH", "8000MBs",
     "Bandwidth reported to UCP for lane selection.",
     ucs_offsetof(uct_portals_iface_config_t, bandwidth_mbs), UCS_CONFIG_TYPE_BW},

    {"STATS", "n",
     "Print each interface's tag-matching counters to stderr when it closes (at finalize):\n"
     "receives UCP posted to the engine, messages the engine matched to them, messages that\n"
     "met none and went to UCP's software matching. Shows whether tag offload is used.",
     ucs_offsetof(uct_portals_iface_config_t, stats), UCS_CONFIG_TYPE_BOOL},

    {NULL}
};

static uct_iface_ops_t uct_portals_iface_ops;

/* UCX's own defaults, plus the operations later UCX versions added (ucx_compat.h). */
static uct_iface_internal_ops_t uct_portals_iface_internal_ops = {
    UCT_PORTALS_INTERNAL_OPS_QUERY_V2
    .iface_estimate_perf = uct_base_iface_estimate_perf,
    .iface_vfs_refresh   = (uct_iface_vfs_refresh_func_t)ucs_empty_function,
    .ep_query            = (uct_ep_query_func_t)ucs_empty_function_return_unsupported,
    .ep_invalidate       = (uct_ep_invalidate_func_t)ucs_empty_function_return_unsupported,
    UCT_PORTALS_INTERNAL_OPS_REACHABLE
    UCT_PORTALS_INTERNAL_OPS_DEVICE_EP
    UCT_PORTALS_INTERNAL_OPS_PUT_SGL
};

static UCS_CLASS_INIT_FUNC(uct_portals_iface_t, uct_md_h md, uct_worker_h worker,
                           const uct_iface_params_t *params,
                           const uct_iface_config_t *tl_config)
{
    const uct_portals_iface_config_t *config =
            ucs_derived_of(tl_config, uct_portals_iface_config_t);

    UCS_CLASS_CALL_SUPER_INIT(
            uct_base_iface_t, &uct_portals_iface_ops, &uct_portals_iface_internal_ops, md,
            worker, params,
            tl_config UCS_STATS_ARG((params->field_mask & UCT_IFACE_PARAM_FIELD_STATS_ROOT) ?
                                            params->stats_root : NULL)
                    UCS_STATS_ARG(UCT_PORTALS_NAME));

    return uct_portals_iface_init(self, md, params, config);
}

static UCS_CLASS_CLEANUP_FUNC(uct_portals_iface_t)
{
    uct_base_iface_progress_disable(&self->super.super, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_portals_iface_cleanup(self);
}

UCS_CLASS_DEFINE(uct_portals_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_portals_iface_t, uct_iface_t, uct_md_h, uct_worker_h,
                                 const uct_iface_params_t *, const uct_iface_config_t *);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_portals_iface_t, uct_iface_t);

static UCS_CLASS_INIT_FUNC(uct_portals_ep_t, const uct_ep_params_t *params)
{
    uct_portals_iface_t *iface = ucs_derived_of(params->iface, uct_portals_iface_t);

    UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);
    return uct_portals_ep_init(self, params);
}

static UCS_CLASS_CLEANUP_FUNC(uct_portals_ep_t)
{
    uct_portals_ep_cleanup(self);
}

UCS_CLASS_DEFINE(uct_portals_ep_t, uct_base_ep_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_portals_ep_t, uct_ep_t, const uct_ep_params_t *);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_portals_ep_t, uct_ep_t);

static uct_iface_ops_t uct_portals_iface_ops = {
    .ep_put_short             = uct_portals_ep_put_short,
    .ep_put_bcopy             = uct_portals_ep_put_bcopy,
    .ep_put_zcopy             = uct_portals_ep_put_zcopy,
    .ep_get_bcopy             = uct_portals_ep_get_bcopy,
    .ep_get_zcopy             = uct_portals_ep_get_zcopy,
    .ep_am_short              = uct_portals_ep_am_short,
    .ep_am_short_iov          = uct_portals_ep_am_short_iov,
    .ep_am_bcopy              = uct_portals_ep_am_bcopy,
    .ep_am_zcopy              = uct_portals_ep_am_zcopy,
    .ep_atomic_cswap64        = uct_portals_ep_atomic_cswap64,
    .ep_atomic_cswap32        = uct_portals_ep_atomic_cswap32,
    .ep_atomic32_post         = uct_portals_ep_atomic32_post,
    .ep_atomic64_post         = uct_portals_ep_atomic64_post,
    .ep_atomic32_fetch        = uct_portals_ep_atomic32_fetch,
    .ep_atomic64_fetch        = uct_portals_ep_atomic64_fetch,
    .ep_tag_eager_short       = uct_portals_ep_tag_eager_short,
    .ep_tag_eager_bcopy       = uct_portals_ep_tag_eager_bcopy,
    .ep_tag_eager_zcopy       = uct_portals_ep_tag_eager_zcopy,
    .ep_tag_rndv_zcopy        = uct_portals_ep_tag_rndv_zcopy,
    .ep_tag_rndv_cancel       = uct_portals_ep_tag_rndv_cancel,
    .ep_tag_rndv_request      = uct_portals_ep_tag_rndv_request,
    .iface_tag_recv_zcopy     = uct_portals_iface_tag_recv_zcopy,
    .iface_tag_recv_cancel    = uct_portals_iface_tag_recv_cancel,
    .ep_pending_add           = uct_portals_ep_pending_add,
    .ep_pending_purge         = uct_portals_ep_pending_purge,
    .ep_flush                 = uct_portals_ep_flush,
    .ep_fence                 = uct_portals_ep_fence,
    .ep_check                 = (uct_ep_check_func_t)ucs_empty_function_return_success,
    .ep_create                = UCS_CLASS_NEW_FUNC_NAME(uct_portals_ep_t),
    .ep_destroy               = UCS_CLASS_DELETE_FUNC_NAME(uct_portals_ep_t),
    .iface_flush              = uct_portals_iface_flush,
    .iface_fence              = uct_portals_iface_fence,
    .iface_progress_enable    = uct_portals_iface_progress_enable,
    .iface_progress_disable   = uct_portals_iface_progress_disable,
    .iface_progress           = uct_portals_iface_progress,
    .iface_event_fd_get       = uct_portals_iface_event_fd_get,
    .iface_event_arm          = uct_portals_iface_event_arm,
    .iface_close              = UCS_CLASS_DELETE_FUNC_NAME(uct_portals_iface_t),
    .iface_query              = uct_portals_iface_query,
    .iface_get_device_address = uct_portals_iface_get_device_address,
    .iface_get_address        = uct_portals_iface_get_address,
    .iface_is_reachable       = uct_portals_iface_is_reachable
};

uct_component_t uct_portals_component = {
    .query_md_resources = uct_portals_query_md_resources,
    .md_open            = uct_portals_md_open,
    .cm_open            = (uct_component_cm_open_func_t)ucs_empty_function_return_unsupported,
    .rkey_unpack        = uct_portals_rkey_unpack,
    .rkey_ptr           = (uct_component_rkey_ptr_func_t)ucs_empty_function_return_unsupported,
    .rkey_release       = uct_portals_rkey_release,
    UCT_PORTALS_COMPONENT_RKEY_COMPARE
    .name               = UCT_PORTALS_NAME,
    .md_config          = {
        .name           = "Portals memory domain",
        .prefix         = "PORTALS_",
        .table          = uct_portals_md_config_table,
        .size           = sizeof(uct_portals_md_config_t),
    },
    .cm_config          = UCS_CONFIG_EMPTY_GLOBAL_LIST_ENTRY,
    .tl_list            = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_portals_component),
    .flags              = 0,
    .md_vfs_init        = (uct_component_md_vfs_init_func_t)ucs_empty_function
};

UCT_TL_DEFINE_ENTRY(&uct_portals_component, portals, uct_portals_query_tl_devices,
                    uct_portals_iface_t, "PORTALS_", uct_portals_iface_config_table,
                    uct_portals_iface_config_t);

UCT_SINGLE_TL_INIT(&uct_portals_component, portals, ctor,,)
