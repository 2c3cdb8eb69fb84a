// Predicate for BOOST_CHECK_EXCEPTION: the fsdp::Error's message contains text (and is shown when
// it does not, so a failing check says what the message was).
#pragma once

#include <boost/test/unit_test.hpp>
#include <string>

#include "fsdp/core/error.hpp"

namespace fsdp::test {

inline auto message_has(const std::string& text) {
  return [text](const Error& error) {
    const bool found = std::string(error.what()).find(text) != std::string::npos;
    if (!found) {
      BOOST_TEST_MESSAGE("message was: " << error.what());
    }
    return found;
  };
}

}  // namespace fsdp::test
