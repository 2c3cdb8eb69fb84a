// Rank 1 fails an assertion while rank 0 waits in a barrier that rank 1 never reaches: the job must
// end, within the test's timeout, through the test observer's MPI_Abort. CTest passes the test when
// the output has the observer's "failed on rank 1; aborting every rank" (PASS_REGULAR_EXPRESSION,
// which ignores the exit code); a hang fails it by the timeout.
#include <boost/test/unit_test.hpp>

#include "fsdp/comm/process_group.hpp"

BOOST_AUTO_TEST_CASE(one_rank_fails_while_the_other_waits) {
  fsdp::ProcessGroup group(MPI_COMM_WORLD);
  if (group.rank() == 1) {
    BOOST_TEST(false, "rank 1 fails on purpose");
    return;
  }
  group.barrier();  // never completes: rank 1 aborts the job instead
}
