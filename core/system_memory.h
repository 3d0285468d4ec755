// What the machine can give this process, and what it has taken: the memory check of `generate`
// compares a request's estimate with available_memory_bytes(); the final summary line reports
// peak_resident_bytes().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mmgen {

struct AvailableMemory {
  uint64_t bytes = 0;
  std::string source;  // where the figure came from, for messages ("MemAvailable", "cgroup ...")
};

// The memory a new allocation can get without swapping: /proc/meminfo's MemAvailable, lowered to
// the cgroup's limit minus its working set (usage less inactive page cache) when the process runs
// in a memory-limited cgroup (containers, CI runners), whose OOM killer would strike first. The
// environment variable MMGEN_AVAILABLE_MEMORY (bytes, or a number with K/M/G/T) replaces the
// measurement, so tests and users sharing a machine can pretend to have less. nullopt when nothing
// can be read.
std::optional<AvailableMemory> available_memory();

// Asks glibc to serve host blocks below 32 MiB from its heap and to keep up to 256 MiB of freed
// heap mapped instead of returning it at once: a denoising loop allocates the same few host
// buffers every step, and fresh pages cost a page fault each (about 0.3 ms per MiB on the VMs
// measured, while the GPU waits). Larger blocks are still mapped and unmapped on their own. The
// command-line tool calls it once at start; a library user may. No effect elsewhere.
void keep_freed_host_memory();

// Peak resident set size of this process so far (VmHWM), 0 when unknown.
uint64_t peak_resident_bytes();

// "1.5 GiB", "320 MiB", "12 KiB", "7 B": binary units, three significant figures.
std::string format_bytes(uint64_t bytes);

// Parses "4096", "512M", "1.5G", "2GiB" (binary units, case-insensitive) to bytes; nullopt when
// the text is not such a size or is past 1 EiB.
std::optional<uint64_t> parse_byte_size(const std::string& text);

}  // namespace mmgen
