// The float64 schedule arithmetic diffusers does with numpy, written out so the rounding matches:
// numpy.linspace, the static and dynamic (mu) flow shifts and the terminal stretch.
#pragma once

#include <string>
#include <vector>

namespace mmgen::schedulers {

// numpy.linspace(start, stop, num) (endpoint included): start + i·step, the last value exactly
// `stop`.
std::vector<double> numpy_linspace(double start, double stop, int num);

// σ ← shift·σ / (1 + (shift − 1)·σ), in float64 (flow matching's static shift).
void apply_static_shift(std::vector<double>& sigmas, double shift);
// Same in float32, as numpy computes it on a float32 array with a Python float.
void apply_static_shift(std::vector<float>& sigmas, double shift);

enum class TimeShiftType { Exponential, Linear };
TimeShiftType parse_time_shift_type(const std::string& name, const std::string& class_name);

// Resolution-dependent shift with exponent 1: e^mu / (e^mu + (1/σ − 1)) or mu / (mu + (1/σ − 1)).
void apply_dynamic_shift(std::vector<double>& sigmas, double mu, TimeShiftType type);
void apply_dynamic_shift(std::vector<float>& sigmas, double mu, TimeShiftType type);

// Stretches the schedule so that its last value equals `terminal`: σ ← 1 − (1 − σ) / k with
// k = (1 − σ_last) / (1 − terminal).
void stretch_to_terminal(std::vector<double>& sigmas, double terminal);
void stretch_to_terminal(std::vector<float>& sigmas, double terminal);

}  // namespace mmgen::schedulers
