// ferry-conformance: runs the conformance suite against transport plugins
// loaded through the production loader, and reports per plugin and per
// requirement: PASS / FAIL / NOT RUN (reason). See docs/conformance.md.
//
//   ferry-conformance [--plugin NAME|PATH]... [--strict] [--json FILE]
//                     [--junit FILE] [--requirement ID]... [--test-timeout S]
//                     [--list-requirements] [gtest flags...]
//
// Exit status: 0 when nothing failed, 1 when a requirement failed (or, with
// --strict, did not run), 2 for a usage error or when no plugin was found.
#include "harness/conformance_test.h"
#include "harness/peer_process.h"
#include "harness/plugin_cases.h"
#include "harness/report.h"
#include "harness/requirements.h"
#include "loader/plugin_loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <vector>

namespace {

using ferry::conformance::PluginCase;
using ferry::conformance::PluginCases;
using ferry::conformance::PluginParam;
using ferry::conformance::PluginParams;

constexpr const char* kUsage =
    "usage: ferry-conformance [options] [gtest flags]\n"
    "\n"
    "Runs the ferry transport conformance suite against plugins loaded\n"
    "through the production loader.\n"
    "\n"
    "  --plugin NAME|PATH   test this plugin (repeatable). A NAME (\"tcp\") is\n"
    "                       searched like the core does (FERRY_PLUGIN_PATH,\n"
    "                       then the SDK's plugin directory); a PATH\n"
    "                       (\"./libferry-mine.so\") is loaded as is.\n"
    "                       Default: every plugin the loader finds.\n"
    "  --strict             a requirement that did not run (capability not\n"
    "                       claimed, transport unavailable here) is a failure\n"
    "  --json FILE          write a JSON report (per plugin, per requirement)\n"
    "  --junit FILE         write a JUnit XML report\n"
    "  --requirement ID     run only this requirement (repeatable), e.g. MSG-3\n"
    "  --test-timeout SEC   stop the run and report a hang when one test runs\n"
    "                       longer than this (default 120, or\n"
    "                       FERRY_CONFORMANCE_TEST_TIMEOUT; 0 = never)\n"
    "  --list-requirements  print the requirement table and exit\n"
    "  --help               this text\n"
    "\n"
    "gtest flags pass through: --gtest_filter matches test names, e.g.\n"
    "--gtest_filter='*MessagingTest.*' or '*OversizedMessageRefused*'.\n"
    "Exit status: 0 nothing failed, 1 something failed, 2 usage / no plugin.\n";

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

// A hang bound in whole seconds (0 = never), from `where` (the flag or the
// environment variable); anything else is a usage error, not a silent 0.
long TimeoutSeconds(const char* where, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0) {
    std::fprintf(stderr,
                 "ferry-conformance: %s takes whole seconds (0 = never), not '%s'\n",
                 where, text.c_str());
    std::exit(2);
  }
  return v;
}

// gtest parameter names allow [A-Za-z0-9_] only.
std::string Sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "plugin" : out;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string LabelFor(const std::string& name, const std::string& requested) {
  if (!name.empty()) return Sanitize(name);
  std::string from_file = ferry::PluginLoader::NameFromFileName(Basename(requested));
  return Sanitize(from_file.empty() ? Basename(requested) : from_file);
}

void AddCase(PluginCase c, std::set<std::string>* labels) {
  std::string label = c.label;
  for (int i = 2; labels->count(label) > 0; ++i) {
    label = c.label + "_" + std::to_string(i);
  }
  labels->insert(label);
  c.label = label;
  PluginCases().push_back(std::move(c));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--peer") == 0) {
    return ferry::conformance::RunPeer(argc, argv);
  }

  std::vector<std::string> plugins, requirement_ids;
  std::string json_path, junit_path;
  bool user_filter = false;
  // Sanitizer builds run some plugins' set-up many times slower (TSan:
  // libfabric's init/fini a hundred times takes over a minute): their
  // script raises the bound through the environment, not each test's line.
  long test_timeout = 120;
  if (const char* env = std::getenv("FERRY_CONFORMANCE_TEST_TIMEOUT"); env && *env) {
    test_timeout = TimeoutSeconds("FERRY_CONFORMANCE_TEST_TIMEOUT", env);
  }
  std::vector<char*> gtest_args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const std::string& flag, std::string* out) {
      if (arg == flag) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "ferry-conformance: %s needs a value\n%s", flag.c_str(),
                       kUsage);
          std::exit(2);
        }
        *out = argv[++i];
        return true;
      }
      if (arg.rfind(flag + "=", 0) == 0) {
        *out = arg.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--list-requirements") {
      for (const auto& r : ferry::conformance::Requirements()) {
        std::printf("%-8s %s%s%s%s\n", r.id, r.title, r.gate[0] ? "  (needs " : "",
                    r.gate, r.gate[0] ? ")" : "");
      }
      return 0;
    } else if (arg == "--strict") {
      ferry::conformance::Options().strict = true;
    } else if (value("--plugin", &v)) {
      plugins.push_back(v);
    } else if (value("--json", &v)) {
      json_path = v;
    } else if (value("--junit", &v)) {
      junit_path = v;
    } else if (value("--requirement", &v)) {
      requirement_ids.push_back(v);
    } else if (value("--test-timeout", &v)) {
      test_timeout = TimeoutSeconds("--test-timeout", v);
    } else if (arg.rfind("--gtest", 0) == 0 || arg.rfind("-gtest", 0) == 0) {
      user_filter |= arg.rfind("--gtest_filter", 0) == 0;
      gtest_args.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "ferry-conformance: unknown argument '%s'\n%s", arg.c_str(),
                   kUsage);
      return 2;
    }
  }
  ferry::conformance::Options().self_exe = SelfExe();

  // --requirement IDs become a gtest filter on the tests that carry them.
  std::string requirement_filter;
  if (!requirement_ids.empty()) {
    if (user_filter) {
      std::fprintf(stderr,
                   "ferry-conformance: use --requirement or --gtest_filter, not both\n");
      return 2;
    }
    requirement_filter = "--gtest_filter=";
    for (const std::string& id : requirement_ids) {
      const auto* r = ferry::conformance::FindRequirementById(id);
      if (r == nullptr) {
        std::fprintf(
            stderr,
            "ferry-conformance: unknown requirement '%s' (see --list-requirements)\n",
            id.c_str());
        return 2;
      }
      if (requirement_filter.back() != '=') requirement_filter += ':';
      requirement_filter += std::string("*/") + r->suite + "." + r->test + "/*";
    }
    gtest_args.push_back(requirement_filter.data());
  }

  // Load through the production loader, exactly as the core does. Refusals
  // become cases too: they are reported as a LOAD-1 failure.
  ferry::PluginLoader loader;
  std::set<std::string> labels;
  if (!plugins.empty()) {
    for (const std::string& p : plugins) {
      auto loaded = loader.Load(p);
      PluginCase c;
      c.requested = p;
      if (loaded.ok()) {
        c.plugin = loaded.value();
        c.label = LabelFor(c.plugin->name(), p);
      } else {
        c.load_status = loaded.status();
        c.label = LabelFor("", p);
      }
      AddCase(std::move(c), &labels);
    }
  } else {
    std::set<std::string> loaded_names;
    for (const auto& plugin : loader.LoadAll()) {
      PluginCase c;
      c.requested = plugin->path();
      c.plugin = plugin;
      c.label = LabelFor(plugin->name(), plugin->path());
      loaded_names.insert(plugin->name());
      AddCase(std::move(c), &labels);
    }
    for (const ferry::LoadRecord& r : loader.records()) {
      // A refused file is reported, unless a file of the same name loaded
      // (the first of each name on the search path wins, like PATH).
      if (r.loaded || (!r.name.empty() && loaded_names.count(r.name) > 0)) {
        continue;
      }
      PluginCase c;
      c.requested = r.path;
      c.load_status = ferry::Status(FERRY_FAILED_PRECONDITION, r.reason);
      c.label = LabelFor(r.name, r.path);
      AddCase(std::move(c), &labels);
    }
    if (PluginCases().empty()) {
      std::fprintf(stderr, "ferry-conformance: no transport plugin found. Searched:\n");
      for (const std::string& dir : loader.options().search_path) {
        std::fprintf(stderr, "  %s\n", dir.c_str());
      }
      std::fprintf(stderr,
                   "Name one with --plugin ./libferry-<name>.so, or set "
                   "FERRY_PLUGIN_PATH.\n");
      return 2;
    }
  }
  for (size_t i = 0; i < PluginCases().size(); ++i) {
    PluginParams().push_back(PluginParam{i});
  }

  int gtest_argc = static_cast<int>(gtest_args.size());
  gtest_args.push_back(nullptr);
  ::testing::InitGoogleTest(&gtest_argc, gtest_args.data());

  ferry::conformance::InstallSigpipeWatch();
  ferry::conformance::InstallFatalSignalNote();
  auto* report = new ferry::conformance::Report(std::chrono::seconds(test_timeout));
  report->SetOutputs(json_path, junit_path);
  // gtest owns appended listeners; keep our pointer for the reports.
  ::testing::UnitTest::GetInstance()->listeners().Append(report);

  int rc = RUN_ALL_TESTS();

  report->PrintText(std::cout);
  std::cout.flush();
  std::string error;
  if (!json_path.empty() && !report->WriteJson(json_path, &error)) {
    std::fprintf(stderr, "ferry-conformance: %s\n", error.c_str());
    rc = 1;
  }
  if (!junit_path.empty() && !report->WriteJunit(junit_path, &error)) {
    std::fprintf(stderr, "ferry-conformance: %s\n", error.c_str());
    rc = 1;
  }
  return (rc != 0 || report->counts().failed > 0) ? 1 : 0;
}
