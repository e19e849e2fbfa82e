// The `tetra` command line: `tetra <command> [flags]`.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tetra train --config FILE.textproto [--set path=value ...]\n");
    return 2;
  }
  return 0;
}
