#include "core/file_type.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "core/user_error.h"

namespace tetra {

const char* FileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

absl::Status CheckOutputPath(const std::string& path, const std::string& what,
                             const std::string& hint) {
  struct stat info;
  // Nothing there (or a dangling link, which the write replaces): a new file.
  if (::stat(path.c_str(), &info) != 0 || S_ISREG(info.st_mode)) return absl::OkStatus();
  return UserError(absl::StrCat(what, " ", UserPath(path), " is ", FileTypeName(info.st_mode),
                                ", not a regular file"),
                   absl::StrCat(hint, " (tetra writes regular files only, never over a ",
                                "directory, pipe or device)"));
}

}  // namespace tetra
