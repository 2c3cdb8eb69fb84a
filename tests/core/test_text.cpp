// read_text_file, the one reader of text inputs (graph, model and plan JSON): exactly the bytes
// of a regular file; a device (/dev/zero reads forever), a FIFO (blocks forever without a writer)
// and a directory are refused at once, with the path and what would be right.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "error_message.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/text.hpp"

using namespace fsdp;
using fsdp::test::error_of;

BOOST_AUTO_TEST_CASE(text_inputs_are_regular_files_read_whole) {
  char directory[] = "/tmp/fsdp-text-test-XXXXXX";
  BOOST_REQUIRE(mkdtemp(directory) != nullptr);
  const std::string dir = directory;
  const std::string file = dir + "/model.json";
  const std::string content =
      std::string("{\"a\": 1}\n") + std::string(100000, ' ') + std::string(1, '\0') + "x";
  std::ofstream(file, std::ios::binary) << content;
  BOOST_TEST(read_text_file(file, "model description") == content);

  const std::string fifo = dir + "/fifo.json";
  BOOST_REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::pair<std::string, std::string> refused[] = {
      {"/dev/zero", "a character device"}, {fifo, "a FIFO"}, {dir, "a directory"}};
  for (const auto& [path, kind] : refused) {
    BOOST_CHECK_EXCEPTION(read_text_file(path, "graph file"), Error,
                          error_of(ErrorKind::io, "graph file '" + path + "' is " + kind +
                                                      ", not a regular file; give the path of "
                                                      "a regular file"));
  }
  BOOST_CHECK_EXCEPTION(read_text_file(dir + "/missing.json", "plan file"), Error,
                        error_of(ErrorKind::io, "cannot open plan file '" + dir +
                                                    "/missing.json': No such file or directory"));
  // Larger than the cap: refused from its size, without reading it (a sparse file).
  const std::string big = dir + "/big.json";
  std::ofstream{big};
  BOOST_REQUIRE(truncate(big.c_str(), kMostTextBytes + 1) == 0);
  BOOST_CHECK_EXCEPTION(
      read_text_file(big, "model description"), Error,
      error_of(ErrorKind::io, "has 268435457 bytes; text inputs are at most 268435456 bytes"));
  const std::string command = "rm -rf '" + dir + "'";
  BOOST_TEST(std::system(command.c_str()) == 0);
}
