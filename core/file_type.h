// What kind of file a path names, for the checks every input and output
// path gets: tetra reads and writes regular files only. Reading a FIFO waits
// for a writer, a directory or /dev/zero gives nothing or never ends; and an
// output is written whole under PATH.tmp and renamed over PATH, which would
// replace a device or a pipe with a regular file (as root, /dev/full itself).
#ifndef TETRA_CORE_FILE_TYPE_H_
#define TETRA_CORE_FILE_TYPE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace tetra {

// "a directory", "a FIFO (named pipe)", "a socket", "a character device",
// "a block device", else "not a regular file".
const char* FileTypeName(mode_t mode);

// OK when nothing is at `path` or it is a regular file (through symbolic
// links); otherwise a UserError "`what` PATH is a character device, not a
// regular file" ending with `hint`. Never opens the path, so never blocks.
absl::Status CheckOutputPath(const std::string& path, const std::string& what,
                             const std::string& hint);

}  // namespace tetra

#endif  // TETRA_CORE_FILE_TYPE_H_
