// Checks that several DiT configs share: sizes that must be positive, and RoPE axes that split a
// head into even parts (RoPE rotates pairs of channels).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace mmgen::dit {

// Each named value is above 0: "<where>: '<name>' must be positive, got <value>".
void check_positive(const std::string& where,
                    std::initializer_list<std::pair<const char*, int64_t>> fields);

// The three axes under `key` are even and sum to `head_dim`.
void check_rope_axes(const std::array<int64_t, 3>& axes, int64_t head_dim, const char* key,
                     const std::string& where);

}  // namespace mmgen::dit
