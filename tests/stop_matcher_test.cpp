// Stop strings over streamed text (server/runtime/stop_matcher.h): nothing of a stop string is
// ever released, text that turns out not to be one is released in order, and the earliest stop
// wins.
#include <gtest/gtest.h>

#include "server/runtime/stop_matcher.h"

namespace waste {
namespace {

TEST(StopMatcher, WithoutStopsEverythingPassesAtOnce) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.push(""), "");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, AStopInsideOnePush) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abENDcd"), "ab");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

// The Messages API reports which stop sequence ended the reply: the one that occurs first.
TEST(StopMatcher, SaysWhichStopMatched) {
  StopMatcher m({"zz", "b", "END"});
  EXPECT_EQ(m.matched(), "");
  EXPECT_EQ(m.push("aENDb"), "a");
  EXPECT_EQ(m.matched(), "END");
}

TEST(StopMatcher, AStopAcrossPushesIsHeldBackUntilDecided) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("aE"), "a");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("Dx"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HeldTextIsReleasedWhenItIsNotAStop) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("aEN"), "a");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_EQ(m.push("E"), "");
  EXPECT_EQ(m.flush(), "E");  // the end of generation releases what is held
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, TheEarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, HoldsTheLongestTailThatMayStartAStop) {
  StopMatcher m({"xyz", "yy"});
  EXPECT_EQ(m.push("axy"), "a");  // "xy" may start "xyz"
  EXPECT_EQ(m.push("y"), "x");    // "xyy": "yy" found after "x"
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultiByteTextIsNotSplit) {
  StopMatcher m({"é!"});
  EXPECT_EQ(m.push("aé"), "a");
  EXPECT_EQ(m.push("b"), "éb");
}

}  // namespace
}  // namespace waste
