/* The UCX internal API differences the component meets between UCX 1.13 and 1.22, in one
 * place. configure checks each difference on the headers of the UCX it builds against (a
 * feature, not a version number) and passes UCT_PORTALS_HAVE_<feature>; this header gives
 * the rest of the component one spelling for each. */
#ifndef UCT_PORTALS_UCX_COMPAT_H
#define UCT_PORTALS_UCX_COMPAT_H

#include <ucs/memory/rcache.h>
#include <ucs/sys/stubs.h>
#include <ucs/time/time.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>

#include <string.h>
#include <sys/mman.h>

/* Registration cache settings: UCX_<MD>_RCACHE_* moved from uct to ucs (1.16). */
#ifdef UCT_PORTALS_HAVE_UCS_RCACHE_CONFIG
typedef ucs_rcache_config_t uct_portals_rcache_config_t;
#define UCT_PORTALS_RCACHE_CONFIG_TABLE ucs_config_rcache_table
#else
typedef uct_md_rcache_config_t uct_portals_rcache_config_t;
#define UCT_PORTALS_RCACHE_CONFIG_TABLE uct_md_config_rcache_table
#endif

static inline void uct_portals_rcache_params(ucs_rcache_params_t *params,
                                             const uct_portals_rcache_config_t *config)
{
#ifdef UCT_PORTALS_HAVE_UCS_RCACHE_CONFIG
    ucs_rcache_set_params(params, config);
#else
    uct_md_set_rcache_params(params, config);
#endif
#ifndef UCT_PORTALS_HAVE_RCACHE_GET_ALIGNMENT
    params->max_alignment = ucs_get_page_size();
#endif
}

/* The lookup cost a cached registration adds ("auto": UCX 1.13's estimate for x86). */
static inline double uct_portals_rcache_overhead(const uct_portals_rcache_config_t *config)
{
#ifdef UCT_PORTALS_HAVE_UCS_RCACHE_CONFIG
    return ucs_time_units_to_sec(config->overhead, 180e-9);
#else
    return uct_md_rcache_overhead(config);
#endif
}

static inline ucs_status_t uct_portals_rcache_get(ucs_rcache_t *rcache, void *address, size_t length,
                                                  void *arg, ucs_rcache_region_t **region_p)
{
#ifdef UCT_PORTALS_HAVE_RCACHE_GET_ALIGNMENT
    return ucs_rcache_get(rcache, address, length, ucs_get_page_size(), PROT_READ | PROT_WRITE, arg,
                          region_p);
#else
    return ucs_rcache_get(rcache, address, length, PROT_READ | PROT_WRITE, arg, region_p);
#endif
}

/* A merged region is registered anew by mem_reg (its Memh with it): nothing to carry over. */
#ifdef UCT_PORTALS_HAVE_RCACHE_OPS_MERGE
#define UCT_PORTALS_RCACHE_OPS_MERGE .merge = (void (*)(void *, ucs_rcache_t *, void *, ucs_rcache_region_t *))ucs_empty_function,
#else
#define UCT_PORTALS_RCACHE_OPS_MERGE
#endif

/* uct_md_ops_t.query: the attributes became uct_md_attr_v2_t (1.15). */
#ifdef UCT_PORTALS_HAVE_MD_ATTR_V2
typedef uct_md_attr_v2_t uct_portals_md_attr_t;
#else
typedef uct_md_attr_t uct_portals_md_attr_t;
#endif

static inline void uct_portals_md_attr_fill(uct_portals_md_attr_t *attr, uint64_t flags, uint64_t mem_types,
                                            size_t rkey_packed_size, ucs_linear_func_t reg_cost)
{
#ifdef UCT_PORTALS_HAVE_MD_ATTR_V2
    uct_md_base_md_query(attr);
    attr->flags            = flags;
    attr->reg_mem_types    = mem_types;
    attr->access_mem_types = mem_types;
    attr->cache_mem_types  = mem_types; /* UCP's own registration cache may keep them */
    attr->rkey_packed_size = rkey_packed_size;
    attr->reg_cost         = reg_cost;
#else
    attr->cap.flags            = flags;
    attr->cap.reg_mem_types    = mem_types;
    attr->cap.alloc_mem_types  = 0;
    attr->cap.access_mem_types = mem_types;
    attr->cap.detect_mem_types = 0;
    attr->cap.max_alloc        = 0;
    attr->cap.max_reg          = ULONG_MAX;
    attr->rkey_packed_size     = rkey_packed_size;
    attr->reg_cost             = reg_cost;
    memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
#endif
}

/* uct_md_ops_t.mem_reg: flags became a parameter struct (1.15). A registration function
 * is declared `(uct_md_h md, void *address, size_t length, UCT_PORTALS_MEM_REG_ARGS,
 * uct_mem_h *memh_p)` and reads its flags with UCT_PORTALS_MEM_REG_FLAGS. */
#ifdef UCT_PORTALS_HAVE_MEM_REG_PARAMS
#define UCT_PORTALS_MEM_REG_ARGS const uct_md_mem_reg_params_t *reg_params
#define UCT_PORTALS_MEM_REG_FLAGS UCT_MD_MEM_REG_FIELD_VALUE(reg_params, flags, FIELD_FLAGS, 0)
#else
#define UCT_PORTALS_MEM_REG_ARGS unsigned reg_flags
#define UCT_PORTALS_MEM_REG_FLAGS reg_flags
#endif

/* uct_md_ops_t.mkey_pack: the region's address and length came along (1.15). */
#ifdef UCT_PORTALS_HAVE_MKEY_PACK_ADDRESS
#define UCT_PORTALS_MKEY_PACK_ARGS uct_mem_h memh, void *address, size_t length, const uct_md_mkey_pack_params_t *params
#else
#define UCT_PORTALS_MKEY_PACK_ARGS uct_mem_h memh, const uct_md_mkey_pack_params_t *params
#endif

/* uct_component_t.rkey_unpack: a parameter struct was added (1.19). */
#ifdef UCT_PORTALS_HAVE_RKEY_UNPACK_PARAMS
#define UCT_PORTALS_RKEY_UNPACK_ARGS const void *rkey_buffer, const uct_rkey_unpack_params_t *params
#else
#define UCT_PORTALS_RKEY_UNPACK_ARGS const void *rkey_buffer
#endif

/* Operations UCX added to its tables later; what the component does not offer says so. */
#ifdef UCT_PORTALS_HAVE_RKEY_COMPARE
typedef uct_rkey_compare_params_t uct_portals_rkey_compare_params_t;
#define UCT_PORTALS_COMPONENT_RKEY_COMPARE .rkey_compare = uct_portals_rkey_compare,
#else
typedef struct {
    uint64_t field_mask;
} uct_portals_rkey_compare_params_t; /* (rkey comparison is unused before UCX 1.16) */
#define UCT_PORTALS_COMPONENT_RKEY_COMPARE
#endif
#ifdef UCT_PORTALS_HAVE_MD_MEM_ATTACH
#define UCT_PORTALS_MD_OPS_MEM_ATTACH .mem_attach = (uct_md_mem_attach_func_t)ucs_empty_function_return_unsupported,
#else
#define UCT_PORTALS_MD_OPS_MEM_ATTACH
#endif
#ifdef UCT_PORTALS_HAVE_MD_IS_SOCKADDR_ACCESSIBLE
#define UCT_PORTALS_MD_OPS_IS_SOCKADDR_ACCESSIBLE \
    .is_sockaddr_accessible = (uct_md_is_sockaddr_accessible_func_t)ucs_empty_function_return_zero_int,
#else
#define UCT_PORTALS_MD_OPS_IS_SOCKADDR_ACCESSIBLE
#endif
#ifdef UCT_PORTALS_HAVE_MD_MEM_ELEM_PACK
#define UCT_PORTALS_MD_OPS_MEM_ELEM_PACK .mem_elem_pack = (uct_md_mem_elem_pack_func_t)ucs_empty_function_return_unsupported,
#else
#define UCT_PORTALS_MD_OPS_MEM_ELEM_PACK
#endif

/* Reachability and connection checks with a parameter struct (1.16): answered by the
 * address checks of the component (uct_portals_iface_is_reachable, uct_portals_ep_is_connected_to). */
int uct_portals_iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                                   const uct_iface_addr_t *iface_addr);
const char *uct_portals_iface_unreachable_reason(const uct_iface_h tl_iface, const uct_device_addr_t *dev_addr,
                                                 const uct_iface_addr_t *iface_addr);
int uct_portals_ep_is_connected_to(const uct_ep_h tl_ep, const uct_device_addr_t *dev_addr,
                                   const uct_iface_addr_t *iface_addr);
#ifdef UCT_PORTALS_HAVE_IFACE_IS_REACHABLE_V2
static inline int uct_portals_iface_is_reachable_v2(const uct_iface_h tl_iface,
                                                    const uct_iface_is_reachable_params_t *params)
{
    const char *reason;

    if (!uct_iface_is_reachable_params_addrs_valid(params)) {
        return 0;
    }
    reason = uct_portals_iface_unreachable_reason(tl_iface, params->device_addr, params->iface_addr);
    if (reason != NULL) {
        uct_iface_fill_info_str_buf(params, "%s", reason);
        return 0;
    }
    return uct_iface_scope_is_reachable(tl_iface, params);
}

static inline int uct_portals_ep_is_connected(const uct_ep_h tl_ep, const uct_ep_is_connected_params_t *params)
{
    const uct_device_addr_t *dev_addr = (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_DEVICE_ADDR) ?
                                                params->device_addr : NULL;
    const uct_iface_addr_t *iface_addr = (params->field_mask & UCT_EP_IS_CONNECTED_FIELD_IFACE_ADDR) ?
                                                 params->iface_addr : NULL;
    return uct_portals_ep_is_connected_to(tl_ep, dev_addr, iface_addr);
}

#define UCT_PORTALS_INTERNAL_OPS_REACHABLE \
    .ep_connect_to_ep_v2   = (uct_ep_connect_to_ep_v2_func_t)ucs_empty_function_return_unsupported, \
    .iface_is_reachable_v2 = uct_portals_iface_is_reachable_v2, \
    .ep_is_connected       = uct_portals_ep_is_connected,
#else
#define UCT_PORTALS_INTERNAL_OPS_REACHABLE
#endif
#ifdef UCT_PORTALS_HAVE_IFACE_QUERY_V2
#define UCT_PORTALS_INTERNAL_OPS_QUERY_V2 .iface_query_v2 = uct_iface_base_query_v2,
#else
#define UCT_PORTALS_INTERNAL_OPS_QUERY_V2
#endif
#ifdef UCT_PORTALS_HAVE_EP_GET_DEVICE_EP
#define UCT_PORTALS_INTERNAL_OPS_DEVICE_EP \
    .ep_get_device_ep = (uct_ep_get_device_ep_func_t)ucs_empty_function_return_unsupported,
#else
#define UCT_PORTALS_INTERNAL_OPS_DEVICE_EP
#endif
#ifdef UCT_PORTALS_HAVE_EP_PUT_SGL_ZCOPY
#define UCT_PORTALS_INTERNAL_OPS_PUT_SGL \
    .ep_put_sgl_zcopy = (uct_ep_put_sgl_zcopy_func_t)ucs_empty_function_return_unsupported,
#else
#define UCT_PORTALS_INTERNAL_OPS_PUT_SGL
#endif

#endif
