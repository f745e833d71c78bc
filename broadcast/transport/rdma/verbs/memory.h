// Registrations of memory with an RDMA device (a protection domain): host
// memory, pinned by the registration, or GPU memory exported as a dma-buf
// (GPUDirect RDMA: the NIC reads and writes GPU memory without a bounce
// through the host). A Registration deregisters itself.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

struct ibv_mr;
struct ibv_pd;

namespace deltacast::verbs {

class Registration {
 public:
  Registration() = default;
  explicit Registration(ibv_mr* mr) : mr_(mr) {}
  Registration(Registration&& other) noexcept : mr_(other.mr_) { other.mr_ = nullptr; }
  Registration& operator=(Registration&& other) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration();

  uint32_t lkey() const;
  uint32_t rkey() const;
  void* address() const;
  size_t length() const;
  explicit operator bool() const { return mr_ != nullptr; }

 private:
  ibv_mr* mr_ = nullptr;
};

enum Access : int {
  kLocalWrite = 1,   // the NIC writes received bytes here
  kRemoteWrite = 2,  // peers write here with RDMA WRITE
};

Result<Registration> register_host(ibv_pd* pd, void* address, size_t length, int access);
// GPU memory: `fd` is a dma-buf exported for [offset, offset + length) of the
// allocation (cuMemGetHandleForAddressRange), `gpu_address` the address the
// GPU uses for its start, which is also the address work requests name.
Result<Registration> register_dmabuf(ibv_pd* pd, int fd, uint64_t offset, size_t length, uint64_t gpu_address,
                                     int access);

}  // namespace deltacast::verbs
