// The loader against the deliberately broken fixtures (conformance/fixtures):
// each is refused with a message that names the file, says what is wrong and
// what to do, and nothing crashes. Then the runner itself is given broken
// plugins: it must report a failure (exit 1 with a report), never crash.
#include "loader/plugin_loader.h"
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ferry {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(FERRY_FIXTURE_DIR) + "/libferry-" + name + ".so";
}

PluginLoader FixtureLoader() {
  LoaderOptions options;  // no environment: only what the test names
  options.search_path = {FERRY_FIXTURE_DIR};
  return PluginLoader(options);
}

// True when `text` contains `word` as a whole word, ignoring case. (No
// std::regex: GCC 12 warns inside it under -fsanitize=address, and the
// sanitizer builds use -Werror.)
bool HasWord(const std::string& text, const std::string& word) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  auto boundary = [](const std::string& s, size_t i) {
    return i >= s.size() ||
           !(std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_');
  };
  const std::string t = lower(text), w = lower(word);
  for (size_t at = t.find(w); at != std::string::npos; at = t.find(w, at + 1)) {
    if ((at == 0 || boundary(t, at - 1)) && boundary(t, at + w.size())) return true;
  }
  return false;
}

// Every word of `all` appears (what is wrong), or any word of `any` (what to
// do).
::testing::AssertionResult MentionsAll(const std::string& text,
                                       const std::vector<std::string>& all,
                                       const std::string& what) {
  for (const std::string& w : all) {
    if (!HasWord(text, w)) {
      return ::testing::AssertionFailure()
             << "the message does not say " << what << " ('" << w << "'):\n  " << text;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult MentionsAny(const std::string& text,
                                       const std::vector<std::string>& any,
                                       const std::string& what) {
  for (const std::string& w : any) {
    if (HasWord(text, w)) return ::testing::AssertionSuccess();
  }
  std::string list;
  for (const std::string& w : any) list += (list.empty() ? "" : "|") + w;
  return ::testing::AssertionFailure() << "the message does not say " << what
                                       << " (any of " << list << "):\n  " << text;
}

::testing::AssertionResult Mentions(const std::string& text, const std::string& words,
                                    const std::string& what) {
  return MentionsAll(text, {words}, what);
}

struct Refusal {
  const char* fixture;
  ferry_status_t code;             // FERRY_OK: any failing code
  std::vector<std::string> wrong;  // all of these words: what is wrong
  std::vector<std::string> to_do;  // any of these words: what to do
};

void PrintTo(const Refusal& r, std::ostream* os) {
  *os << r.fixture;
}

class RefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusalTest, RefusedWithAClearMessage) {
  const Refusal& r = GetParam();
  PluginLoader loader = FixtureLoader();
  const std::string path = Fixture(r.fixture);
  auto loaded = loader.Load(path);
  ASSERT_FALSE(loaded.ok()) << path << " was loaded";
  const Status& s = loaded.status();
  if (r.code != FERRY_OK) {
    EXPECT_EQ(s.code(), r.code) << s.ToString();
  }
  EXPECT_NE(s.message().find(path), std::string::npos)
      << "the message does not name the file:\n  " << s.message();
  // The rest is judged without the path (it contains words like "fixtures").
  std::string rest = s.message();
  for (size_t at; (at = rest.find(path)) != std::string::npos;)
    rest.erase(at, path.size());
  EXPECT_TRUE(MentionsAll(rest, r.wrong, "what is wrong"));
  EXPECT_TRUE(MentionsAny(rest, r.to_do, "what to do"));
  // Kept for `ferry info`.
  ASSERT_FALSE(loader.records().empty());
  const LoadRecord& record = loader.records().back();
  EXPECT_EQ(record.path, path);
  EXPECT_FALSE(record.loaded);
  EXPECT_FALSE(record.reason.empty());
  // Asking again refuses again, the same way (no half-loaded state).
  auto again = loader.Load(path);
  EXPECT_FALSE(again.ok());
}

const std::vector<std::string> kActions = {"rebuild", "fix",    "use",     "implement",
                                           "set",     "check",  "install", "export",
                                           "define",  "update", "upgrade", "return"};

INSTANTIATE_TEST_SUITE_P(
    Fixtures, RefusalTest,
    ::testing::Values(
        Refusal{"fx_wrong_major", FERRY_INCOMPATIBLE, {"major"}, {"rebuild"}},
        // Its range starts at FERRY_TRANSPORT_ABI_MINOR + 10: 0.12 for ABI 0.2.
        Refusal{"fx_no_overlap",
                FERRY_INCOMPATIBLE,
                {"0." + std::to_string(FERRY_TRANSPORT_ABI_MINOR + 10)},
                {"rebuild", "upgrade", "update"}},
        Refusal{"fx_bad_minor", FERRY_OK, {"minor"}, kActions},
        Refusal{"fx_null_vtable", FERRY_OK, {"vtable"}, kActions},
        Refusal{"fx_null_required", FERRY_OK, {"progress"}, kActions},
        Refusal{"fx_short_vtable", FERRY_OK, {"listen", "struct_size"}, kActions},
        Refusal{"fx_no_entry",
                FERRY_OK,
                {"ferry_transport_negotiate"},
                {"FERRY_TRANSPORT_EXPORT", "ferry_add_transport_plugin", "export"}},
        Refusal{"fx_garbage", FERRY_OK, {"dynamic loader"}, kActions},
        Refusal{"fx_bad_name", FERRY_INVALID_ARGUMENT, {"name", "Bad Name/1"}, {"fix"}}),
    [](const ::testing::TestParamInfo<Refusal>& p) {
      return std::string(p.param.fixture);
    });

TEST(LoaderRefusal, MissingFileAndUnknownName) {
  PluginLoader loader = FixtureLoader();
  auto missing = loader.Load(std::string(FERRY_FIXTURE_DIR) + "/libferry-nope.so");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), FERRY_NOT_FOUND);
  EXPECT_TRUE(Mentions(missing.status().message(), "libferry-nope.so", "which file"));
  auto unknown = loader.Load("fx_init_fail");  // one letter off
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), FERRY_NOT_FOUND);
  EXPECT_TRUE(Mentions(unknown.status().message(), "tried", "what was tried"));
  EXPECT_TRUE(
      Mentions(unknown.status().message(), "fx_init_fails", "the closest plugin"));
}

TEST(LoaderRefusal, FailingInitIsReportedWithThePluginsReason) {
  PluginLoader loader = FixtureLoader();
  auto plugin = loader.Load(Fixture("fx_init_fails"));
  ASSERT_TRUE(plugin.ok()) << plugin.status().ToString();
  auto t = Transport::Open(plugin.value());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), FERRY_UNAVAILABLE);
  EXPECT_TRUE(
      Mentions(t.status().message(), "no fixture device", "the plugin's own reason"));
  EXPECT_TRUE(Mentions(t.status().message(), "fx_init_fails", "which transport"));
}

TEST(LoaderRefusal, ExceptionFromInitBecomesInternal) {
  PluginLoader loader = FixtureLoader();
  auto plugin = loader.Load(Fixture("fx_init_throws"));
  ASSERT_TRUE(plugin.ok()) << plugin.status().ToString();
  for (int i = 0; i < 3; ++i) {  // and again: the host is still fine
    auto t = Transport::Open(plugin.value());
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), FERRY_INTERNAL);
    EXPECT_TRUE(
        Mentions(t.status().message(), "deliberate exception", "the exception's text"));
    EXPECT_TRUE(Mentions(t.status().message(), "exception", "that it was an exception"));
    EXPECT_TRUE(Mentions(t.status().message(), "fx_init_throws", "which transport"));
  }
}

TEST(LoaderRefusal, MissingOptionalEntriesAreUnsupported) {
  PluginLoader loader = FixtureLoader();
  auto plugin = loader.Load(Fixture("fx_optional_missing"));
  ASSERT_TRUE(plugin.ok()) << "optional entries are optional: "
                           << plugin.status().ToString();
  auto opened = Transport::Open(plugin.value());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Transport& t = *opened.value();
  EXPECT_TRUE(t.Has(FERRY_VT(send)));
  EXPECT_FALSE(t.Has(FERRY_VT(set_conn_user_data)));  // NULL
  EXPECT_FALSE(t.Has(FERRY_VT(reg)));                 // beyond struct_size
  EXPECT_FALSE(t.Has(FERRY_VT(dereg)));
  EXPECT_FALSE(t.Has(FERRY_VT(conn_peer_address)));
  ferry_reg_args_t args{};
  args.struct_size = FERRY_REG_ARGS_STRUCT_SIZE;
  ferry_mr_t* mr = nullptr;
  Status reg = t.Reg(args, &mr);
  EXPECT_EQ(reg.code(), FERRY_UNIMPLEMENTED);
  EXPECT_FALSE(reg.message().empty());
  auto peer = t.PeerAddress(nullptr);
  EXPECT_EQ(peer.status().code(), FERRY_UNIMPLEMENTED);
  EXPECT_FALSE(peer.status().message().empty());
  t.SetConnUserData(nullptr, nullptr);  // a no-op, not a call through NULL
  t.Dereg(nullptr);
}

TEST(LoaderRefusal, LoadAllKeepsGoodOnesAndRecordsTheRest) {
  PluginLoader loader = FixtureLoader();
  std::set<std::string> names;
  for (const auto& p : loader.LoadAll()) names.insert(p->name());
  EXPECT_EQ(names, (std::set<std::string>{"fx_device_no_services", "fx_init_fails",
                                          "fx_init_throws", "fx_optional_missing",
                                          "fx_renamed"}));
  int refused = 0;
  for (const LoadRecord& r : loader.records()) {
    if (!r.loaded) {
      ++refused;
      EXPECT_FALSE(r.reason.empty()) << r.path;
    }
  }
  EXPECT_EQ(refused, 9) << "wrong_major, no_overlap, bad_minor, null_vtable, "
                           "null_required, short_vtable, no_entry, garbage, bad_name, "
                           "and nothing else";
}

// ---- the runner given broken plugins ----

struct RunResult {
  int wait_status = 0;
  std::string output;
};

RunResult RunProgram(const char* exe, const std::string& args) {
  std::string cmd = std::string(exe) + " " + args + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  r.wait_status = pclose(p);
  return r;
}

RunResult RunConformance(const std::string& args) {
  return RunProgram(FERRY_CONFORMANCE_EXE, args);
}

std::string Tail(const std::string& s) {
  return s.size() > 3000 ? "[...]" + s.substr(s.size() - 3000) : s;
}

TEST(RunnerOnBrokenPlugins, RefusedPluginIsAFailureNotACrash) {
  const std::string json = ::testing::TempDir() + "/ferry-refusal-report.json";
  RunResult r =
      RunConformance("--plugin " + Fixture("fx_null_required") + " --json " + json);
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "the runner died:\n" << Tail(r.output);
  EXPECT_EQ(WEXITSTATUS(r.wait_status), 1) << Tail(r.output);
  EXPECT_NE(r.output.find("FAIL     LOAD-1"), std::string::npos) << Tail(r.output);
  EXPECT_TRUE(Mentions(r.output, "progress", "why it did not load"));
  EXPECT_NE(r.output.find("\n0 passed, 1 failed, "), std::string::npos) << Tail(r.output);
  std::ifstream in(json);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"LOAD-1\": {\"result\": \"fail\""), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("\"loaded\": false"), std::string::npos) << text.str();
}

TEST(RunnerOnBrokenPlugins, ThrowingInitFailsEveryContextTestAndNothingCrashes) {
  RunResult r = RunConformance("--plugin " + Fixture("fx_init_throws") +
                               " --gtest_filter=*LoadTest*:*NegotiationTest*:*"
                               "LifecycleTest.Init*:*AbiTest.Query*");
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "the runner died:\n" << Tail(r.output);
  EXPECT_EQ(WEXITSTATUS(r.wait_status), 1) << Tail(r.output);
  EXPECT_NE(r.output.find("PASS     LOAD-1"), std::string::npos) << Tail(r.output);
  EXPECT_NE(r.output.find("FAIL     LIFE-1"), std::string::npos) << Tail(r.output);
  EXPECT_TRUE(Mentions(r.output, "deliberate exception", "the plugin's exception"));
}

TEST(RunnerOnBrokenPlugins, UnavailableIsNotRunAndStrictMakesItFail) {
  const std::string filter =
      " --gtest_filter=*LoadTest*:*LifecycleTest.Init*:*MessagingTest.Sizes*";
  RunResult lenient = RunConformance("--plugin " + Fixture("fx_init_fails") + filter);
  ASSERT_TRUE(WIFEXITED(lenient.wait_status)) << Tail(lenient.output);
  EXPECT_EQ(WEXITSTATUS(lenient.wait_status), 0) << Tail(lenient.output);
  EXPECT_NE(lenient.output.find("NOT RUN  LIFE-1"), std::string::npos)
      << Tail(lenient.output);
  EXPECT_TRUE(Mentions(lenient.output, "no fixture device", "why it did not run"));
  EXPECT_NE(lenient.output.find("\n1 passed, 0 failed, 2 not run\n"), std::string::npos)
      << Tail(lenient.output);

  RunResult strict =
      RunConformance("--strict --plugin " + Fixture("fx_init_fails") + filter);
  ASSERT_TRUE(WIFEXITED(strict.wait_status)) << Tail(strict.output);
  EXPECT_EQ(WEXITSTATUS(strict.wait_status), 1) << Tail(strict.output);
  EXPECT_NE(strict.output.find("\n1 passed, 2 failed, 0 not run\n"), std::string::npos)
      << Tail(strict.output);
}

TEST(RunnerOnBrokenPlugins, DeviceClaimWithoutMemoryServices) {
  // The DEV-* gates in order: the fixture claims FERRY_MEM_CUDA, so DEV-1
  // is never "host memory only". Without a GPU (or without the CUDA
  // toolkit at build time) it is not run and says which; with one, it
  // fails naming the entries a device plugin must offer.
  RunResult r = RunConformance("--plugin " + Fixture("fx_device_no_services") +
                               " --requirement DEV-1");
  ASSERT_TRUE(WIFEXITED(r.wait_status)) << "the runner died:\n" << Tail(r.output);
  EXPECT_EQ(r.output.find("host memory only"), std::string::npos) << Tail(r.output);
  if (r.output.find("NOT RUN  DEV-1") != std::string::npos) {
    EXPECT_EQ(WEXITSTATUS(r.wait_status), 0) << Tail(r.output);
    EXPECT_TRUE(r.output.find("not run: no GPU: ") != std::string::npos ||
                r.output.find("not run: built without the CUDA toolkit") !=
                    std::string::npos)
        << Tail(r.output);
  } else {
    EXPECT_EQ(WEXITSTATUS(r.wait_status), 1) << Tail(r.output);
    EXPECT_NE(r.output.find("FAIL     DEV-1"), std::string::npos) << Tail(r.output);
    EXPECT_TRUE(Mentions(r.output, "lacks mem_alloc, mem_free, mem_copy",
                         "the missing memory services"));
  }
}

TEST(LoaderRefusal, AFileNamedForAnotherNameLoadsWithAWarning) {
  PluginLoader loader = FixtureLoader();
  auto plugin = loader.Load(Fixture("fx_other_name"));
  ASSERT_TRUE(plugin.ok()) << plugin.status().ToString();
  EXPECT_EQ(plugin.value()->name(), "fx_renamed");
  const std::string& warning = plugin.value()->warning();
  EXPECT_TRUE(Mentions(warning, "fx_other_name", "the file's name"));
  EXPECT_TRUE(Mentions(warning, "fx_renamed", "the declared name"));
  EXPECT_TRUE(Mentions(warning, "rename", "what to do"));
  EXPECT_EQ(loader.records().back().warning, warning);
}

TEST(LoaderRefusal, TheDynamicLoadersReasonWithoutLibraryInternals) {
  PluginLoader loader = FixtureLoader();
  auto garbage = loader.Load(Fixture("fx_garbage"));
  ASSERT_FALSE(garbage.ok());
  const std::string& m = garbage.status().message();
  // glibc's words for a file that is no ELF object ("file too short",
  // "invalid ELF header"), after the loader's own prefix.
  EXPECT_TRUE(
      m.find("the dynamic loader refused it: file too short") != std::string::npos ||
      m.find("the dynamic loader refused it: invalid ELF header") != std::string::npos)
      << m;
  EXPECT_EQ(m.find("boost"), std::string::npos) << m;
  EXPECT_EQ(m.find("Bad file descriptor"), std::string::npos) << m;
}

TEST(FerryInfo, ExitsNonZeroForANamedPluginThatCannotRun) {
  RunResult usable_no = RunProgram(FERRY_INFO_EXE, Fixture("fx_init_fails"));
  ASSERT_TRUE(WIFEXITED(usable_no.wait_status)) << Tail(usable_no.output);
  EXPECT_EQ(WEXITSTATUS(usable_no.wait_status), 1) << Tail(usable_no.output);
  EXPECT_TRUE(Mentions(usable_no.output, "no fixture device", "the plugin's reason"));
  RunResult refused = RunProgram(FERRY_INFO_EXE, Fixture("fx_bad_name"));
  ASSERT_TRUE(WIFEXITED(refused.wait_status)) << Tail(refused.output);
  EXPECT_EQ(WEXITSTATUS(refused.wait_status), 1) << Tail(refused.output);
  RunResult fine = RunProgram(FERRY_INFO_EXE, Fixture("fx_other_name"));
  ASSERT_TRUE(WIFEXITED(fine.wait_status)) << Tail(fine.output);
  EXPECT_EQ(WEXITSTATUS(fine.wait_status), 0) << Tail(fine.output);
  EXPECT_TRUE(Mentions(fine.output, "warning", "the loader's warning"));
}

}  // namespace
}  // namespace ferry
