// The fake backend's receiver end: binds addresses in the FakeNetwork to a sink.
#pragma once

#include "broadcast/testing/fake/wire.h"

namespace deltacast::fake {

class FakeListener : public Listener {
 public:
  FakeListener(FakeNetwork* network, std::vector<Endpoint> endpoints, SliceSink* sink);
  ~FakeListener() override;

  std::vector<Endpoint> endpoints() const override { return endpoints_; }
  void close() override;

 private:
  FakeNetwork* network_;
  std::vector<Endpoint> endpoints_;
  bool closed_ = false;
};

}  // namespace deltacast::fake
