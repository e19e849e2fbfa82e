#include "observe/number_format.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tetra {
namespace {

struct TimeUnit {
  double seconds;
  const char* name;
};
constexpr TimeUnit kTimeUnits[] = {{1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};

// Separators in the whole part of a plain decimal: "-1234567.5" -> "-1,234,567.5".
std::string GroupThousands(const std::string& digits) {
  const size_t begin = !digits.empty() && digits[0] == '-' ? 1 : 0;
  const size_t point = std::min(digits.find('.'), digits.size());
  std::string out = digits.substr(0, begin);
  for (size_t i = begin; i < point; ++i) {
    out += digits[i];
    if (const size_t left = point - i - 1; left > 0 && left % 3 == 0) out += ',';
  }
  return out + digits.substr(point);
}

// `v` > 0 in fixed notation with the decimals that leave three significant
// digits after rounding: 3.86408 -> "3.86", 0.0012345 -> "0.00123", 9.996 ->
// "10.0" (not "10.00"), 1234.5 -> "1234" (whole numbers keep every digit).
std::string ThreeDigits(double v) {
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(v))));
  std::string text = absl::StrFormat("%.*f", decimals, v);
  if (decimals > 0 && std::strtod(text.c_str(), nullptr) >= std::pow(10.0, 3 - decimals)) {
    text = absl::StrFormat("%.*f", decimals - 1, v);  // it rounded up to the next power of ten
  }
  return text;
}

// The decimals that show a multiple of `step` (1, 2 or 5 times a power of ten) exactly.
int StepDecimals(double step) {
  return std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
}

// The axis's ticks in one unit: `scale` of the values per unit shown.
std::vector<std::string> TickLabels(const Axis& axis, double scale, const std::string& suffix) {
  const int decimals = StepDecimals(axis.step / scale);
  std::vector<std::string> labels;
  for (int i = 0; i <= axis.intervals; ++i) {
    labels.push_back(absl::StrCat(
        GroupThousands(absl::StrFormat("%.*f", decimals, i * axis.step / scale)), suffix));
  }
  return labels;
}

// The largest time unit the axis's top reaches (seconds from 1 s on, ns below 1 us).
const TimeUnit& AxisTimeUnit(double top) {
  for (const TimeUnit& unit : kTimeUnits) {
    if (top >= unit.seconds * (1 - 1e-9)) return unit;
  }
  return kTimeUnits[std::size(kTimeUnits) - 1];
}

}  // namespace

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds)) return "n/a";
  if (seconds == 0) return "0 s";
  const std::string sign = seconds < 0 ? "-" : "";
  const double v = std::abs(seconds);
  for (const TimeUnit& unit : kTimeUnits) {
    const std::string digits = ThreeDigits(v / unit.seconds);
    if (std::strtod(digits.c_str(), nullptr) >= 1 || &unit == &kTimeUnits[3]) {
      return absl::StrCat(sign, GroupThousands(digits), " ", unit.name);
    }
  }
  return "n/a";  // not reached: the last unit returns
}

std::string FormatQuantity(double value) {
  if (!std::isfinite(value)) return "n/a";
  if (value == 0) return "0";
  const std::string sign = value < 0 ? "-" : "";
  const double v = std::abs(value);
  const std::string digits = ThreeDigits(v);
  if (std::strtod(digits.c_str(), nullptr) < 100) return sign + digits;
  return sign + GroupThousands(absl::StrFormat("%.0f", v));
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  std::string text = absl::StrFormat("%.1f", 100 * fraction);
  if (text == "-0.0") text = "0.0";  // a tiny negative rounds to no sign
  return text + "%";
}

std::string FormatInteger(int64_t value) { return GroupThousands(absl::StrCat(value)); }

std::string CountOf(int64_t count, const std::string& singular, const std::string& plural) {
  if (count == 1) return absl::StrCat(FormatInteger(count), " ", singular);
  if (plural.empty()) return absl::StrCat(FormatInteger(count), " ", singular, "s");
  return absl::StrCat(FormatInteger(count), " ", plural);
}

std::string FormatValue(double value, ValueKind kind) {
  switch (kind) {
    case ValueKind::kSeconds:
      return FormatDuration(value);
    case ValueKind::kFraction:
      return FormatPercent(value);
    case ValueKind::kQuantity:
      break;
  }
  return FormatQuantity(value);
}

Axis NiceAxis(double max_value, ValueKind kind, int max_intervals) {
  const double top = std::isfinite(max_value) && max_value > 0 ? max_value : 1;
  max_intervals = std::max(1, max_intervals);
  const double least = top / max_intervals;  // the smallest step that reaches the top
  const double power = std::pow(10.0, std::floor(std::log10(least)));
  Axis axis;
  axis.step = 10 * power;
  for (const double multiple : {1.0, 2.0, 5.0}) {
    if (multiple * power >= least * (1 - 1e-9)) {
      axis.step = multiple * power;
      break;
    }
  }
  axis.intervals = std::max(1, static_cast<int>(std::ceil(top / axis.step - 1e-6)));
  if (kind == ValueKind::kFraction) {
    axis.labels = TickLabels(axis, 0.01, "%");
  } else if (kind == ValueKind::kSeconds) {
    const TimeUnit& unit = AxisTimeUnit(axis.top());
    axis.labels = TickLabels(axis, unit.seconds, absl::StrCat(" ", unit.name));
  } else {
    axis.labels = TickLabels(axis, 1, "");
  }
  return axis;
}

}  // namespace tetra
