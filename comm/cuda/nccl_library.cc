#include "comm/cuda/nccl_library.h"

#include <dlfcn.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/user_error.h"

namespace tetra {

absl::StatusOr<NcclLibrary> OpenNcclLibrary(const char* file) {
  void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return UserError(
        absl::StrCat("NCCL is needed for GPU communication but ", file,
                     " cannot be loaded: ", dlerror()),
        "install NCCL (the CUDA toolkit's, or `pip install nvidia-nccl-cu13`) and add the "
        "directory holding libnccl.so.2 to LD_LIBRARY_PATH");
  }
  NcclLibrary nccl{};
  absl::Status missing;
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    if (function == nullptr && missing.ok()) {
      missing = UserError(
          absl::StrCat("the ", file, " found has no ", name, ": it is older than the NCCL ",
                       NCCL_MAJOR, ".", NCCL_MINOR, " tetra is built against"),
          "put a newer NCCL's directory first on LD_LIBRARY_PATH");
    }
  };
  resolve(nccl.GetUniqueId, "ncclGetUniqueId");
  resolve(nccl.CommInitRank, "ncclCommInitRank");
  resolve(nccl.CommDestroy, "ncclCommDestroy");
  resolve(nccl.CommAbort, "ncclCommAbort");
  resolve(nccl.CommGetAsyncError, "ncclCommGetAsyncError");
  resolve(nccl.GetErrorString, "ncclGetErrorString");
  resolve(nccl.GetLastError, "ncclGetLastError");
  resolve(nccl.AllReduce, "ncclAllReduce");
  resolve(nccl.ReduceScatter, "ncclReduceScatter");
  resolve(nccl.AllGather, "ncclAllGather");
  resolve(nccl.Broadcast, "ncclBroadcast");
  resolve(nccl.Send, "ncclSend");
  resolve(nccl.Recv, "ncclRecv");
  resolve(nccl.GroupStart, "ncclGroupStart");
  resolve(nccl.GroupEnd, "ncclGroupEnd");
  if (!missing.ok()) {
    dlclose(handle);
    return missing;
  }
  return nccl;
}

absl::StatusOr<const NcclLibrary*> LoadNccl() {
  // The emulated GPU's build names its own NCCL (emulator/nccl.cc).
#ifdef TETRA_NCCL_LIBRARY
  constexpr char kLibrary[] = TETRA_NCCL_LIBRARY;
#else
  constexpr char kLibrary[] = "libnccl.so.2";
#endif
  static const auto* const loaded = new absl::StatusOr<NcclLibrary>(OpenNcclLibrary(kLibrary));
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

const NcclLibrary& Nccl() {
  const absl::StatusOr<const NcclLibrary*> nccl = LoadNccl();
  TETRA_CHECK(nccl.ok()) << nccl.status().message();
  return **nccl;
}

}  // namespace tetra
