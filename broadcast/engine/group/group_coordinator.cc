#include "broadcast/engine/group/group_coordinator.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/engine/control/control_messages.h"
#include "broadcast/transport/handshake.h"
#include "broadcast/transport/socket.h"
#include "core/log.h"

namespace deltacast {

Result<std::unique_ptr<GroupCoordinator>> GroupCoordinator::create(std::vector<TensorSpec> logical, uint32_t world,
                                                                   GroupCoordinatorOptions options) {
  DC_ASSIGN_OR_RETURN(auto directory, GroupDirectory::create(std::move(logical), world));
  std::unique_ptr<GroupCoordinator> c(new GroupCoordinator(std::move(directory), std::move(options)));
  auto bound = net::listen_socket(c->options_.netns, c->options_.listen);
  if (!bound.ok()) return bound.status().with_context("the group coordinator's address");
  c->listen_fd_ = bound->first;
  c->address_ = bound->second;
  c->server_ = std::thread([raw = c.get()] { raw->serve_loop(); });
  log().info("group coordinator: listening on {} for {} ranks", c->address_.to_string(), world);
  return c;
}

GroupCoordinator::GroupCoordinator(std::unique_ptr<GroupDirectory> directory, GroupCoordinatorOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {}

GroupCoordinator::~GroupCoordinator() { close(); }

void GroupCoordinator::close() {
  if (closed_.exchange(true)) return;
  if (server_.joinable()) server_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

Status GroupCoordinator::register_here(RankEntry entry, const std::vector<TensorSpec>& logical) {
  const uint32_t rank = entry.rank;
  DC_RETURN_IF_ERROR(directory_->register_rank(std::move(entry), logical));
  log().info("group coordinator: rank {} registered here ({} of {})", rank, directory_->registered(), directory_->world());
  return Status();
}

void GroupCoordinator::serve_loop() {
  while (!closed_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0 || closed_) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    answer(fd);
    ::close(fd);
  }
}

void GroupCoordinator::answer(int fd) {
  const auto deadline = ControlClock::now() + options_.request_timeout;
  net::tune_socket(fd, net::SocketOptions{});
  const std::string peer = net::peer_name(fd);
  auto session =
      net::shake_hands(fd, trust::Role::kServer, options_.trust, trust::Purpose::kCoordinator, deadline, &closed_);
  if (!session.ok()) {
    log().warn("group coordinator: refused {}: {}", peer, session.status().message());
    return;
  }
  auto text = read_control_frame(fd, *session->seals.incoming, deadline, options_.request_timeout, &closed_);
  auto request = text.ok() ? control::decode_text(*text) : Result<control::Message>(text.status());
  if (!request.ok()) {
    log().warn("group coordinator: dropped {}: {}", peer, request.status().message());
    return;
  }
  const control::Message reply = handle(*request, peer);
  (void)write_control_frame(fd, control::encode_text(reply), *session->seals.outgoing, deadline, &closed_);
}

control::Message GroupCoordinator::handle(const control::Message& request, const std::string& peer) {
  const auto refuse = [&](const Status& s) -> control::Message {
    if (s.code() != StatusCode::kUnavailable) log().warn("group coordinator: refused {}: {}", peer, s.message());
    return control::Reject{s.code(), s.message()};
  };
  const auto admitted = [&](uint32_t protocol) -> Status {
    if (protocol != control::kProtocolVersion) {
      return failed_precondition("control protocol {} (the coordinator speaks {})", protocol, control::kProtocolVersion);
    }
    return Status();
  };
  if (const auto* r = std::get_if<control::Register>(&request)) {
    if (Status s = admitted(r->protocol); !s.ok()) return refuse(s);
    if (r->world != directory_->world()) {
      return refuse(mismatch("rank {} belongs to a group of {} ranks; this coordinator's has {}", r->rank.rank, r->world,
                             directory_->world()));
    }
    const size_t before = directory_->registered();
    if (Status s = directory_->register_rank(r->rank, r->logical); !s.ok()) return refuse(s);
    const size_t now = directory_->registered();
    // Every rank registers again every few seconds: only a newcomer is news.
    log().log(now > before ? spdlog::level::info : spdlog::level::debug,
              "group coordinator: rank {} registered from {} ({} of {})", r->rank.rank, peer, now, directory_->world());
    return control::Registered{static_cast<uint32_t>(now), directory_->world()};
  }
  if (const auto* f = std::get_if<control::FindGroup>(&request)) {
    if (Status s = admitted(f->protocol); !s.ok()) return refuse(s);
    auto view = directory_->group();
    if (!view.ok()) return refuse(view.status());
    return control::Group{std::move(view).value()};
  }
  return refuse(corrupt("a group coordinator answers register and find_group, not '{}'", control::type_name(request)));
}

}  // namespace deltacast
