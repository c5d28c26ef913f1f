// Options for a test worker whose peer connections go through the chaos
// transport (which wraps FERRY_CHAOS_INNER, tcp in these tests); the store's
// own connection is always plain tcp.
#pragma once

#include <ferry/ferry.hpp>

#include <chrono>
#include <string>

namespace ferry_test {

inline ferry::Worker::Options ChaosWorkerOptions(const std::string& name,
                                                 const std::string& job,
                                                 const std::string& store,
                                                 bool host_store) {
  ferry::Worker::Options o;
  o.name = name;
  o.job = job;
  o.transport = "chaos";
  o.store = store;
  o.host_store = host_store;
  o.secret = "chaos-test-secret";
  o.default_timeout = std::chrono::milliseconds(10000);
  return o;
}

}  // namespace ferry_test
