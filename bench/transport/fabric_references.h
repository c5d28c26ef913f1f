// The fabric plugin's references (reference.h): a raw libfabric floor
// (raw_fabric_pingpong.h, key "raw") and libfabric's own fi_pingpong
// (fi_pingpong_reference.h, key "fi_pingpong"), both on the provider the
// plugin uses in the same run.
#pragma once

#include "common/status.h"
#include "transport/options.h"
#include "transport/reference.h"

#include <string>

namespace ferry::bench {

// Decides options->fabric_provider (--fabric-provider, else
// FERRY_FABRIC_PROVIDER, else libfabric's first RDM provider) when the
// plugin is "fabric", and sets the plugin's own `provider` parameter to it,
// so that ferry and its references run on one provider whatever libfabric
// would have chosen for each.
Status ResolveFabricProvider(const std::string& plugin_name, Options* options);

// Appends the fabric references to *set (or says in set->skipped why one is
// not in this build or on this machine).
void AddFabricReferences(const Options& options, ReferenceSet* set);

}  // namespace ferry::bench
