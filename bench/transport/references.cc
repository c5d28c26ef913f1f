// Which references each plugin is measured against (reference.h).
#include "transport/fabric_references.h"
#include "transport/raw_shm_pingpong.h"
#include "transport/raw_tcp_pingpong.h"
#include "transport/reference.h"
#if FERRY_BENCH_HAVE_TENSORPIPE
#include "transport/tensorpipe_pingpong.h"
#endif

namespace ferry::bench {

ReferenceSet ReferencesFor(const std::string& plugin_name, const Options& options) {
  ReferenceSet set;
  if (plugin_name == "fabric") {
    AddFabricReferences(options, &set);
    return set;
  }
  if (plugin_name == "shm") {
    set.measured.push_back(MakeRawShmReference());
#if FERRY_BENCH_HAVE_TENSORPIPE
    set.measured.push_back(MakeTensorPipeShmReference());
#else
    set.skipped.push_back(
        {{"tensorpipe", "TensorPipe shm", "", true},
         "not built: libtensorpipe (Debian: libtensorpipe-dev) was not found "
         "when the benchmark was configured, or FERRY_BENCH_TENSORPIPE=OFF"});
#endif
    return set;
  }
  set.measured.push_back(MakeRawTcpReference());
  return set;
}

}  // namespace ferry::bench
