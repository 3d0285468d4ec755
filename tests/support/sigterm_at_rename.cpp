// Preloaded (LD_PRELOAD) into mmgen by interrupt_test to make a race deterministic: a SIGTERM that
// arrives while the run's only output is being written. An output is written to a partial file
// (".NAME.partial-N.EXT", core/file.cpp's write_atomically) and renamed into place; this rename()
// raises SIGTERM first, so the signal lands after every byte is written and before the file has
// its name, the last moment of the write. Once only: a second signal would stop at once.
#include <dlfcn.h>
#include <signal.h>

#include <cstring>

extern "C" int rename(const char* from, const char* to) {
  using Rename = int (*)(const char*, const char*);
  static const Rename real = reinterpret_cast<Rename>(dlsym(RTLD_NEXT, "rename"));
  static bool raised = false;
  if (!raised && std::strstr(from, ".partial-")) {
    raised = true;
    raise(SIGTERM);
  }
  return real(from, to);
}
