// fa: no CPU kernel in this build yet (the CPU-kernel work fills this file).
#include "attention/backends/factories.h"

namespace mmgen::attention {

BackendFactory fa_factory() {
  return {};
}

}  // namespace mmgen::attention
