#include "broadcast/transport/rdma/verbs/memory.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

namespace deltacast::verbs {

namespace {

int verbs_access(int access) {
  int flags = 0;
  if (access & kLocalWrite) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kRemoteWrite) flags |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  return flags;
}

}  // namespace

Registration& Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    mr_ = other.mr_;
    other.mr_ = nullptr;
  }
  return *this;
}

Registration::~Registration() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

uint32_t Registration::lkey() const { return mr_->lkey; }
uint32_t Registration::rkey() const { return mr_->rkey; }
void* Registration::address() const { return mr_->addr; }
size_t Registration::length() const { return mr_->length; }

Result<Registration> register_host(ibv_pd* pd, void* address, size_t length, int access) {
  ibv_mr* mr = ibv_reg_mr(pd, address, length, verbs_access(access));
  if (mr == nullptr) {
    return resource_exhausted("cannot register {} bytes of host memory: {} (is the locked-memory limit, ulimit -l, "
                              "too low?)", length, std::strerror(errno));
  }
  return Registration(mr);
}

Result<Registration> register_dmabuf(ibv_pd* pd, int fd, uint64_t offset, size_t length, uint64_t gpu_address,
                                     int access) {
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd, offset, length, gpu_address, fd, verbs_access(access));
  if (mr == nullptr) {
    return unavailable("cannot register {} bytes of GPU memory (dma-buf fd {}): {}; the NIC driver or kernel may "
                       "lack dma-buf support", length, fd, std::strerror(errno));
  }
  return Registration(mr);
}

}  // namespace deltacast::verbs
