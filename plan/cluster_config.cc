#include "plan/cluster_config.h"

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/status_macros.h"
#include "core/user_error.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace tetra {
namespace {

class ClusterErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty())
      first_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

absl::StatusOr<ClusterConfig> LoadClusterFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, "cluster file",
                                                         "pass --cluster a .textproto such as "
                                                         "configs/clusters/h800_2048.textproto"));
  ClusterConfig cluster;
  google::protobuf::TextFormat::Parser parser;
  ClusterErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &cluster)) {
    return UserError(absl::StrCat("cluster file ", path, " does not parse: ", errors.first()),
                     "fields are those of tetra.ClusterConfig in proto/cluster.proto");
  }
  for (const auto& [name, value] :
       {std::pair{"nodes", double{1.0} * cluster.nodes()},
        std::pair{"devices_per_node", double{1.0} * cluster.devices_per_node()},
        std::pair{"peak_tflops", cluster.peak_tflops()},
        std::pair{"hbm_bytes", cluster.hbm_bytes()},
        std::pair{"memory_gbps", cluster.memory_gbps()},
        std::pair{"nvlink_gbps", cluster.nvlink_gbps()}, std::pair{"ib_gbps", cluster.ib_gbps()},
        std::pair{"compute_efficiency", cluster.compute_efficiency()}}) {
    if (!(value > 0)) {
      return UserError(
          absl::StrCat("cluster file ", path, ": ", name, " is ", value, " but must be > 0"),
          absl::StrCat("set ", name, " to the hardware's value"));
    }
  }
  return cluster;
}

}  // namespace tetra
