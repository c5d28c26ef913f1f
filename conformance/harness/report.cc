#include "harness/report.h"

#include "harness/plugin_cases.h"
#include "harness/requirements.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace ferry::conformance {
namespace {

// For the fatal-signal note: written by OnTestStart, read by a signal
// handler (so a plain buffer, not a std::string).
char g_running[512] = "(no test running)";

void FatalSignal(int sig) {
  const char* name = sig == SIGSEGV   ? "SIGSEGV"
                     : sig == SIGBUS  ? "SIGBUS"
                     : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGFPE  ? "SIGFPE"
                                      : "SIGILL";
  const char* a = "\nferry-conformance: fatal signal ";
  (void)!write(2, a, std::strlen(a));
  (void)!write(2, name, std::strlen(name));
  const char* b = " while running ";
  (void)!write(2, b, std::strlen(b));
  (void)!write(2, g_running, std::strlen(g_running));
  const char* c =
      "\n  The plugin (or the suite) crashed: the requirement above "
      "is the one to look at; rerun it alone with "
      "--gtest_filter to debug.\n";
  (void)!write(2, c, std::strlen(c));
  signal(sig, SIG_DFL);
  raise(sig);
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\n':
        out += "&#10;";
        break;
      default:
        if (c < 0x20 && c != '\t') {
          out += ' ';
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

// The reason for a failure: every failed assertion's message (first lines),
// joined; long messages are cut so a report stays readable.
std::string FailureReason(const ::testing::TestResult& result) {
  std::string reason;
  for (int i = 0; i < result.total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(i);
    if (!part.failed()) continue;
    std::string msg = part.message();
    // ADD_FAILURE()/GTEST_FAIL() prefix "Failed\n": noise in a report.
    if (msg.rfind("Failed\n", 0) == 0) msg.erase(0, 7);
    if (msg.size() > 1500) msg = msg.substr(0, 1500) + " [...]";
    if (!reason.empty()) reason += "\n";
    reason += msg;
  }
  return reason.empty() ? "failed (no message)" : reason;
}

std::string SkipReason(const ::testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(i);
    if (part.skipped()) return part.message();
  }
  return "skipped";
}

std::string Property(const ::testing::TestResult& result, const char* key) {
  for (int i = 0; i < result.test_property_count(); ++i) {
    const ::testing::TestProperty& p = result.GetTestProperty(i);
    if (std::strcmp(p.key(), key) == 0) return p.value();
  }
  return "";
}

const PluginCase* CaseByLabel(const std::string& label) {
  for (const PluginCase& c : PluginCases()) {
    if (c.label == label) return &c;
  }
  return nullptr;
}

std::string Title(const std::string& id) {
  const Requirement* r = FindRequirementById(id);
  return r == nullptr ? "" : r->title;
}

// Position of a requirement in the table (reports follow the table).
size_t TableIndex(const std::string& id) {
  const auto& table = Requirements();
  for (size_t i = 0; i < table.size(); ++i) {
    if (id == table[i].id) return i;
  }
  return table.size();
}

// Plugins in the order of PluginCases, each with its outcomes in the order
// of the requirement table.
std::vector<std::pair<std::string, std::vector<const Outcome*>>> ByPlugin(
    const std::vector<Outcome>& outcomes) {
  std::vector<std::pair<std::string, std::vector<const Outcome*>>> out;
  for (const PluginCase& c : PluginCases()) {
    std::vector<const Outcome*> list;
    for (const Outcome& o : outcomes) {
      if (o.plugin == c.label) list.push_back(&o);
    }
    std::stable_sort(list.begin(), list.end(), [](const Outcome* x, const Outcome* y) {
      return TableIndex(x->requirement) < TableIndex(y->requirement);
    });
    out.emplace_back(c.label, list);
  }
  return out;
}

std::string PluginLine(const PluginCase& c) {
  std::ostringstream s;
  if (c.plugin) {
    s << c.plugin->name() << " " << c.plugin->version() << "  ABI "
      << c.plugin->abi_major() << "." << c.plugin->abi_minor() << " (plugin supports "
      << c.plugin->abi_major() << "." << c.plugin->plugin_minor_min() << "-"
      << c.plugin->abi_major() << "." << c.plugin->plugin_minor_max() << ")  "
      << c.plugin->path();
  } else {
    s << c.label << "  (did not load: " << c.requested << ")";
  }
  return s.str();
}

}  // namespace

const char* ResultWord(Result result) {
  switch (result) {
    case Result::kPass:
      return "PASS";
    case Result::kFail:
      return "FAIL";
    case Result::kNotRun:
      return "NOT RUN";
  }
  return "?";
}

void InstallFatalSignalNote() {
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = FatalSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigaction(sig, &sa, nullptr);
  }
}

Report::Report(std::chrono::seconds test_timeout) : timeout_(test_timeout) {
  if (timeout_.count() > 0) watchdog_ = std::thread([this] { Watch(); });
}

Report::~Report() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void Report::SetOutputs(std::string json, std::string junit) {
  std::lock_guard<std::mutex> lock(mu_);
  json_path_ = std::move(json);
  junit_path_ = std::move(junit);
}

void Report::OnTestStart(const ::testing::TestInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  current_test_ = std::string(info.test_suite_name()) + "." + info.name();
  const Requirement* r = FindRequirement(info.test_suite_name(), info.name());
  current_requirement_ = r ? r->id : "?";
  std::string name = info.name();
  size_t slash = name.rfind('/');
  current_plugin_ = slash == std::string::npos ? "" : name.substr(slash + 1);
  std::snprintf(g_running, sizeof g_running, "%s (requirement %s, plugin %s)",
                current_test_.c_str(), current_requirement_.c_str(),
                current_plugin_.c_str());
  started_ = std::chrono::steady_clock::now();
  running_ = true;
  cv_.notify_all();
}

void Report::OnTestEnd(const ::testing::TestInfo& info) {
  const ::testing::TestResult& result = *info.result();
  Outcome o;
  o.test = std::string(info.test_suite_name()) + "." + info.name();
  o.plugin = Property(result, "plugin");
  o.requirement = Property(result, "requirement");
  if (o.requirement.empty()) {
    const Requirement* r = FindRequirement(info.test_suite_name(), info.name());
    o.requirement = r ? r->id : "?";
  }
  if (o.plugin.empty()) {
    std::string name = info.name();
    size_t slash = name.rfind('/');
    o.plugin = slash == std::string::npos ? "" : name.substr(slash + 1);
  }
  o.seconds = static_cast<double>(result.elapsed_time()) / 1000.0;
  if (result.Failed()) {
    o.result = Result::kFail;
    o.reason = FailureReason(result);
  } else if (result.Skipped()) {
    o.result = Result::kNotRun;
    o.reason = SkipReason(result);
  }
  std::lock_guard<std::mutex> lock(mu_);
  outcomes_.push_back(std::move(o));
  running_ = false;
  std::snprintf(g_running, sizeof g_running, "(between tests)");
}

void Report::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!running_) {
      cv_.wait(lock);
      continue;
    }
    const auto deadline = started_ + timeout_;
    const std::string test = current_test_;
    // A timed wait is the point here: this thread only exists to notice a
    // test that never ends (a plugin call blocking forever).
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && running_ &&
        test == current_test_ && !stop_) {
      lock.unlock();
      OnHang();
      return;
    }
  }
}

void Report::OnHang() {
  Outcome o;
  std::string json, junit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    o.test = current_test_;
    o.plugin = current_plugin_;
    o.requirement = current_requirement_;
    o.result = Result::kFail;
    o.reason = "hang: the test did not finish within " +
               std::to_string(timeout_.count()) +
               " s (a plugin call blocked, or progress() never produced an "
               "awaited event); the run was stopped here";
    o.seconds = static_cast<double>(timeout_.count());
    outcomes_.push_back(o);
    json = json_path_;
    junit = junit_path_;
  }
  std::cerr << "\nferry-conformance: HANG in " << o.test << " (requirement "
            << o.requirement << ", plugin " << o.plugin << ")" << std::endl;
  PrintText(std::cout);
  std::string error;
  if (!json.empty()) WriteJson(json, &error);
  if (!junit.empty()) WriteJunit(junit, &error);
  std::cout.flush();
  _exit(1);
}

Counts Report::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counts c;
  for (const Outcome& o : outcomes_) {
    switch (o.result) {
      case Result::kPass:
        ++c.passed;
        break;
      case Result::kFail:
        ++c.failed;
        break;
      case Result::kNotRun:
        ++c.not_run;
        break;
    }
  }
  return c;
}

void Report::PrintText(std::ostream& os) const {
  std::vector<Outcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcomes = outcomes_;
  }
  os << "\n==== ferry conformance report (transport ABI " << FERRY_TRANSPORT_ABI_MAJOR
     << "." << FERRY_TRANSPORT_ABI_MINOR << (Options().strict ? ", strict" : "")
     << ") ====\n";
  for (const auto& [label, list] : ByPlugin(outcomes)) {
    const PluginCase* c = CaseByLabel(label);
    os << "\nplugin " << (c ? PluginLine(*c) : label) << "\n";
    if (list.empty()) os << "  (no test ran for this plugin)\n";
    for (const Outcome* o : list) {
      char head[64];
      std::snprintf(head, sizeof head, "  %-8s %-8s ", ResultWord(o->result),
                    o->requirement.c_str());
      os << head << Title(o->requirement);
      if (o->result == Result::kNotRun) {
        os << "\n                    not run: " << o->reason;
      } else if (o->result == Result::kFail) {
        std::istringstream lines(o->reason);
        std::string line;
        int shown = 0;
        while (std::getline(lines, line) && shown < 12) {
          os << "\n                    > " << line;
          ++shown;
        }
        if (std::getline(lines, line)) {
          os << "\n                    > [more in the JSON/JUnit report]";
        }
      }
      os << "\n";
    }
  }
  Counts n;
  for (const Outcome& o : outcomes) {
    (o.result == Result::kPass   ? n.passed
     : o.result == Result::kFail ? n.failed
                                 : n.not_run)++;
  }
  os << "\n"
     << n.passed << " passed, " << n.failed << " failed, " << n.not_run << " not run\n";
}

bool Report::WriteJson(const std::string& path, std::string* error) const {
  std::vector<Outcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcomes = outcomes_;
  }
  std::ofstream out(path);
  if (!out) {
    *error = "cannot write " + path;
    return false;
  }
  Counts n;
  for (const Outcome& o : outcomes) {
    (o.result == Result::kPass   ? n.passed
     : o.result == Result::kFail ? n.failed
                                 : n.not_run)++;
  }
  out << "{\n  \"format\": \"ferry-conformance-report/1\",\n"
      << "  \"abi\": \"" << FERRY_TRANSPORT_ABI_MAJOR << "." << FERRY_TRANSPORT_ABI_MINOR
      << "\",\n"
      << "  \"strict\": " << (Options().strict ? "true" : "false") << ",\n"
      << "  \"summary\": {\"passed\": " << n.passed << ", \"failed\": " << n.failed
      << ", \"not_run\": " << n.not_run << "},\n"
      << "  \"plugins\": [";
  bool first_plugin = true;
  for (const auto& [label, list] : ByPlugin(outcomes)) {
    const PluginCase* c = CaseByLabel(label);
    out << (first_plugin ? "\n" : ",\n") << "    {\"label\": \"" << JsonEscape(label)
        << "\", ";
    first_plugin = false;
    if (c != nullptr && c->plugin) {
      out << "\"name\": \"" << JsonEscape(c->plugin->name()) << "\", \"version\": \""
          << JsonEscape(c->plugin->version()) << "\", \"path\": \""
          << JsonEscape(c->plugin->path()) << "\", \"abi\": \"" << c->plugin->abi_major()
          << "." << c->plugin->abi_minor() << "\", \"loaded\": true, ";
    } else if (c != nullptr) {
      out << "\"requested\": \"" << JsonEscape(c->requested)
          << "\", \"loaded\": false, \"load_error\": \""
          << JsonEscape(c->load_status.ToString()) << "\", ";
    }
    out << "\"requirements\": {";
    bool first = true;
    for (const Outcome* o : list) {
      out << (first ? "\n" : ",\n") << "      \"" << JsonEscape(o->requirement)
          << "\": {\"result\": \""
          << (o->result == Result::kPass   ? "pass"
              : o->result == Result::kFail ? "fail"
                                           : "not-run")
          << "\", \"test\": \"" << JsonEscape(o->test) << "\", \"title\": \""
          << JsonEscape(Title(o->requirement)) << "\", \"seconds\": " << o->seconds
          << ", \"reason\": \"" << JsonEscape(o->reason) << "\"}";
      first = false;
    }
    out << (first ? "}}" : "\n    }}");
  }
  out << "\n  ]\n}\n";
  return static_cast<bool>(out);
}

bool Report::WriteJunit(const std::string& path, std::string* error) const {
  std::vector<Outcome> outcomes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcomes = outcomes_;
  }
  std::ofstream out(path);
  if (!out) {
    *error = "cannot write " + path;
    return false;
  }
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "
         "name=\"ferry-conformance\">\n";
  for (const auto& [label, list] : ByPlugin(outcomes)) {
    int failures = 0, skipped = 0;
    double seconds = 0;
    for (const Outcome* o : list) {
      failures += o->result == Result::kFail;
      skipped += o->result == Result::kNotRun;
      seconds += o->seconds;
    }
    out << "  <testsuite name=\"ferry-conformance." << XmlEscape(label) << "\" tests=\""
        << list.size() << "\" failures=\"" << failures << "\" skipped=\"" << skipped
        << "\" errors=\"0\" time=\"" << seconds << "\">\n";
    for (const Outcome* o : list) {
      out << "    <testcase classname=\"ferry.conformance." << XmlEscape(label)
          << "\" name=\"" << XmlEscape(o->requirement + " " + Title(o->requirement))
          << "\" time=\"" << o->seconds << "\">\n"
          << "      <properties><property name=\"requirement\" value=\""
          << XmlEscape(o->requirement) << "\"/><property name=\"test\" value=\""
          << XmlEscape(o->test) << "\"/></properties>\n";
      if (o->result == Result::kFail) {
        std::string first_line = o->reason.substr(0, o->reason.find('\n'));
        out << "      <failure message=\"" << XmlEscape(first_line) << "\">"
            << XmlEscape(o->reason) << "</failure>\n";
      } else if (o->result == Result::kNotRun) {
        out << "      <skipped message=\"" << XmlEscape(o->reason) << "\"/>\n";
      }
      out << "    </testcase>\n";
    }
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return static_cast<bool>(out);
}

}  // namespace ferry::conformance
