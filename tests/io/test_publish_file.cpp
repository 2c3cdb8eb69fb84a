// Every output fsdp writes goes through temporary_beside and publish_file, and every input it
// reads past require_regular_file (or read_text_file): a symbolic link is followed and its target
// replaced, a device, a FIFO or a directory is never replaced nor read, a new file gets the mode
// the umask gives and a replaced one keeps its own, and two names of one file are one file.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "error_message.hpp"
#include "fsdp/core/error.hpp"
#include "fsdp/core/regular_file.hpp"
#include "fsdp/io/publish_file.hpp"

using namespace fsdp;
using fsdp::test::error_of;

namespace {

struct Scratch {
  std::string dir;
  Scratch() {
    char name[] = "/tmp/fsdp-publish-test-XXXXXX";
    BOOST_REQUIRE(::mkdtemp(name) != nullptr);
    dir = name;
  }
  ~Scratch() {
    const std::string command = "rm -rf '" + dir + "'";
    BOOST_TEST(std::system(command.c_str()) == 0);
  }
  std::string file(const std::string& name) const { return dir + "/" + name; }
};

// What every writer does: a temporary beside path, the bytes, then publish_file.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = temporary_beside(path);
  std::ofstream(temporary, std::ios::trunc) << text;
  publish_file(temporary, path);
}

std::string content(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct stat status_of(const std::string& path, bool follow = true) {
  struct stat status {};
  BOOST_REQUIRE((follow ? ::stat(path.c_str(), &status) : ::lstat(path.c_str(), &status)) == 0);
  return status;
}

mode_t permissions(const std::string& path) {
  return status_of(path).st_mode & 0777;
}

// Sets the umask for one scope.
struct Umask {
  mode_t old;
  explicit Umask(mode_t mask) : old(::umask(mask)) {}
  ~Umask() { ::umask(old); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(new_files_get_the_umask_mode_and_replaced_files_keep_theirs) {
  Scratch scratch;
  const Umask mask(027);
  const std::string created = scratch.file("plan.json");
  write_atomically(created, "new\n");
  BOOST_TEST(permissions(created) == 0640u);  // 0666 & ~027, as open(..., 0666) gives
  BOOST_REQUIRE(::chmod(created.c_str(), 0604) == 0);
  write_atomically(created, "replaced\n");
  BOOST_TEST(content(created) == "replaced\n");
  BOOST_TEST(permissions(created) == 0604u);  // as open(O_TRUNC) keeps it
  // The temporary itself has the final mode from the start (HDF5 writers reopen it by name).
  const std::string temporary = temporary_beside(scratch.file("new.h5"));
  BOOST_TEST(permissions(temporary) == 0640u);
  BOOST_TEST(std::remove(temporary.c_str()) == 0);
}

BOOST_AUTO_TEST_CASE(a_symbolic_link_is_followed_and_its_target_replaced) {
  Scratch scratch;
  BOOST_REQUIRE(::mkdir(scratch.file("real").c_str(), 0755) == 0);
  const std::string target = scratch.file("real/graph.json");
  std::ofstream(target) << "old\n";
  BOOST_REQUIRE(::chmod(target.c_str(), 0640) == 0);
  // A relative link, through a second (absolute) one: the chain is followed to its end.
  const std::string link = scratch.file("link.json");
  const std::string chain = scratch.file("chain.json");
  BOOST_REQUIRE(::symlink("real/graph.json", link.c_str()) == 0);
  BOOST_REQUIRE(::symlink(link.c_str(), chain.c_str()) == 0);
  write_atomically(chain, "new\n");
  BOOST_TEST(S_ISLNK(status_of(chain, false).st_mode));
  BOOST_TEST(S_ISLNK(status_of(link, false).st_mode));
  BOOST_TEST(content(target) == "new\n");
  BOOST_TEST(permissions(target) == 0640u);
  // A dangling link: its target is created, as open(O_CREAT) would.
  const std::string dangling = scratch.file("dangling.json");
  BOOST_REQUIRE(::symlink("real/created.json", dangling.c_str()) == 0);
  write_atomically(dangling, "created\n");
  BOOST_TEST(S_ISLNK(status_of(dangling, false).st_mode));
  BOOST_TEST(content(scratch.file("real/created.json")) == "created\n");
  // A loop: an error, nothing written.
  const std::string loop = scratch.file("loop.json");
  BOOST_REQUIRE(::symlink("loop.json", loop.c_str()) == 0);
  BOOST_CHECK_EXCEPTION(temporary_beside(loop), Error,
                        error_of(ErrorKind::io, "cannot write '" + loop +
                                                    "': it is a chain of more than 40 symbolic "
                                                    "links (a loop?)"));
}

BOOST_AUTO_TEST_CASE(devices_fifos_and_directories_are_neither_replaced_nor_read) {
  Scratch scratch;
  const std::string fifo = scratch.file("fifo");
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string directory = scratch.file("directory");
  BOOST_REQUIRE(::mkdir(directory.c_str(), 0755) == 0);
  const std::string link = scratch.file("link-to-fifo");
  BOOST_REQUIRE(::symlink("fifo", link.c_str()) == 0);
  // A device node of its own (the machine's /dev/full is not to be touched): root only.
  const std::string device = scratch.file("full");
  const bool have_device = ::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 7)) == 0;
  if (!have_device) {
    BOOST_TEST_MESSAGE("mknod: " << std::strerror(errno) << "; the device case is skipped");
  }
  const auto refused = [&](const std::string& path, const std::string& kind) {
    BOOST_CHECK_EXCEPTION(temporary_beside(path), Error,
                          error_of(ErrorKind::io, "it is " + kind +
                                                      ", not a regular file; fsdp replaces an "
                                                      "output whole"));
    BOOST_CHECK_EXCEPTION(publish_file(scratch.file("unused.tmp"), path), Error,
                          error_of(ErrorKind::io, "it is " + kind + ", not a regular file"));
    BOOST_CHECK_EXCEPTION(require_regular_file(path, "data file"), Error,
                          error_of(ErrorKind::io, "data file '" + path + "' is " + kind +
                                                      ", not a regular file; give the path of "
                                                      "a regular file"));
  };
  refused(fifo, "a FIFO");
  refused(directory, "a directory");
  refused(link, "a FIFO");
  BOOST_CHECK_EXCEPTION(temporary_beside(link), Error,
                        error_of(ErrorKind::io, "cannot write '" + link + "' (a link to '" +
                                                    scratch.file("fifo") + "')"));
  if (have_device) {
    refused(device, "a character device");
    BOOST_TEST(S_ISCHR(status_of(device).st_mode));
  }
  BOOST_TEST(S_ISFIFO(status_of(fifo).st_mode));
  BOOST_TEST(S_ISLNK(status_of(link, false).st_mode));
  // Nothing was left beside them.
  BOOST_TEST(std::system(("test $(ls '" + scratch.dir + "' | wc -l) -eq " +
                          std::to_string(have_device ? 4 : 3))
                             .c_str()) == 0);
  BOOST_CHECK_EXCEPTION(
      require_regular_file(scratch.file("missing.h5"), "checkpoint"), Error,
      error_of(ErrorKind::io, "cannot open checkpoint '" + scratch.file("missing.h5") +
                                  "': No such file or directory"));
}

BOOST_AUTO_TEST_CASE(two_names_of_one_file_are_one_file) {
  Scratch scratch;
  const std::string file = scratch.file("c.h5");
  std::ofstream(file) << "checkpoint\n";
  const std::string hard = scratch.file("hard.h5");
  BOOST_REQUIRE(::link(file.c_str(), hard.c_str()) == 0);
  const std::string soft = scratch.file("soft.h5");
  BOOST_REQUIRE(::symlink("c.h5", soft.c_str()) == 0);
  const std::string dotted = scratch.dir + "/./c.h5";
  for (const std::string& name : {file, hard, soft, dotted}) {
    BOOST_TEST(same_file(name, file));
    BOOST_CHECK_EXCEPTION(
        require_not_input(name, "OUTPUT", file, "CHECKPOINT"), Error,
        error_of(ErrorKind::usage, "OUTPUT '" + name + "' is the same file as CHECKPOINT '" + file +
                                       "', which writing it would replace: "
                                       "give the output another path"));
  }
  std::ofstream(scratch.file("other.h5")) << "checkpoint\n";
  BOOST_TEST(!same_file(scratch.file("other.h5"), file));
  BOOST_TEST(!same_file(scratch.file("missing.h5"), file));
  BOOST_TEST(!same_file(scratch.file("missing.h5"), scratch.file("missing.h5")));
  require_not_input(scratch.file("other.h5"), "OUTPUT", file, "CHECKPOINT");
  require_not_input("", "--output", "", "--model");
}
