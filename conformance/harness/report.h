// The runner's reports. A gtest event listener collects, per plugin and per
// requirement id, whether the test passed, failed or did not run (and why),
// then writes the readable report on stdout, the JSON report and the JUnit
// XML. It also carries two safety nets that turn a broken plugin into a
// report instead of a silent death: a per-test watchdog (a plugin call that
// never returns) and a fatal-signal note naming the test that crashed.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace ferry::conformance {

enum class Result { kPass, kFail, kNotRun };
const char* ResultWord(Result result);  // "PASS", "FAIL", "NOT RUN"

struct Outcome {
  std::string plugin;       // PluginCase label
  std::string requirement;  // "MSG-3"
  std::string test;         // "Plugins/MessagingTest.OversizedMessageRefused/tcp"
  Result result = Result::kPass;
  std::string reason;  // empty for a pass
  double seconds = 0;
};

struct Counts {
  int passed = 0, failed = 0, not_run = 0;
};

class Report : public ::testing::EmptyTestEventListener {
 public:
  explicit Report(std::chrono::seconds test_timeout);
  ~Report() override;

  void OnTestStart(const ::testing::TestInfo& info) override;
  void OnTestEnd(const ::testing::TestInfo& info) override;

  void PrintText(std::ostream& os) const;
  bool WriteJson(const std::string& path, std::string* error) const;
  bool WriteJunit(const std::string& path, std::string* error) const;
  Counts counts() const;

  // Where to write reports if the watchdog has to end the run.
  void SetOutputs(std::string json, std::string junit);

 private:
  void Watch();
  void OnHang();

  mutable std::mutex mu_;
  std::vector<Outcome> outcomes_;
  std::string current_test_, current_plugin_, current_requirement_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::seconds timeout_;
  bool running_ = false, stop_ = false;
  std::condition_variable cv_;
  std::thread watchdog_;
  std::string json_path_, junit_path_;
};

// Prints which test was running when a fatal signal arrives, then dies with
// that signal (a crash stays a crash, but a named one).
void InstallFatalSignalNote();

}  // namespace ferry::conformance
