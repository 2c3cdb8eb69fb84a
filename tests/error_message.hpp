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

// Predicate for BOOST_CHECK_EXCEPTION: an Error of this kind whose message contains text.
inline auto error_of(ErrorKind kind, const std::string& text) {
  return [kind, text](const Error& error) {
    if (error.kind() != kind) {
      BOOST_TEST_MESSAGE("kind was " << name_of(error.kind()) << ", expected " << name_of(kind)
                                     << ": " << error.what());
      return false;
    }
    return message_has(text)(error);
  };
}

}  // namespace fsdp::test
