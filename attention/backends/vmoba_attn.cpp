// vmoba_attn: no CPU kernel in this build yet (the CPU-kernel work fills this file).
#include "attention/backends/factories.h"

namespace mmgen::attention {

BackendFactory vmoba_attn_factory() {
  return {};
}

}  // namespace mmgen::attention
