// EnumNames, the one table behind every enum's name_of and parse: both directions read it, the
// error lists it, and a user's name is quoted so that it cannot flood or garble the message.
#include <boost/test/unit_test.hpp>
#include <string>

#include "error_message.hpp"
#include "fsdp/core/enum_names.hpp"
#include "fsdp/core/text.hpp"
#include "fsdp/shard/sharding_mode.hpp"

using namespace fsdp;
using fsdp::test::error_of;

namespace {

enum class Fruit { apple, pear, quince };

const EnumNames<Fruit> kFruits("fruit",
                               {{Fruit::apple, "apple"},
                                {Fruit::pear, "pear", "ripe in autumn"},
                                {Fruit::quince, "quince_jelly"}},
                               {{"malus", Fruit::apple}});

const EnumNames<Fruit> kAnyCase("fruit", {{Fruit::apple, "apple"}, {Fruit::quince, "quince_jelly"}},
                                {}, Spelling::any_case);

}  // namespace

BOOST_AUTO_TEST_CASE(both_directions_read_one_table) {
  for (const std::string& name : kFruits.names()) {
    BOOST_TEST(kFruits.name_of(kFruits.parse(name)) == name);
  }
  BOOST_TEST((kFruits.parse("malus") == Fruit::apple));
  BOOST_TEST(kFruits.name_of(Fruit::apple) == std::string("apple"));  // never the alias
  BOOST_TEST(kFruits.name_of(static_cast<Fruit>(7)) == std::string("unknown"));
  BOOST_TEST(kAnyCase.name_of(Fruit::pear) == std::string("unknown"));
}

BOOST_AUTO_TEST_CASE(spelling_is_exact_unless_the_table_says_any_case) {
  BOOST_CHECK_THROW(kFruits.parse("Apple"), Error);
  BOOST_CHECK_THROW(kFruits.parse("quince-jelly"), Error);
  BOOST_TEST((kAnyCase.parse("Apple") == Fruit::apple));
  BOOST_TEST((kAnyCase.parse("QUINCE-jelly") == Fruit::quince));
  // The library's own tables: command-line names take any case and dashes.
  BOOST_TEST((parse_sharding_mode("Shard-Grad-Op") == ShardingMode::shard_grad_op));
  BOOST_TEST((parse_sharding_mode("ZERO1") == ShardingMode::shard_optimizer));
  BOOST_TEST(name_of(ShardingMode::no_shard) == std::string("no_shard"));
}

BOOST_AUTO_TEST_CASE(an_unknown_name_gets_the_list_of_names) {
  BOOST_TEST(kFruits.expected() == "apple, pear (ripe in autumn) or quince_jelly");
  BOOST_CHECK_EXCEPTION(
      kFruits.parse("plum"), Error,
      error_of(ErrorKind::usage,
               "unknown fruit 'plum'; expected apple, pear (ripe in autumn) or quince_jelly"));
}

BOOST_AUTO_TEST_CASE(a_users_name_is_quoted_short_and_printable) {
  BOOST_TEST(quoted_name("plum") == "'plum'");
  BOOST_TEST(quoted_name("") == "''");
  BOOST_TEST(quoted_name(std::string("a\nb\0c\x7f", 6)) == "'a?b?c?'");
  BOOST_TEST(quoted_name(std::string(64, 'x')) == "'" + std::string(64, 'x') + "'");
  BOOST_TEST(quoted_name(std::string(1000000, 'x')) == "'" + std::string(64, 'x') + "...'");
  BOOST_CHECK_EXCEPTION(kFruits.parse(std::string(1000, 'y')), Error,
                        error_of(ErrorKind::usage, std::string(64, 'y') + "...'; expected"));
}
