// Reading a cluster description (proto/cluster.proto) from a text-format
// file, for `tetra plan --cluster` and `tetra report --cluster`.
#ifndef TETRA_PLAN_CLUSTER_CONFIG_H_
#define TETRA_PLAN_CLUSTER_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/cluster.pb.h"

namespace tetra {

// A missing file, a parse error (with its line) or a non-positive size,
// peak, memory or bandwidth is a user error.
absl::StatusOr<ClusterConfig> LoadClusterFile(const std::string& path);

}  // namespace tetra

#endif  // TETRA_PLAN_CLUSTER_CONFIG_H_
