// fsdp::Error: one "fsdp: " in front of every message, kinds, and messages inside messages.
#include <boost/test/unit_test.hpp>
#include <stdexcept>
#include <string>

#include "fsdp/core/error.hpp"

using namespace fsdp;

BOOST_AUTO_TEST_CASE(what_starts_with_one_prefix_and_message_has_none) {
  const Error error(ErrorKind::io, "cannot open plan file 'p.h5'");
  BOOST_TEST(std::string(error.what()) == "fsdp: cannot open plan file 'p.h5'");
  BOOST_TEST(std::string(error.message()) == "cannot open plan file 'p.h5'");
  BOOST_TEST((error.kind() == ErrorKind::io));
  BOOST_TEST((Error("bad argument").kind() == ErrorKind::usage));
  BOOST_TEST(std::string(Error("").what()) == "fsdp: ");
}

BOOST_AUTO_TEST_CASE(message_of_nests_without_a_second_prefix) {
  const Error inner(ErrorKind::mismatch, "ranks disagree");
  const Error outer("plan file 'p.h5' is inconsistent: " + message_of(inner));
  BOOST_TEST(std::string(outer.what()) == "fsdp: plan file 'p.h5' is inconsistent: ranks disagree");
  BOOST_TEST(message_of(std::runtime_error("disk full")) == "disk full");
}

BOOST_AUTO_TEST_CASE(require_throws_with_its_kind_only_when_false) {
  BOOST_CHECK_NO_THROW(require(true, "never"));
  try {
    require(false, "count must be >= 1", ErrorKind::usage);
    BOOST_FAIL("require(false) did not throw");
  } catch (const Error& error) {
    BOOST_TEST(std::string(error.what()) == "fsdp: count must be >= 1");
  }
  BOOST_TEST(std::string(name_of(ErrorKind::timeout)) == "timeout");
}

// The lambda form makes its message only on failure (hot paths: every collective, every step).
BOOST_AUTO_TEST_CASE(require_makes_a_lazy_message_only_when_false) {
  int made = 0;
  const auto message = [&made] {
    ++made;
    return "rank " + std::to_string(made) + " is out of range";
  };
  BOOST_CHECK_NO_THROW(require(true, message));
  BOOST_TEST(made == 0);
  try {
    require(false, message, ErrorKind::state);
    BOOST_FAIL("require(false) did not throw");
  } catch (const Error& error) {
    BOOST_TEST(error.message() == "rank 1 is out of range");
    BOOST_TEST((error.kind() == ErrorKind::state));
  }
  BOOST_TEST(made == 1);
}
