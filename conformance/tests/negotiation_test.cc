// LOAD-1 and NEG-*: loading through the production loader, and the plugin's
// entry function called directly with crafted offers (Plugin::entry()), the
// way hosts older and newer than the plugin will call it.
#include "harness/conformance_test.h"
#include "loader/host_services.h"

namespace ferry::conformance {
namespace {

class LoadTest : public ConformanceTest {};
class NegotiationTest : public ConformanceTest {};

struct Answer {
  ferry_status_t rc = FERRY_UNKNOWN;
  ferry_negotiate_args_t out{};
  std::string error;
};

// Calls the plugin's entry point with the offer [major, lo..hi].
Answer Negotiate(const Plugin& plugin, uint32_t major, uint32_t lo, uint32_t hi,
                 bool with_error_buffer = true) {
  char buf[512];
  std::memset(buf, 0, sizeof buf);
  ferry_error_buf_t err{};
  err.struct_size = FERRY_ERROR_BUF_STRUCT_SIZE;
  err.data = buf;
  err.capacity = sizeof buf;
  Answer a;
  a.out.struct_size = FERRY_NEGOTIATE_ARGS_STRUCT_SIZE;
  a.out.abi_major = major;
  a.out.abi_minor_min = lo;
  a.out.abi_minor_max = hi;
  a.out.host = HostServices();
  a.out.err = with_error_buffer ? &err : nullptr;
  a.rc = plugin.entry()(&a.out);
  a.out.err = nullptr;  // pointed at this frame
  a.error = buf;
  return a;
}

std::string Offer(uint32_t major, uint32_t lo, uint32_t hi) {
  return "offer " + std::to_string(major) + "." + std::to_string(lo) + "-" +
         std::to_string(major) + "." + std::to_string(hi);
}

// Expects agreement on `chosen` and a full, consistent answer.
void ExpectAgreement(const Plugin& plugin, uint32_t lo, uint32_t hi, uint32_t chosen) {
  Answer a = Negotiate(plugin, FERRY_TRANSPORT_ABI_MAJOR, lo, hi);
  const std::string offer = Offer(FERRY_TRANSPORT_ABI_MAJOR, lo, hi);
  ASSERT_EQ(a.rc, FERRY_OK) << offer << ": " << StatusText(a.rc) << " \"" << a.error
                            << "\"";
  EXPECT_EQ(a.out.chosen_minor, chosen)
      << offer << ": the plugin must choose the highest minor both support";
  EXPECT_EQ(a.out.plugin_abi_major, plugin.abi_major()) << offer;
  EXPECT_EQ(a.out.plugin_minor_min, plugin.plugin_minor_min()) << offer;
  EXPECT_EQ(a.out.plugin_minor_max, plugin.plugin_minor_max()) << offer;
  EXPECT_NE(a.out.vtable, nullptr) << offer << ": OK without a vtable";
  EXPECT_EQ(a.out.vtable, plugin.vtable())
      << offer << ": the vtable must be static (the same on every call)";
  ASSERT_NE(a.out.name, nullptr) << offer;
  EXPECT_EQ(std::string(a.out.name), plugin.name()) << offer;
}

void ExpectRefusal(const Plugin& plugin, uint32_t major, uint32_t lo, uint32_t hi) {
  const std::string offer = Offer(major, lo, hi);
  Answer a = Negotiate(plugin, major, lo, hi);
  EXPECT_EQ(a.rc, FERRY_INCOMPATIBLE)
      << offer << " does not overlap the plugin's " << plugin.abi_major() << "."
      << plugin.plugin_minor_min() << "-" << plugin.abi_major() << "."
      << plugin.plugin_minor_max() << ": expected FERRY_INCOMPATIBLE, got "
      << StatusText(a.rc);
  EXPECT_FALSE(a.error.empty())
      << offer
      << ": the refusal must explain itself in args->err (which "
         "versions, what to do)";
  // The host words its own error from these: they must be filled even on
  // refusal.
  EXPECT_EQ(a.out.plugin_abi_major, plugin.abi_major())
      << offer << ": plugin_abi_major must be filled on FERRY_INCOMPATIBLE";
  if (major == plugin.abi_major()) {
    EXPECT_EQ(a.out.plugin_minor_min, plugin.plugin_minor_min()) << offer;
    EXPECT_EQ(a.out.plugin_minor_max, plugin.plugin_minor_max()) << offer;
  }
  // Without an error buffer the plugin must still refuse, and not crash.
  Answer quiet = Negotiate(plugin, major, lo, hi, /*with_error_buffer=*/false);
  EXPECT_EQ(quiet.rc, FERRY_INCOMPATIBLE) << offer << " with err == NULL";
}

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

TEST_P(LoadTest, PluginLoads) {
  if (!plugin()) {
    GTEST_FAIL() << "the loader refused " << plugin_case().requested << ": "
                 << plugin_case().load_status.ToString();
  }
  const Plugin& p = *plugin();
  EXPECT_TRUE(ValidName(p.name()))
      << "plugin name '" << p.name() << "' must be lower case [a-z0-9_]";
  EXPECT_FALSE(p.version().empty()) << "the plugin must report a version string";
  EXPECT_EQ(p.abi_major(), static_cast<uint32_t>(FERRY_TRANSPORT_ABI_MAJOR));
  EXPECT_LE(p.plugin_minor_min(), p.plugin_minor_max());
  EXPECT_GE(p.abi_minor(), p.plugin_minor_min());
  EXPECT_LE(p.abi_minor(), p.plugin_minor_max());
  ASSERT_NE(p.vtable(), nullptr);
  struct Entry {
    const char* name;
    size_t offset;
  };
  const Entry required[] = {
      {"init", FERRY_VT(init)},
      {"fini", FERRY_VT(fini)},
      {"query", FERRY_VT(query)},
      {"progress", FERRY_VT(progress)},
      {"listen", FERRY_VT(listen)},
      {"listener_address", FERRY_VT(listener_address)},
      {"close_listener", FERRY_VT(close_listener)},
      {"connect", FERRY_VT(connect)},
      {"send", FERRY_VT(send)},
      {"place", FERRY_VT(place)},
      {"discard", FERRY_VT(discard)},
      {"close", FERRY_VT(close)},
  };
  for (const Entry& e : required) {
    EXPECT_TRUE(VtableHas(p.vtable(), e.offset, sizeof(void (*)())))
        << "required vtable entry '" << e.name << "' is missing";
  }
}

TEST_P(NegotiationTest, AgreesInsideRange) {
  const Plugin& p = *plugin();
  const uint32_t lo = p.plugin_minor_min(), hi = p.plugin_minor_max();
  ExpectAgreement(p, lo, hi, hi);
  // Every single-minor offer inside the range (a host pinned to one minor).
  for (uint32_t m = lo; m <= hi && m < lo + 64; ++m) {
    ExpectAgreement(p, m, m, m);
  }
  // A newer host offering a wider window.
  ExpectAgreement(p, 0, hi + 100, hi);
  // "May be called more than once": same answer, nothing to release.
  const auto fds_before = OpenFds();
  for (int i = 0; i < 200; ++i) {
    Answer a = Negotiate(p, FERRY_TRANSPORT_ABI_MAJOR, lo, hi);
    ASSERT_EQ(a.rc, FERRY_OK) << "call " << i;
    ASSERT_EQ(a.out.chosen_minor, hi) << "call " << i;
  }
  EXPECT_EQ(OpenFds(), fds_before)
      << "negotiation must not allocate anything that needs a release";
}

TEST_P(NegotiationTest, AgreesAtRangeEdges) {
  const Plugin& p = *plugin();
  const uint32_t lo = p.plugin_minor_min(), hi = p.plugin_minor_max();
  ExpectAgreement(p, hi, hi + 5, hi);  // overlaps only at the top
  ExpectAgreement(p, lo, lo, lo);      // only the bottom minor
  if (lo > 0) {
    ExpectAgreement(p, lo - 1, lo, lo);  // overlaps only at the bottom
    ExpectAgreement(p, 0, lo, lo);
  }
}

TEST_P(NegotiationTest, RefusesOutsideRange) {
  const Plugin& p = *plugin();
  const uint32_t lo = p.plugin_minor_min(), hi = p.plugin_minor_max();
  ExpectRefusal(p, FERRY_TRANSPORT_ABI_MAJOR, hi + 1, hi + 5);         // host too new
  if (lo > 0) ExpectRefusal(p, FERRY_TRANSPORT_ABI_MAJOR, 0, lo - 1);  // too old
  // And the host turns that into an actionable refusal naming the file.
  LoaderOptions options = LoaderOptions::FromEnvironment();
  options.abi_minor_min = hi + 1;
  options.abi_minor_max = hi + 5;
  PluginLoader narrow(options);
  auto refused = narrow.Load(p.path());
  ASSERT_FALSE(refused.ok()) << "a loader offering minors " << hi + 1 << "-" << hi + 5
                             << " loaded a plugin that supports only " << lo << "-" << hi;
  EXPECT_NE(refused.status().message().find(p.path()), std::string::npos)
      << "the refusal must name the file: " << refused.status().ToString();
}

TEST_P(NegotiationTest, RefusesWrongMajor) {
  const Plugin& p = *plugin();
  ExpectRefusal(p, FERRY_TRANSPORT_ABI_MAJOR + 1, 0, 1000);
  ExpectRefusal(p, 0xFFFFFFFFu, 0, 1000);
  if (FERRY_TRANSPORT_ABI_MAJOR > 0) {
    ExpectRefusal(p, FERRY_TRANSPORT_ABI_MAJOR - 1, 0, 1000);
  }
}

TEST_P(NegotiationTest, AcceptsLargerArgs) {
  // A newer host's negotiate struct: bigger, with fields this plugin does
  // not know (canaries). Accept it, answer the same, write nothing there.
  const Plugin& p = *plugin();
  Padded<ferry_negotiate_args_t> args(128);
  Padded<ferry_error_buf_t> err(64);
  char buf[256] = {0};
  err->data = buf;
  err->capacity = sizeof buf;
  args->abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  args->abi_minor_min = p.plugin_minor_min();
  args->abi_minor_max = p.plugin_minor_max() + 3;
  args->host = HostServices();
  args->err = err.get();
  ferry_status_t rc = p.entry()(args.get());
  ASSERT_EQ(StatusText(rc), StatusText(FERRY_OK))
      << "a larger negotiate struct (struct_size " << args.size()
      << ") was refused: " << StatusText(rc) << " \"" << buf << "\"";
  EXPECT_EQ(args->chosen_minor, p.plugin_minor_max());
  EXPECT_EQ(args->vtable, p.vtable());
  EXPECT_EQ(args.TailDamage(), -1)
      << "the plugin wrote beyond the negotiate struct it knows";
  EXPECT_EQ(err.TailDamage(), -1)
      << "the plugin wrote beyond the error buffer struct it knows";

  // A failing offer through a larger error-buffer struct still gets its
  // message.
  args->abi_minor_min = p.plugin_minor_max() + 1;
  args->abi_minor_max = p.plugin_minor_max() + 2;
  std::memset(buf, 0, sizeof buf);
  rc = p.entry()(args.get());
  EXPECT_EQ(StatusText(rc), StatusText(FERRY_INCOMPATIBLE));
  EXPECT_NE(buf[0], '\0') << "no message through a larger ferry_error_buf_t";
  EXPECT_EQ(args.TailDamage(), -1);
  EXPECT_EQ(err.TailDamage(), -1);
}

TEST_P(NegotiationTest, RespectsSmallerArgs) {
  // An older host whose struct ends before the answer fields: the plugin
  // cannot answer, so it must refuse, and must not write where the host has
  // no fields (the bytes after struct_size belong to something else).
  const Plugin& p = *plugin();
  std::vector<unsigned char> raw(sizeof(ferry_negotiate_args_t) + 64);
  auto* args = new (raw.data()) ferry_negotiate_args_t{};
  const size_t size = offsetof(ferry_negotiate_args_t, chosen_minor);
  args->struct_size = static_cast<uint32_t>(size);
  args->abi_major = FERRY_TRANSPORT_ABI_MAJOR;
  args->abi_minor_min = p.plugin_minor_min();
  args->abi_minor_max = p.plugin_minor_max();
  args->host = HostServices();
  args->err = nullptr;
  FillCanary(raw.data() + size, raw.size() - size);
  ferry_status_t rc = p.entry()(args);
  EXPECT_NE(StatusText(rc), StatusText(FERRY_OK))
      << "negotiation 'succeeded' with a struct of " << size
      << " bytes, which has no room for the answer";
  int64_t off = CanaryDamage(raw.data() + size, raw.size() - size);
  EXPECT_EQ(off, -1) << "the plugin wrote byte " << (off + static_cast<int64_t>(size))
                     << " of a negotiate struct whose struct_size is " << size;
}

INSTANTIATE_TEST_SUITE_P(Plugins, LoadTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);
INSTANTIATE_TEST_SUITE_P(Plugins, NegotiationTest, ::testing::ValuesIn(PluginParams()),
                         PluginParamName);

}  // namespace
}  // namespace ferry::conformance
