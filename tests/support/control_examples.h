// One control message of every type with every field set: what the control
// message tests round-trip and damage, and what the control fuzzer starts from.
#pragma once

#include <vector>

#include "broadcast/engine/control/control_messages.h"

namespace deltacast::testing {

control::Forwarding some_forwarding();
LinkSample some_link_sample();
// A rank of a group of one registering two pieces.
control::Register some_registration();
std::vector<control::Message> every_control_message();

}  // namespace deltacast::testing
