// A kernel timeline without Nsight Systems: a CUPTI injection library (CUDA_INJECTION64_PATH)
// that records every kernel, copy and memset on the GPU and every CUDA runtime/driver call on the
// host, and prints at exit where the GPU was busy and where it sat idle. It answers what a kernel
// sum from Nsight Compute cannot: how much of a forward's wall time is gaps between kernels, and
// which host calls the gaps follow. Built and run by bench/cuda/tools/timeline.sh (the GPU host
// has CUPTI; this tree's build does not need it).
//
// Environment: TIMELINE_SKIP (default 0.3) the fraction of the GPU records to leave out at the
// start (weight uploads, warm-up); TIMELINE_OUT a file for the report (default stderr).
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#ifndef TIMELINE_KERNEL_RECORD
#define TIMELINE_KERNEL_RECORD CUpti_ActivityKernel4
#endif
#ifndef TIMELINE_MEMCPY_RECORD
#define TIMELINE_MEMCPY_RECORD CUpti_ActivityMemcpy
#endif
#ifndef TIMELINE_MEMSET_RECORD
#define TIMELINE_MEMSET_RECORD CUpti_ActivityMemset
#endif

namespace {

struct DeviceRecord {
  uint64_t start, end;
  std::string name;
};
struct HostCall {
  uint64_t start, end;
  std::string name;
};

std::mutex mutex;
std::vector<DeviceRecord> device_records;
std::vector<HostCall> host_calls;
std::map<std::string, std::string> short_names;

std::string short_name(const char* mangled) {
  if (!mangled) return "?";
  auto found = short_names.find(mangled);
  if (found != short_names.end()) return found->second;
  int status = 0;
  char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && plain ? plain : mangled;
  std::free(plain);
  // The template arguments make names unreadable; keep the function and the first 90 characters.
  if (name.size() > 90) name = name.substr(0, 90);
  short_names[mangled] = name;
  return name;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t(16) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

const char* copy_kind(int kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    default:
      return "other";
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const TIMELINE_KERNEL_RECORD*>(record);
        device_records.push_back({k->start, k->end, short_name(k->name)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const TIMELINE_MEMCPY_RECORD*>(record);
        device_records.push_back({m->start, m->end,
                                  std::string("memcpy ") + copy_kind(m->copyKind) +
                                      (m->bytes < 4096        ? " <4K"
                                       : m->bytes < (1 << 20) ? " <1M"
                                                              : " >=1M")});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const TIMELINE_MEMSET_RECORD*>(record);
        device_records.push_back({m->start, m->end, "memset"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const char* name = nullptr;
        cuptiGetCallbackName(record->kind == CUPTI_ACTIVITY_KIND_RUNTIME
                                 ? CUPTI_CB_DOMAIN_RUNTIME_API
                                 : CUPTI_CB_DOMAIN_DRIVER_API,
                             a->cbid, &name);
        host_calls.push_back({a->start, a->end, name ? name : "?"});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

struct Sum {
  int64_t count = 0;
  double ns = 0;
};

void print_table(FILE* out, const char* title, const std::map<std::string, Sum>& sums, int rows) {
  std::vector<std::pair<std::string, Sum>> sorted(sums.begin(), sums.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::fprintf(out, "\n%s\n", title);
  for (int i = 0; i < rows && i < int(sorted.size()); ++i)
    std::fprintf(out, "%10.3f ms %8lld %10.2f us  %s\n", sorted[i].second.ns / 1e6,
                 static_cast<long long>(sorted[i].second.count),
                 sorted[i].second.ns / 1e3 / double(sorted[i].second.count),
                 sorted[i].first.c_str());
}

void report() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(mutex);
  FILE* out = stderr;
  if (const char* path = std::getenv("TIMELINE_OUT")) out = std::fopen(path, "w");
  if (!out) out = stderr;
  std::sort(device_records.begin(), device_records.end(),
            [](const auto& a, const auto& b) { return a.start < b.start; });
  const double skip = std::getenv("TIMELINE_SKIP") ? std::atof(std::getenv("TIMELINE_SKIP")) : 0.3;
  const size_t first = size_t(skip * double(device_records.size()));
  if (first >= device_records.size()) {
    std::fprintf(out, "timeline: no GPU records\n");
    return;
  }
  const uint64_t begin = device_records[first].start;
  uint64_t covered = begin, busy = 0;
  std::map<std::string, Sum> kernels, gaps, gap_sizes, calls;
  std::string previous = "(start)";
  for (size_t i = first; i < device_records.size(); ++i) {
    const DeviceRecord& r = device_records[i];
    auto& k = kernels[r.name];
    ++k.count;
    k.ns += double(r.end - r.start);
    if (r.start > covered) {
      const double gap = double(r.start - covered);
      auto& g = gaps[previous + "  ->  " + r.name];
      ++g.count;
      g.ns += gap;
      const char* bucket = gap < 2e3     ? "a: < 2 us"
                           : gap < 5e3   ? "b: 2-5 us"
                           : gap < 20e3  ? "c: 5-20 us"
                           : gap < 100e3 ? "d: 20-100 us"
                           : gap < 1e6   ? "e: 0.1-1 ms"
                                         : "f: >= 1 ms";
      ++gap_sizes[bucket].count;
      gap_sizes[bucket].ns += gap;
    }
    if (r.end > covered) {
      busy += r.end - std::max(covered, r.start);
      covered = r.end;
    }
    previous = r.name;
  }
  for (const HostCall& call : host_calls) {
    if (call.start < begin || call.start > covered) continue;
    auto& c = calls[call.name];
    ++c.count;
    c.ns += double(call.end - call.start);
  }
  const double span = double(covered - begin);
  std::fprintf(out,
               "timeline: the last %zu GPU records (the first %.0f%% left out): span %.3f ms, busy "
               "%.3f ms (%.1f%%), idle %.3f ms\n",
               device_records.size() - first, 100 * skip, span / 1e6, double(busy) / 1e6,
               100.0 * double(busy) / span, (span - double(busy)) / 1e6);
  print_table(out, "GPU time by kernel (total, count, mean)", kernels, 40);
  print_table(out, "idle gaps by size", gap_sizes, 10);
  print_table(out, "idle gaps by the records around them (total, count, mean)", gaps, 30);
  print_table(out, "host CUDA calls in the same window (total, count, mean)", calls, 30);
  if (out != stderr) std::fclose(out);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
    cuptiActivityEnable(kind);
  std::atexit(report);
  return 1;
}
