// Ctrl-C and SIGTERM stop a run at the next step boundary rather than wherever they land, so a
// finished output is never lost and a half-written one never left behind. The first signal only
// sets a flag (and says so on stderr); the long-running loops call stop_if_requested() between
// steps, which throws Interrupted. A second signal stops at once: it deletes the output file being
// written, if any, and exits with 128 + the signal number.
#pragma once

#include <string>

namespace mmgen {

// Thrown at a step boundary after SIGINT / SIGTERM. Not an mmgen::Error (nor a std::exception), so
// the handlers that report one failed prompt of a batch and go on let it through.
struct Interrupted {
  int signal_number;
  // Where the run stopped, for its last line: "before denoise step 3 of 20", "in denoise step 1
  // of 1, between transformer blocks"; empty outside any stage.
  std::string where;
};

// Installs the SIGINT and SIGTERM handlers (once; later calls do nothing).
void install_stop_handlers();

// The signal that asked to stop, 0 when none did.
int stop_signal();

// Throws Interrupted when a stop was asked for. Call it only outside parallel regions.
void stop_if_requested();

// Between a model's blocks (transformer blocks, VAE frames and tiles): stop_if_requested(), so a
// stop waits for at most one block rather than a whole step (187 s for a large one). Turned off
// for runs whose processes must stop at the same point (several GPUs meet in collectives inside a
// forward): they stop at the step boundary. Call it only outside parallel regions.
// `blocks` names them for the stop message ("transformer blocks").
void stop_between_blocks(const char* blocks);
void set_stop_between_blocks(bool on);

// The stage the run is in ("denoise step 2 of 20"), said by the stop message; empty: none.
// pipeline/progress.h keeps it as its stages advance.
void set_stop_stage(std::string stage);

// "SIGINT (Ctrl-C)" / "SIGTERM" for the final message.
std::string signal_description(int signal_number);

// The temporary output being written now, deleted by a second signal; empty path when none.
// At most one at a time (outputs are written one after another).
void set_partial_output(const std::string& path);

// For tests: forgets a stop that was asked for.
void reset_stop_request();

}  // namespace mmgen
