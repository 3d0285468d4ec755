#include "models/dit/dit_config_checks.h"

#include "core/error.h"

namespace mmgen::dit {

void check_positive(const std::string& where,
                    std::initializer_list<std::pair<const char*, int64_t>> fields) {
  for (const auto& [name, value] : fields)
    check(value > 0, "{}: '{}' must be positive, got {}", where, name, value);
}

void check_rope_axes(const std::array<int64_t, 3>& axes, int64_t head_dim, const char* key,
                     const std::string& where) {
  check(head_dim % 2 == 0, "{}: the head size {} must be even (RoPE pairs)", where, head_dim);
  const bool even = axes[0] % 2 == 0 && axes[1] % 2 == 0 && axes[2] % 2 == 0;
  check(even && axes[0] + axes[1] + axes[2] == head_dim,
        "{}: '{}' [{}, {}, {}] must be even and sum to the head size {}", where, key, axes[0],
        axes[1], axes[2], head_dim);
}

}  // namespace mmgen::dit
