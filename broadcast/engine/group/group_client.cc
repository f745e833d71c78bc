#include "broadcast/engine/group/group_client.h"

#include <unistd.h>

#include "broadcast/engine/control/control_frame.h"
#include "broadcast/transport/handshake.h"
#include "broadcast/transport/socket.h"
#include "core/log.h"

namespace deltacast {

namespace {

// A reject the asker cannot change by asking again (UNAVAILABLE: the group is still forming).
bool final_refusal(const control::Message& reply) {
  const auto* reject = std::get_if<control::Reject>(&reply);
  return reject != nullptr && reject->code != StatusCode::kUnavailable;
}

Status reject_status(const control::Reject& reject) { return Status(reject.code, reject.reason); }

}  // namespace

Result<control::Message> ask_coordinator(const Endpoint& coordinator, const control::Message& request,
                                         const GroupClientOptions& options) {
  const auto deadline = ControlClock::now() + options.request_timeout;
  DC_ASSIGN_OR_RETURN(const int fd, net::open_socket(options.netns));
  Result<control::Message> reply = unavailable("no answer");
  Status s = net::connect_socket(fd, Endpoint{"0.0.0.0", 0}, coordinator, options.request_timeout);
  Result<net::Session> session = unavailable("not connected");
  if (s.ok()) {
    session = net::shake_hands(fd, trust::Role::kClient, options.trust, trust::Purpose::kCoordinator, deadline);
    s = session.status();
    // A wrong secret or protection is the coordinator's final word, as a refusal would be.
    if (s.code() == StatusCode::kPermissionDenied) reply = control::Message(control::Reject{s.code(), s.message()});
  }
  if (s.ok()) s = write_control_frame(fd, control::encode_text(request), *session->seals.outgoing, deadline);
  if (s.ok()) {
    auto text = read_control_frame(fd, *session->seals.incoming, deadline, options.request_timeout);
    reply = text.ok() ? control::decode_text(*text) : Result<control::Message>(text.status());
  } else if (s.code() != StatusCode::kPermissionDenied) {
    reply = s;
  }
  ::close(fd);
  if (!reply.ok()) return reply.status().with_context(fmt::format("group coordinator {}", coordinator.to_string()));
  return reply;
}

Result<GroupView> find_group(const GroupClientOptions& options, Millis timeout, Millis retry) {
  if (options.coordinators.empty()) return invalid_argument("no group coordinator address");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last;
  for (size_t attempt = 0;; ++attempt) {
    const Endpoint& at = options.coordinators[attempt % options.coordinators.size()];
    auto reply = ask_coordinator(at, control::FindGroup{control::kProtocolVersion}, options);
    if (reply.ok()) {
      if (auto* group = std::get_if<control::Group>(&*reply)) return std::move(group->view);
      if (final_refusal(*reply)) return reject_status(std::get<control::Reject>(*reply)).with_context("the group coordinator");
      last = std::holds_alternative<control::Reject>(*reply)
                 ? reject_status(std::get<control::Reject>(*reply))
                 : corrupt("group coordinator {} answered '{}' to find_group", at.to_string(), control::type_name(*reply));
    } else {
      last = reply.status();
    }
    if (std::chrono::steady_clock::now() + retry >= deadline) {
      return deadline_exceeded("no group within {} ms: {}", timeout.count(), last.message());
    }
    std::this_thread::sleep_for(retry);
  }
}

RankRegistration::RankRegistration(GroupClientOptions options, control::Register request, Millis every)
    : options_(std::move(options)), request_(std::move(request)), every_(every) {
  thread_ = std::thread([this] { loop(); });
}

RankRegistration::~RankRegistration() { stop(); }

void RankRegistration::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

Status RankRegistration::wait(Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return registered_ || !refused_.ok() || stopping_; });
  if (!refused_.ok()) return refused_;
  if (registered_) return Status();
  return deadline_exceeded("rank {} was not registered with the group coordinator within {} ms: {}",
                           request_.rank.rank, timeout.count(), last_error_.message());
}

void RankRegistration::loop() {
  const Millis retry(200);
  for (size_t attempt = 0;; ++attempt) {
    Status s;
    if (options_.coordinators.empty()) {
      s = invalid_argument("no group coordinator address");
    } else {
      const Endpoint& at = options_.coordinators[attempt % options_.coordinators.size()];
      auto reply = ask_coordinator(at, request_, options_);
      if (!reply.ok()) {
        s = reply.status();
      } else if (std::holds_alternative<control::Registered>(*reply)) {
        s = Status();
      } else if (const auto* reject = std::get_if<control::Reject>(&*reply)) {
        s = reject_status(*reject);
        if (final_refusal(*reply)) {
          log().error("rank {}: the group coordinator refused it: {}", request_.rank.rank, reject->reason);
          std::lock_guard<std::mutex> lock(mu_);
          refused_ = s.with_context("the group coordinator");
          cv_.notify_all();
          return;
        }
      } else {
        s = corrupt("group coordinator {} answered '{}' to register", at.to_string(), control::type_name(*reply));
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (s.ok()) {
      registered_ = true;
    } else {
      last_error_ = s;
    }
    cv_.notify_all();
    // Registered: again after `every_` (it costs one small message); not yet: soon.
    cv_.wait_for(lock, s.ok() ? every_ : retry, [&] { return stopping_; });
    if (stopping_) return;
  }
}

}  // namespace deltacast
