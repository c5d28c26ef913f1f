// The requirement table: one entry per conformance test. The id is what a
// report, a JUnit property and docs/conformance.md call the requirement; the
// gate says which capability (if any) it needs, so a report can say why it
// did not run. Keep this table and docs/conformance.md in step.
#pragma once

#include <string>
#include <vector>

namespace ferry::conformance {

struct Requirement {
  const char* id;      // "MSG-3"
  const char* suite;   // the fixture class: "MessagingTest"
  const char* test;    // the TEST_P name: "OversizedMessageRefused"
  const char* gate;    // "" or the capability / feature it needs
  const char* title;   // one line for reports
  bool needs_context;  // SetUp opens contexts (init must work)
};

const std::vector<Requirement>& Requirements();
// The entry for a gtest suite name ("Plugins/MessagingTest") and test name
// ("OversizedMessageRefused/tcp"); nullptr when there is none.
const Requirement* FindRequirement(const std::string& suite_name,
                                   const std::string& test_name);
const Requirement* FindRequirementById(const std::string& id);

}  // namespace ferry::conformance
