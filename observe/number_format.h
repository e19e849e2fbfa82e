// Numbers as a person writes them in a report (tetra report's tables, charts
// and console lines): durations in the unit their size calls for at three
// significant digits, large quantities with thousands separators, fractions
// as percentages, counts with their noun in the right number, and chart axes
// at round 1-2-5 steps whose labels carry the unit. Nothing here prints an
// exponent ("2.9681e-05") or more digits than a measurement has.
#ifndef TETRA_OBSERVE_NUMBER_FORMAT_H_
#define TETRA_OBSERVE_NUMBER_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tetra {

// Seconds at three significant digits in the largest of s, ms, us and ns that
// keeps the rounded value at 1 or more: 1.2 -> "1.20 s", 0.00386408 -> "3.86 ms",
// 2.9681e-05 -> "29.7 us", 0.00099996 -> "1.00 ms" (not "1000 us"). 0 -> "0 s";
// 1000 s and more in whole seconds with separators ("3,600 s"); not finite -> "n/a".
std::string FormatDuration(double seconds);

// A rate or other quantity: from 100 on, rounded to a whole number with
// thousands separators (241234.6 -> "241,235"); under 100 at three
// significant digits (12.345 -> "12.3", 0.5 -> "0.500"); 0 -> "0".
std::string FormatQuantity(double value);

// A fraction as a percentage with one decimal: 0.825105 -> "82.5%", 1 -> "100.0%".
std::string FormatPercent(double fraction);

// A whole number with thousands separators: 1234567 -> "1,234,567".
std::string FormatInteger(int64_t value);

// `count` and its noun in the right number: (1, "rank") -> "1 rank",
// (8, "rank") -> "8 ranks", (0, "run") -> "0 runs"; `plural` for nouns that
// do not take an s ((2, "batch", "batches") -> "2 batches").
std::string CountOf(int64_t count, const std::string& singular, const std::string& plural = "");

// What a chart's values are, which picks their labels.
enum class ValueKind {
  kSeconds,   // FormatDuration; an axis in one unit for all its ticks ("0.5 ms")
  kQuantity,  // FormatQuantity; axis labels with separators ("250,000")
  kFraction,  // FormatPercent; axis labels in percent ("20%")
};

// A value as its kind formats it.
std::string FormatValue(double value, ValueKind kind);

// An axis from 0 that covers [0, max_value]: the step is the smallest 1, 2 or
// 5 times a power of ten that needs at most `max_intervals` intervals, and
// the top is the first multiple of the step at or above max_value. A
// max_value that is 0, negative or not finite draws the axis to 1.
struct Axis {
  double step = 1;
  int intervals = 1;
  std::vector<std::string> labels;  // one per tick, 0 to top, unit included
  double top() const { return step * intervals; }
};
Axis NiceAxis(double max_value, ValueKind kind, int max_intervals = 5);

}  // namespace tetra

#endif  // TETRA_OBSERVE_NUMBER_FORMAT_H_
