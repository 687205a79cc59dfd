// A job of one, for programs started without a launcher: rank 0 of 1, every collective is local.
#include <cstring>

#include "launcher.h"

namespace ptl::rt {
namespace {

class SingletonLauncher final : public Launcher {
public:
    const char *name() const override { return "none"; }
    int rank() const override { return 0; }
    int size() const override { return 1; }
    bool allgather(const void *in, void *out, size_t len) override {
        std::memcpy(out, in, len);
        return true;
    }
    bool barrier() override { return true; }
};

}  // namespace

std::unique_ptr<Launcher> open_singleton_launcher() {
    return std::make_unique<SingletonLauncher>();
}

}  // namespace ptl::rt
