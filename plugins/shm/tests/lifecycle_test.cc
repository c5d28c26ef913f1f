// Many contexts and connections, opened and closed again and again, leave no
// fd, no mapping and nothing in /dev/shm behind.
#include "shm_fixture.h"

#include <algorithm>

namespace ferry_shm_test {
namespace {

class LifecycleTest : public ShmTest {};

TEST_F(LifecycleTest, RepeatedContextsLeaveNothingBehind) {
  auto dev_shm = ListDir("/dev/shm");
  std::sort(dev_shm.begin(), dev_shm.end());
  // Warm up once (the loader and the host's logger open what they keep).
  {
    Pair p;
    ASSERT_TRUE(MakePair(&p));
    ClosePair(&p);
  }
  const int fds = CountFds();
  for (int round = 0; round < 10; ++round) {
    Pair p;
    ASSERT_TRUE(MakePair(&p));
    std::vector<unsigned char> out(300000), in(300000);
    FillPattern(out.data(), out.size(), static_cast<uint64_t>(round));
    ASSERT_TRUE(p.a->Send(p.client, "r", {{out.data(), out.size()}}).ok());
    Event arrival, placed;
    ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                          [&] { return p.b->TryTake(FERRY_EV_ARRIVAL, &arrival); }));
    ASSERT_TRUE(p.b->PlaceAll(arrival, {in.data()}, nullptr).ok());
    ASSERT_TRUE(PumpUntil({p.a.get(), p.b.get()},
                          [&] { return p.b->TryTake(FERRY_EV_PLACE_DONE, &placed); }));
    ASSERT_EQ(PatternMismatch(in.data(), in.size(), static_cast<uint64_t>(round)), -1);
    ClosePair(&p);
    EXPECT_TRUE(ShmMappings().empty()) << "round " << round;
  }
  EXPECT_EQ(CountFds(), fds);
  EXPECT_TRUE(ListDir(socket_dir_).empty());
  auto after = ListDir("/dev/shm");
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, dev_shm);
}

}  // namespace
}  // namespace ferry_shm_test
