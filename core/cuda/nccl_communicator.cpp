#include "core/cuda/nccl_communicator.h"

#include <cstdio>
#include <exception>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_storage.h"
#include "core/error.h"

#ifdef MMGEN_HAVE_NCCL
#include <nccl.h>
#endif

namespace mmgen::cuda {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: none
    return 0;
  }
  return count;
}

void use_cuda_device(int ordinal) {
  MMGEN_CUDA_CHECK(cudaSetDevice(ordinal));
}

#ifdef MMGEN_HAVE_NCCL
namespace {

void check_nccl(ncclResult_t status, const char* call) {
  if (status != ncclSuccess)
    fail("NCCL: {} failed: {} (set NCCL_DEBUG=WARN for NCCL's own account)", call,
         ncclGetErrorString(status));
}
#define MMGEN_NCCL_CHECK(call) check_nccl((call), #call)

// A host tensor's bytes on the device for the collective, or the device tensor itself.
// (An empty tensor stays where it is: nothing of it moves.)
Tensor on_device(const Tensor& t) {
  return t.is_cpu() && t.nbytes() ? t.to(Device::CUDA) : t;
}
Tensor device_like(const Tensor& t) {
  return t.is_cpu() && t.nbytes() ? Tensor::empty(t.shape(), t.dtype(), Device::CUDA) : t;
}
// A staged result back into the host tensor `to`.
void back_to_host(const Tensor& to, const Tensor& staged) {
  copy_device_to_host(const_cast<std::byte*>(to.raw()), staged.raw(), to.nbytes());
}

class NcclCommunicator final : public dist::Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  // On an error path (unwinding) the peers may never answer: abort instead of waiting for them.
  ~NcclCommunicator() override {
    std::uncaught_exceptions() > 0 ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  ncclComm_t handle() const { return comm_; }

  void all_to_all(const std::vector<Tensor>& send, const std::vector<Tensor>& recv) override {
    dist::check_collective(send, size_, "all_to_all (send)");
    dist::check_collective(recv, size_, "all_to_all (recv)");
    std::vector<Tensor> send_dev, recv_dev;
    for (const Tensor& t : send) send_dev.push_back(on_device(t));
    for (const Tensor& t : recv) recv_dev.push_back(device_like(t));
    // Point-to-point pairs in one group: NCCL runs them together (its own all-to-all is this).
    MMGEN_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      const Tensor& out = send_dev[size_t(peer)];
      const Tensor& in = recv_dev[size_t(peer)];
      if (peer == rank_) {
        check(out.nbytes() == in.nbytes(), "all_to_all: {} bytes to itself, {} expected",
              out.nbytes(), in.nbytes());
        if (in.nbytes())
          MMGEN_CUDA_CHECK(
              cudaMemcpyAsync(in.raw(), out.raw(), in.nbytes(), cudaMemcpyDeviceToDevice, nullptr));
        continue;
      }
      if (out.nbytes())
        MMGEN_NCCL_CHECK(ncclSend(out.raw(), out.nbytes(), ncclUint8, peer, comm_, nullptr));
      if (in.nbytes())
        MMGEN_NCCL_CHECK(ncclRecv(in.raw(), in.nbytes(), ncclUint8, peer, comm_, nullptr));
    }
    MMGEN_NCCL_CHECK(ncclGroupEnd());
    for (size_t i = 0; i < recv.size(); ++i)
      if (recv[i].is_cpu() && recv[i].nbytes()) back_to_host(recv[i], recv_dev[i]);
  }

  void broadcast(const Tensor& data, int root) override {
    check(root >= 0 && root < size_, "broadcast: root {} of {} ranks", root, size_);
    check(data.is_contiguous(), "broadcast: the tensor must be contiguous");
    const Tensor buffer = on_device(data);
    MMGEN_NCCL_CHECK(ncclBroadcast(buffer.raw(), buffer.raw(), buffer.nbytes(), ncclUint8, root,
                                   comm_, nullptr));
    if (data.is_cpu()) back_to_host(data, buffer);
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace

bool nccl_available() {
  return true;
}

std::string new_nccl_unique_id() {
  ncclUniqueId id;
  MMGEN_NCCL_CHECK(ncclGetUniqueId(&id));
  std::string hex;
  for (char c : id.internal) {
    char digits[3];
    std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned char>(c));
    hex += digits;
  }
  return hex;
}

std::unique_ptr<dist::Communicator> nccl_communicator(const std::string& unique_id_hex, int rank,
                                                      int size) {
  ncclUniqueId id;
  check(unique_id_hex.size() == 2 * sizeof id.internal,
        "NCCL unique id: {} hex digits, {} expected", unique_id_hex.size(), 2 * sizeof id.internal);
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    unsigned value = 0;
    check(std::sscanf(unique_id_hex.c_str() + 2 * i, "%2x", &value) == 1,
          "NCCL unique id: not hex at digit {}", 2 * i);
    id.internal[i] = static_cast<char>(value);
  }
  ncclComm_t comm = nullptr;
  MMGEN_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::make_unique<NcclCommunicator>(comm, rank, size);
}

std::unique_ptr<dist::Communicator> split_nccl_communicator(dist::Communicator& parent, int color,
                                                            int key) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&parent);
  check(nccl != nullptr, "split_nccl_communicator: the parent is not an NCCL communicator");
  ncclComm_t comm = nullptr;
  MMGEN_NCCL_CHECK(ncclCommSplit(nccl->handle(), color, key, &comm, nullptr));
  int rank = 0, size = 0;
  MMGEN_NCCL_CHECK(ncclCommUserRank(comm, &rank));
  MMGEN_NCCL_CHECK(ncclCommCount(comm, &size));
  return std::make_unique<NcclCommunicator>(comm, rank, size);
}

#else  // no NCCL in this build: every entry says so

namespace {
[[noreturn]] void no_nccl() {
  fail(
      "--gpus: this build has no NCCL; install NCCL (libnccl-dev) and rebuild with "
      "-DMMGEN_CUDA=ON");
}
}  // namespace

bool nccl_available() {
  return false;
}

std::string new_nccl_unique_id() {
  no_nccl();
}

std::unique_ptr<dist::Communicator> nccl_communicator(const std::string&, int, int) {
  no_nccl();
}

std::unique_ptr<dist::Communicator> split_nccl_communicator(dist::Communicator&, int, int) {
  no_nccl();
}

#endif

}  // namespace mmgen::cuda
