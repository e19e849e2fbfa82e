#include "launch/host_list.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/user_error.h"

namespace tetra {
namespace {

constexpr int kMaxSlots = 1 << 16;

constexpr char kHostfileHint[] = "write one host per line, e.g. \"node1 slots=8\"";
constexpr char kDiscoveryHint[] = "make the script print one host per line, e.g. \"node1:8\"";

absl::Status BadHostLine(const std::string& source, int number, absl::string_view line,
                         absl::string_view why, const char* hint) {
  return UserError(
      absl::StrCat(source, " line ", number, " (", UserText(std::string(line)), ") ", why), hint);
}

// "lo-hi" or "n" inside brackets, the padding of lo kept: "01-03" is 01 02 03.
absl::Status ExpandRange(absl::string_view prefix, absl::string_view range,
                         std::vector<std::string>& out) {
  const std::vector<absl::string_view> ends = absl::StrSplit(range, '-');
  int lo = 0, hi = 0;
  if (ends.size() > 2 || !absl::SimpleAtoi(ends.front(), &lo) ||
      !absl::SimpleAtoi(ends.back(), &hi) || lo < 0 || hi < lo || hi - lo > kMaxSlots) {
    return UserError(
        absl::StrCat("SLURM_JOB_NODELIST has a bad range ", UserText(std::string(range))),
        "run tetra launch inside a Slurm allocation (salloc or sbatch)");
  }
  const int width = static_cast<int>(ends.front().size());
  for (int n = lo; n <= hi; ++n) out.push_back(absl::StrFormat("%s%0*d", prefix, width, n));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Host>> ParseHostfile(absl::string_view text, const std::string& source) {
  std::vector<Host> hosts;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const absl::string_view content = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (content.empty()) continue;
    const std::vector<absl::string_view> words =
        absl::StrSplit(content, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    Host host{.name = std::string(words[0])};
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view word = words[i];
      if (!absl::ConsumePrefix(&word, "slots=") || !absl::SimpleAtoi(word, &host.slots) ||
          host.slots < 1 || host.slots > kMaxSlots) {
        return BadHostLine(source, number, content, "is not \"HOST [slots=N]\" with N >= 1",
                           kHostfileHint);
      }
    }
    const bool repeated =
        std::any_of(hosts.begin(), hosts.end(), [&](const Host& h) { return h.name == host.name; });
    if (repeated) {
      return BadHostLine(source, number, content, "names a host a second time", kHostfileHint);
    }
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) return UserError(absl::StrCat(source, " names no host"), kHostfileHint);
  return hosts;
}

absl::StatusOr<std::vector<Host>> ParseDiscoveredHosts(absl::string_view text,
                                                       const std::string& source) {
  std::vector<Host> hosts;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    const absl::string_view content = absl::StripAsciiWhitespace(line);
    if (content.empty()) continue;
    const size_t colon = content.rfind(':');
    Host host{.name = std::string(content.substr(0, colon))};
    if (colon != absl::string_view::npos &&
        (!absl::SimpleAtoi(content.substr(colon + 1), &host.slots) || host.slots < 1 ||
         host.slots > kMaxSlots)) {
      return BadHostLine(source, number, content, "is not \"HOST[:SLOTS]\" with SLOTS >= 1",
                         kDiscoveryHint);
    }
    const bool repeated =
        std::any_of(hosts.begin(), hosts.end(), [&](const Host& h) { return h.name == host.name; });
    if (host.name.empty() || repeated) {
      return BadHostLine(source, number, content, "names no host, or one a second time",
                         kDiscoveryHint);
    }
    hosts.push_back(std::move(host));
  }
  return hosts;
}

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(absl::string_view list) {
  std::vector<std::string> names;
  // Commas split names except inside brackets: "a[1-2,5],b".
  size_t begin = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] != ',') {
      depth += list[i] == '[' ? 1 : list[i] == ']' ? -1 : 0;
      continue;
    }
    if (i < list.size() && depth > 0) continue;
    const absl::string_view item = list.substr(begin, i - begin);
    begin = i + 1;
    if (item.empty()) continue;
    const size_t open = item.find('[');
    if (open == absl::string_view::npos) {
      names.emplace_back(item);
      continue;
    }
    if (item.back() != ']') {
      return UserError(
          absl::StrCat("SLURM_JOB_NODELIST has a bad name ", UserText(std::string(item))),
          "run tetra launch inside a Slurm allocation (salloc or sbatch)");
    }
    const absl::string_view ranges = item.substr(open + 1, item.size() - open - 2);
    for (absl::string_view range : absl::StrSplit(ranges, ',')) {
      if (absl::Status s = ExpandRange(item.substr(0, open), range, names); !s.ok()) return s;
    }
  }
  if (names.empty() || depth != 0) {
    return UserError(
        absl::StrCat("SLURM_JOB_NODELIST ", UserText(std::string(list)), " names no node"),
        "run tetra launch inside a Slurm allocation (salloc or sbatch)");
  }
  return names;
}

int TotalSlots(const std::vector<Host>& hosts) {
  int total = 0;
  for (const Host& host : hosts) total += host.slots;
  return total;
}

std::string MpirunHostArgument(const std::vector<Host>& hosts, int ranks) {
  std::string out;
  for (const Host& host : hosts) {
    if (ranks <= 0) break;
    const int taken = std::min(ranks, host.slots);
    absl::StrAppend(&out, out.empty() ? "" : ",", host.name, ":", taken);
    ranks -= taken;
  }
  return out;
}

}  // namespace tetra
