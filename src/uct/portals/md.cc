// The memory domain: a registration is an ME on the MD's RMA portal whose match bits are the
// registration key; the packed rkey is {key, base, portal} (DESIGN: UCT mapping). Devices
// are the host's IPv4 network interfaces.
#include "iface_impl.h"

extern "C" {
#include <ucm/api/ucm.h>
#include <ucs/stats/stats.h>
#include <ucs/sys/string.h>
}

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <sys/mman.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace uct_portals;

namespace {

ucs_status_t md_query(uct_md_h tl_md, uct_portals_md_attr_t *attr) {
    uct_portals_md_attr_fill(attr, UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY | UCT_MD_FLAG_NEED_MEMH,
                             UCS_BIT(UCS_MEMORY_TYPE_HOST), sizeof(uct_portals_rkey_t),
                             ucs_derived_of(tl_md, uct_portals_md_t)->reg_cost);
    return UCS_OK;
}

// Exposes [address, address + length) as an ME whose match bits are a fresh key.
ucs_status_t expose(uct_portals_md_t *md, void *address, size_t length, ucs_log_level_t fail_lvl, Memh *h) {
    h->key = __atomic_fetch_add(&md->next_key, 1, __ATOMIC_RELAXED);  // threads register at once
    h->base = reinterpret_cast<uintptr_t>(address);
    const ptl_me_t me = make_me(
        address, length,
        PTL_ME_OP_PUT | PTL_ME_OP_GET | PTL_ME_EVENT_COMM_DISABLE | PTL_ME_EVENT_SUCCESS_DISABLE, h->key, 0);
    const int rc = PtlMEAppend(md->ni, md->rma_pt, &me, PTL_PRIORITY_LIST, h, &h->me);
    if (rc != PTL_OK) {
        ucs_log(fail_lvl, "portals: registering %p length %zu failed: %d", address, length, rc);
        return status_of(rc);
    }
    return UCS_OK;
}

ucs_status_t unexpose(const Memh *h) {
    const int rc = PtlMEUnlink(h->me);
    return rc == PTL_OK ? UCS_OK : status_of(rc);
}

ucs_status_t mem_reg(uct_md_h tl_md, void *address, size_t length, UCT_PORTALS_MEM_REG_ARGS,
                     uct_mem_h *memh_p) {
    uct_portals_md_t *md = ucs_derived_of(tl_md, uct_portals_md_t);
    auto *h = static_cast<Memh *>(std::malloc(sizeof(Memh)));
    if (!h) return UCS_ERR_NO_MEMORY;
    const ucs_status_t s = expose(md, address, length, uct_md_reg_log_lvl(UCT_PORTALS_MEM_REG_FLAGS), h);
    if (s != UCS_OK) {
        std::free(h);
        return s;
    }
    *memh_p = h;
    return UCS_OK;
}

ucs_status_t mem_dereg(uct_md_h, const uct_md_mem_dereg_params_t *params) {
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    auto *h = static_cast<Memh *>(params->memh);
    const ucs_status_t s = unexpose(h);
    std::free(h);
    return s;
}

// With the registration cache, a memh is the Memh inside its cache region.
struct CachedRegion {
    ucs_rcache_region_t super;
    Memh memh;
};

ucs_status_t cached_mem_reg(uct_md_h tl_md, void *address, size_t length, UCT_PORTALS_MEM_REG_ARGS,
                            uct_mem_h *memh_p) {
    uct_portals_md_t *md = ucs_derived_of(tl_md, uct_portals_md_t);
    ucs_rcache_region_t *region;
    uint64_t flags = UCT_PORTALS_MEM_REG_FLAGS;
    const ucs_status_t s = uct_portals_rcache_get(md->rcache, address, length, &flags, &region);
    if (s != UCS_OK) return s;
    *memh_p = &ucs_derived_of(region, CachedRegion)->memh;
    return UCS_OK;
}

ucs_status_t cached_mem_dereg(uct_md_h tl_md, const uct_md_mem_dereg_params_t *params) {
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    uct_portals_md_t *md = ucs_derived_of(tl_md, uct_portals_md_t);
    auto *region = ucs_container_of(static_cast<Memh *>(params->memh), CachedRegion, memh);
    ucs_rcache_region_put(md->rcache, &region->super);
    return UCS_OK;
}

ucs_status_t rcache_reg_cb(void *context, ucs_rcache_t *, void *arg, ucs_rcache_region_t *rregion,
                           uint16_t rcache_flags) {
    auto *md = static_cast<uct_portals_md_t *>(context);
    auto *region = ucs_derived_of(rregion, CachedRegion);
    const uint64_t flags = *static_cast<uint64_t *>(arg);
    const ucs_log_level_t fail_lvl =
        (rcache_flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS) ? UCS_LOG_LEVEL_DEBUG : uct_md_reg_log_lvl(flags);
    return expose(md, reinterpret_cast<void *>(rregion->super.start),
                  rregion->super.end - rregion->super.start, fail_lvl, &region->memh);
}

void rcache_dereg_cb(void *, ucs_rcache_t *, ucs_rcache_region_t *rregion) {
    const Memh &h = ucs_derived_of(rregion, CachedRegion)->memh;
    const ucs_status_t s = unexpose(&h);
    if (s != UCS_OK)
        ucs_warn("portals: releasing registration key %" PRIu64 " failed: %s", h.key, ucs_status_string(s));
}

void rcache_dump_cb(void *, ucs_rcache_t *, ucs_rcache_region_t *rregion, char *buf, size_t max) {
    const Memh &h = ucs_derived_of(rregion, CachedRegion)->memh;
    snprintf(buf, max, "key %" PRIu64 " base 0x%" PRIx64, h.key, h.base);
}

// The ucx_compat.h macros are whole initializers, which clang-format would join.
// clang-format off
const ucs_rcache_ops_t rcache_ops = {
    .mem_reg = rcache_reg_cb,
    .mem_dereg = rcache_dereg_cb,
    UCT_PORTALS_RCACHE_OPS_MERGE
    .dump_region = rcache_dump_cb,
};
// clang-format on

ucs_status_t mkey_pack(uct_md_h tl_md, UCT_PORTALS_MKEY_PACK_ARGS, void *rkey_buffer) {
    uct_portals_md_t *md = ucs_derived_of(tl_md, uct_portals_md_t);
    const auto *h = static_cast<const Memh *>(memh);
    uct_portals_rkey_t rk{h->key, h->base, uint32_t(md->rma_pt), 0};
    std::memcpy(rkey_buffer, &rk, sizeof rk);
    return UCS_OK;
}

void md_close(uct_md_h tl_md) {
    uct_portals_md_t *md = ucs_derived_of(tl_md, uct_portals_md_t);
    if (md->rcache) ucs_rcache_destroy(md->rcache);
    PtlPTFree(md->ni, md->rma_pt);
    PtlNIFini(md->ni);
    PtlFini();
    ucs_free(md);
}

// UCT calls every md op without a NULL check: what the md does not offer says so.
// clang-format off
uct_md_ops_t md_ops = {
    .close = md_close,
    .query = md_query,
    .mem_alloc = (uct_md_mem_alloc_func_t)ucs_empty_function_return_unsupported,
    .mem_free = (uct_md_mem_free_func_t)ucs_empty_function_return_unsupported,
    .mem_advise = (uct_md_mem_advise_func_t)ucs_empty_function_return_unsupported,
    .mem_reg = mem_reg,
    .mem_dereg = mem_dereg,
    .mem_query = (uct_md_mem_query_func_t)ucs_empty_function_return_unsupported,
    .mkey_pack = mkey_pack,
    UCT_PORTALS_MD_OPS_IS_SOCKADDR_ACCESSIBLE
    UCT_PORTALS_MD_OPS_MEM_ATTACH
    .detect_memory_type = (uct_md_detect_memory_type_func_t)ucs_empty_function_return_unsupported,
    UCT_PORTALS_MD_OPS_MEM_ELEM_PACK
};
// clang-format on

uct_md_ops_t cached_md_ops = [] {
    uct_md_ops_t ops = md_ops;
    ops.mem_reg = cached_mem_reg;
    ops.mem_dereg = cached_mem_dereg;
    return ops;
}();

// The registration cache (UCX_PORTALS_RCACHE); "try" falls back to uncached registrations.
ucs_status_t open_rcache(uct_portals_md_t *md, const uct_portals_md_config_t *config) {
    if (config->rcache_enable == UCS_NO) return UCS_OK;
    ucs_rcache_params_t params;
    uct_portals_rcache_params(&params, &config->rcache);
    params.region_struct_size = sizeof(CachedRegion);
    params.ucm_events = UCM_EVENT_VM_UNMAPPED;
    params.context = md;
    params.ops = &rcache_ops;
    const ucs_status_t s = ucs_rcache_create(&params, "portals", ucs_stats_get_root(), &md->rcache);
    if (s != UCS_OK) {
        md->rcache = nullptr;
        if (config->rcache_enable == UCS_YES) {
            ucs_error("portals: creating the registration cache failed: %s", ucs_status_string(s));
            return s;
        }
        ucs_debug("portals: no registration cache: %s", ucs_status_string(s));
        return UCS_OK;
    }
    md->super.ops = &cached_md_ops;
    md->reg_cost = ucs_linear_func_make(uct_portals_rcache_overhead(&config->rcache), 0);
    return UCS_OK;
}

}  // namespace

ucs_status_t uct_portals::status_of(int rc) {
    switch (rc) {
        case PTL_OK: return UCS_OK;
        case PTL_NO_SPACE: return UCS_ERR_NO_MEMORY;
        case PTL_ARG_INVALID: return UCS_ERR_INVALID_PARAM;
        case PTL_NO_INIT: return UCS_ERR_NO_DEVICE;
        case PTL_PID_IN_USE: return UCS_ERR_BUSY;
        case PTL_IN_USE: return UCS_ERR_BUSY;
        case PTL_PT_FULL: return UCS_ERR_EXCEEDS_LIMIT;
        case PTL_LIST_TOO_LONG: return UCS_ERR_EXCEEDS_LIMIT;
        default: return UCS_ERR_IO_ERROR;
    }
}

extern "C" ucs_status_t uct_portals_query_md_resources(uct_component_t *component,
                                                       uct_md_resource_desc_t **resources_p,
                                                       unsigned *num_resources_p) {
    return uct_md_query_single_md_resource(component, resources_p, num_resources_p);
}

extern "C" ucs_status_t uct_portals_md_open(uct_component_t *, const char *, const uct_md_config_t *tl_config,
                                            uct_md_h *md_p) {
    int rc = PtlInit();
    if (rc != PTL_OK) {
        ucs_error("portals: PtlInit failed: %d", rc);
        return status_of(rc);
    }
    auto *md = static_cast<uct_portals_md_t *>(ucs_calloc(1, sizeof(uct_portals_md_t), "portals md"));
    if (!md) {
        PtlFini();
        return UCS_ERR_NO_MEMORY;
    }
    md->super.ops = &md_ops;
    md->super.component = &uct_portals_component;
    md->next_key = 1;
    md->reg_cost = ucs_linear_func_make(200e-9, 0);  // one ME append; no pinning
    rc = PtlNIInit(PTL_IFACE_DEFAULT, PTL_NI_MATCHING | PTL_NI_PHYSICAL, PTL_PID_ANY, nullptr, nullptr,
                   &md->ni);
    if (rc == PTL_OK) {
        // A put or get to a deregistered region must still complete (with an error) at the peer.
        rc = PtlXNINotifyDrops(md->ni, 1);
        if (rc == PTL_OK) rc = PtlPTAlloc(md->ni, 0, PTL_EQ_NONE, PTL_PT_ANY, &md->rma_pt);
        if (rc != PTL_OK) PtlNIFini(md->ni);
    }
    if (rc != PTL_OK) {
        ucs_error("portals: opening the memory domain failed: %d", rc);
        ucs_free(md);
        PtlFini();
        return status_of(rc);
    }
    const ucs_status_t s = open_rcache(md, ucs_derived_of(tl_config, uct_portals_md_config_t));
    if (s != UCS_OK) {
        md_close(&md->super);
        return s;
    }
    *md_p = &md->super;
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_rkey_unpack(uct_component_t *, UCT_PORTALS_RKEY_UNPACK_ARGS,
                                                uct_rkey_t *rkey_p, void **handle_p) {
    auto *rk = static_cast<uct_portals_rkey_t *>(ucs_malloc(sizeof(uct_portals_rkey_t), "portals rkey"));
    if (!rk) return UCS_ERR_NO_MEMORY;
    std::memcpy(rk, rkey_buffer, sizeof *rk);
    *rkey_p = reinterpret_cast<uct_rkey_t>(rk);
    *handle_p = nullptr;
    return UCS_OK;
}

extern "C" ucs_status_t uct_portals_rkey_release(uct_component_t *, uct_rkey_t rkey, void *) {
    ucs_free(reinterpret_cast<void *>(rkey));
    return UCS_OK;
}

// Two rkeys are equal when they name the same registration: UCP orders and deduplicates by this.
extern "C" ucs_status_t uct_portals_rkey_compare(uct_component_t *, uct_rkey_t rkey1, uct_rkey_t rkey2,
                                                 const uct_portals_rkey_compare_params_t *params,
                                                 int *result) {
    if (params->field_mask != 0 || result == nullptr) return UCS_ERR_INVALID_PARAM;
    const auto *a = reinterpret_cast<const uct_portals_rkey_t *>(rkey1);
    const auto *b = reinterpret_cast<const uct_portals_rkey_t *>(rkey2);
    const auto order = [](uint64_t x, uint64_t y) { return (x > y) - (x < y); };
    int r = order(a->pt, b->pt);
    if (r == 0) r = order(a->key, b->key);
    if (r == 0) r = order(a->base, b->base);
    *result = r;
    return UCS_OK;
}

// One device per IPv4 interface that is up, like UCX's tcp transport. The engine serves all
// of them through one physical NI per process (its nid is the address of PTL_IFACE or the
// first non-loopback interface), so the device chooses no wire; it names where UCP sees the
// transport.
extern "C" ucs_status_t uct_portals_query_tl_devices(uct_md_h, uct_tl_device_resource_t **tl_devices_p,
                                                     unsigned *num_tl_devices_p) {
    std::vector<std::string> names;
    struct ifaddrs *ifa = nullptr;
    if (getifaddrs(&ifa) == 0) {
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
            bool seen = false;
            for (const std::string &n : names) seen = seen || n == i->ifa_name;
            if (!seen) names.emplace_back(i->ifa_name);
        }
        freeifaddrs(ifa);
    }
    if (names.empty()) {
        *tl_devices_p = nullptr;
        *num_tl_devices_p = 0;
        return UCS_OK;
    }
    auto *devs = static_cast<uct_tl_device_resource_t *>(
        ucs_calloc(names.size(), sizeof(uct_tl_device_resource_t), "portals devices"));
    if (!devs) return UCS_ERR_NO_MEMORY;
    for (size_t i = 0; i < names.size(); ++i) {
        ucs_snprintf_zero(devs[i].name, sizeof(devs[i].name), "%s", names[i].c_str());
        devs[i].type = UCT_DEVICE_TYPE_NET;
        devs[i].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    }
    *tl_devices_p = devs;
    *num_tl_devices_p = unsigned(names.size());
    return UCS_OK;
}
