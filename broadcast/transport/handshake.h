// The trust handshake (core/trust/handshake.h) over a connected TCP socket: what every control
// connection, coordinator request and TCP data channel does first. Returns the session's seals,
// or a refusal that names the reason (wrong secret, modes that do not agree, a peer without
// authentication); the caller then drops the connection.
#pragma once

#include <atomic>

#include "broadcast/transport/socket.h"
#include "core/trust/frame_seal.h"
#include "core/trust/trust.h"

namespace deltacast::net {

struct Session {
  trust::SessionSeals seals;
  // What the two ends agreed on.
  trust::Protection mode() const { return seals.outgoing->mode(); }
};

// `role`: kClient on the side that connected, kServer on the side that accepted.
Result<Session> shake_hands(int fd, trust::Role role, const trust::Trust& trust, trust::Purpose purpose,
                            Clock::time_point deadline, const std::atomic<bool>* stop = nullptr);

}  // namespace deltacast::net
