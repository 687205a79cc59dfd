// The launcher for jobs started by a PMIx server: Open MPI's mpirun (ORTE), PRRTE's prterun,
// Slurm's srun --mpi=pmix. libpmix is opened at run time (PTLRT_PMIX_LIB, else libpmix.so.2),
// so libportals4 neither needs it installed nor loads it into processes that never use it;
// its header only fixes the ABI at build time.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "launcher.h"

#if PTL_HAVE_PMIX
#include <pmix.h>

namespace ptl::rt {
namespace {

struct PmixLib {
    decltype(&PMIx_Init) init = nullptr;
    decltype(&PMIx_Finalize) finalize = nullptr;
    decltype(&PMIx_Put) put = nullptr;
    decltype(&PMIx_Commit) commit = nullptr;
    decltype(&PMIx_Fence) fence = nullptr;
    decltype(&PMIx_Get) get = nullptr;
    decltype(&PMIx_Error_string) error_string = nullptr;

    bool open(std::string &why) {
        const char *env = std::getenv("PTLRT_PMIX_LIB");
        void *h = nullptr;
        for (const char *name : {env, "libpmix.so.2", "libpmix.so"}) {
            if (!name) continue;
            h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
            if (h || name == env) break;
        }
        if (!h) {
            why = std::string("cannot load libpmix (apt-get install libpmix2, or set PTLRT_PMIX_LIB): ") +
                  dlerror();
            return false;
        }
        return bind(h, "PMIx_Init", init, why) && bind(h, "PMIx_Finalize", finalize, why) &&
               bind(h, "PMIx_Put", put, why) && bind(h, "PMIx_Commit", commit, why) &&
               bind(h, "PMIx_Fence", fence, why) && bind(h, "PMIx_Get", get, why) &&
               bind(h, "PMIx_Error_string", error_string, why);
    }

    template <typename Fn>
    static bool bind(void *h, const char *sym, Fn &fn, std::string &why) {
        fn = reinterpret_cast<Fn>(dlsym(h, sym));
        if (!fn) why = std::string("libpmix has no ") + sym;
        return fn != nullptr;
    }
};

class PmixLauncher final : public Launcher {
public:
    ~PmixLauncher() override {
        if (initialized_) pmix_.finalize(nullptr, 0);
    }

    bool start(std::string &why) {
        if (!pmix_.open(why)) return false;
        pmix_status_t rc = pmix_.init(&me_, nullptr, 0);
        if (rc != PMIX_SUCCESS) return fail(why, "PMIx_Init", rc);
        initialized_ = true;
        pmix_proc_t job = me_;
        job.rank = PMIX_RANK_WILDCARD;
        pmix_value_t *v = nullptr;
        rc = pmix_.get(&job, PMIX_JOB_SIZE, nullptr, 0, &v);
        if (rc != PMIX_SUCCESS) return fail(why, "PMIx_Get(" PMIX_JOB_SIZE ")", rc);
        if (v->type == PMIX_UINT32) size_ = int(v->data.uint32);
        std::free(v);
        if (size_ <= 0 || int(me_.rank) >= size_) {
            why = "PMIx reports a job size that does not contain this rank";
            return false;
        }
        return true;
    }

    const char *name() const override { return "pmix"; }
    int rank() const override { return int(me_.rank); }
    int size() const override { return size_; }

    bool barrier() override { return fence(false); }

    // PMIx's own store. PMI-1 keys do not name the rank that put them and ORTE's server does not
    // answer PMIX_RANK_UNDEF for rank data, so kvs_get asks each rank's data in turn, from what
    // the last fence collected only (PMIX_OPTIONAL): a missing key fails at once.
    std::string kvs_name() const override { return me_.nspace; }
    size_t kvs_key_max() const override { return PMIX_MAX_KEYLEN; }
    bool kvs_put(const std::string &key, const std::string &value) override {
        pmix_value_t v{};
        v.type = PMIX_STRING;
        v.data.string = const_cast<char *>(value.c_str());
        return pmix_.put(PMIX_GLOBAL, key.c_str(), &v) == PMIX_SUCCESS;
    }
    bool kvs_commit() override { return pmix_.commit() == PMIX_SUCCESS; }
    bool kvs_fence() override { return pmix_.commit() == PMIX_SUCCESS && fence(true); }
    bool kvs_get(const std::string &key, std::string &value) override {
        pmix_info_t info{};
        std::strncpy(info.key, PMIX_OPTIONAL, PMIX_MAX_KEYLEN);
        info.value.type = PMIX_BOOL;
        info.value.data.flag = true;
        for (int i = 0; i < size_; ++i) {
            pmix_proc_t peer = me_;
            peer.rank = pmix_rank_t((int(me_.rank) + i) % size_);  // its own puts first
            pmix_value_t *v = nullptr;
            if (pmix_.get(&peer, key.c_str(), &info, 1, &v) != PMIX_SUCCESS || !v) continue;
            const bool ok = v->type == PMIX_STRING && v->data.string;
            if (ok) value = v->data.string;
            if (v->type == PMIX_STRING) std::free(v->data.string);
            std::free(v);
            if (ok) return true;
        }
        return false;
    }

    bool allgather(const void *in, void *out, size_t len) override {
        // Keys are never reused: a later round must not read an earlier round's cached value.
        const std::string key = "ptlrt." + std::to_string(round_++);
        pmix_value_t mine{};
        mine.type = PMIX_BYTE_OBJECT;
        mine.data.bo.bytes = static_cast<char *>(const_cast<void *>(in));
        mine.data.bo.size = len;
        if (pmix_.put(PMIX_GLOBAL, key.c_str(), &mine) != PMIX_SUCCESS) return false;
        if (pmix_.commit() != PMIX_SUCCESS || !fence(true)) return false;
        for (int r = 0; r < size_; ++r) {
            pmix_proc_t peer = me_;
            peer.rank = pmix_rank_t(r);
            pmix_value_t *v = nullptr;
            if (pmix_.get(&peer, key.c_str(), nullptr, 0, &v) != PMIX_SUCCESS) return false;
            const bool ok = v->type == PMIX_BYTE_OBJECT && v->data.bo.size == len;
            if (ok) std::memcpy(static_cast<char *>(out) + size_t(r) * len, v->data.bo.bytes, len);
            if (v->type == PMIX_BYTE_OBJECT) std::free(v->data.bo.bytes);
            std::free(v);
            if (!ok) return false;
        }
        return true;
    }

private:
    bool fence(bool collect) {
        pmix_info_t info[2]{};
        std::strncpy(info[0].key, PMIX_COLLECT_DATA, PMIX_MAX_KEYLEN);
        info[0].value.type = PMIX_BOOL;
        info[0].value.data.flag = collect;
        std::strncpy(info[1].key, PMIX_TIMEOUT, PMIX_MAX_KEYLEN);
        info[1].value.type = PMIX_INT;
        info[1].value.data.integer = int(timeout_seconds() + 0.5);
        return pmix_.fence(nullptr, 0, info, 2) == PMIX_SUCCESS;
    }

    bool fail(std::string &why, const char *what, pmix_status_t rc) {
        why = std::string(what) + " failed: " + pmix_.error_string(rc);
        return false;
    }

    PmixLib pmix_;
    pmix_proc_t me_{};
    int size_ = 0;
    bool initialized_ = false;
    unsigned round_ = 0;
};

}  // namespace

std::unique_ptr<Launcher> open_pmix_launcher(std::string &why) {
    auto l = std::make_unique<PmixLauncher>();
    if (!l->start(why)) return nullptr;
    return l;
}

}  // namespace ptl::rt

#else

namespace ptl::rt {
std::unique_ptr<Launcher> open_pmix_launcher(std::string &why) {
    why = "libportals4 was built without the PMIx header (apt-get install libpmix-dev and rebuild)";
    return nullptr;
}
}  // namespace ptl::rt

#endif
