// sage_sla_attn: no CPU kernel in this build yet (the CPU-kernel work fills this file).
#include "attention/backends/factories.h"

namespace mmgen::attention {

BackendFactory sage_sla_attn_factory() {
  return {};
}

}  // namespace mmgen::attention
