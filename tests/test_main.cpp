// The main of every Boost.Test suite: MPI and Kokkos around all tests, and an observer that turns a
// failure on one rank into the failure of the whole job instead of a hang.
#define BOOST_TEST_MODULE fsdp
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdio>

namespace {

class AbortOnFailure : public boost::unit_test::test_observer {
 public:
  void assertion_result(boost::unit_test::assertion_result result) override {
    if (result == boost::unit_test::AR_FAILED) {
      failed_ = true;
    }
  }
  void exception_caught(const boost::execution_exception&) override { failed_ = true; }
  void test_unit_aborted(const boost::unit_test::test_unit&) override { failed_ = true; }

  void test_unit_finish(const boost::unit_test::test_unit& unit, unsigned long) override {
    if (failed_ && unit.p_type == boost::unit_test::TUT_CASE) {
      int rank = -1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      std::fprintf(stderr,
                   "fsdp tests: '%s' failed on rank %d; aborting every rank so that none waits "
                   "in a collective for this one\n",
                   unit.full_name().c_str(), rank);
      std::fflush(stderr);
      std::fflush(stdout);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  // Run after Boost's own observers have logged the failure.
  int priority() override { return 1000; }

 private:
  bool failed_ = false;
};

struct MpiKokkosEnvironment {
  MpiKokkosEnvironment() {
    auto& suite = boost::unit_test::framework::master_test_suite();
    int provided = 0;
    MPI_Init_thread(&suite.argc, &suite.argv, MPI_THREAD_FUNNELED, &provided);
    Kokkos::initialize(suite.argc, suite.argv);
    boost::unit_test::framework::register_observer(observer);
  }
  ~MpiKokkosEnvironment() {
    boost::unit_test::framework::deregister_observer(observer);
    Kokkos::finalize();
    MPI_Finalize();
  }
  AbortOnFailure observer;
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(MpiKokkosEnvironment);
