// Where the OpenMP threads run. When a run has exactly one thread per CPU it may use (the default,
// or `taskset -c` with as many threads), mmgen asks OpenMP to keep each thread on its own core
// (OMP_PROC_BIND=close, OMP_PLACES=cores). Left to the kernel, threads move between CPUs between
// parallel regions, and a small model's working set (in a core's L2) goes cold with each move:
// wan-shapes (20 steps) on the 16-core Xeon took a median 0.241 s at 16 threads against 0.199 s on
// one, and 0.204 s with the threads placed.
//
// OpenMP reads those settings once, when the program starts, and creates threads as teams grow
// and shrink; a thread inherits its creator's CPUs. So placing threads by hand from inside the
// program (pinning the main thread) puts every thread created later on the main thread's one CPU
// (tried: 50x slower at 4 threads). The executable sets the variables and starts itself again.
//
// Several processes on one machine (`mmgen generate --gpus N`) get disjoint shares of the CPUs
// instead: a process started by a pinned thread would inherit its one CPU, and with it every
// rank's threads, NCCL's and CUDA's would crowd one core.
#pragma once

#include <string>
#include <vector>

namespace mmgen {

// The CPUs this process may run on (its affinity mask), in increasing order.
std::vector<int> allowed_cpus();

// True when OpenMP has one thread per allowed CPU (at least two) and nobody has placed them
// (OMP_PROC_BIND, OMP_PLACES and GOMP_CPU_AFFINITY unset; OMP_PROC_BIND=false keeps them free).
bool threads_want_placing();

// Sets OMP_PROC_BIND=close and OMP_PLACES=cores for the program started next.
void set_thread_placement_environment();

// The CPUs the kernel would let this process use (its cpuset), whatever its threads are pinned to
// now (OpenMP's placement pins the main thread to one core when the program starts).
std::vector<int> permitted_cpus();

// `cpus` cut into `parts` contiguous shares whose sizes differ by at most one; with fewer CPUs
// than parts, the parts take the CPUs in turn.
std::vector<std::vector<int>> share_cpus(const std::vector<int>& cpus, int parts);

// Puts the calling thread, and every thread and process it starts from now on, on `cpus`. False
// when the kernel refuses (none of them permitted).
bool run_on(const std::vector<int>& cpus);

// "0-3,8,10-11" and back (the Linux cpulist format).
std::string cpu_list(const std::vector<int>& cpus);
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace mmgen
