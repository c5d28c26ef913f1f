// The plugin inventory of ferry.h: what it finds, the struct_size rule on
// its answers, and how it reports a name or a file that does not load.
#include <ferry/ferry.h>
#include <ferry/transport.h>  // the FERRY_CAP_* / FERRY_MEM_* bits

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

using Inventory = std::unique_ptr<ferry_inventory_t, void (*)(ferry_inventory_t*)>;

// An inventory over the build's plugin directory only, keeping `filter`.
Inventory Open(const std::string& path, const char* filter) {
  setenv("FERRY_PLUGIN_PATH", path.c_str(), 1);
  if (filter != nullptr) {
    setenv("FERRY_TRANSPORTS", filter, 1);
  } else {
    unsetenv("FERRY_TRANSPORTS");
  }
  ferry_inventory_t* raw = nullptr;
  EXPECT_EQ(ferry_inventory_create(&raw), FERRY_OK) << ferry_last_error();
  return Inventory(raw, ferry_inventory_release);
}

std::vector<std::string> Strings(const char* const* items, uint32_t n) {
  return std::vector<std::string>(items, items + n);
}

TEST(Inventory, LoadAllSaysWhatTcpOffers) {
  Inventory inv = Open(FERRY_TEST_PLUGIN_DIR, "tcp");
  ASSERT_EQ(ferry_inventory_load_all(inv.get()), FERRY_OK) << ferry_last_error();
  ASSERT_EQ(ferry_inventory_num_plugins(inv.get()), 1u);

  ferry_plugin_info_t p{};
  p.struct_size = FERRY_PLUGIN_INFO_STRUCT_SIZE;
  ASSERT_EQ(ferry_inventory_plugin(inv.get(), 0, &p), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(p.struct_size, FERRY_PLUGIN_INFO_STRUCT_SIZE);
  EXPECT_STREQ(p.name, "tcp");
  EXPECT_EQ(std::string(p.path), std::string(FERRY_TEST_PLUGIN_DIR) + "/libferry-tcp.so");
  EXPECT_EQ(p.abi_major, uint32_t{FERRY_TRANSPORT_ABI_MAJOR});
  ASSERT_EQ(p.usable, 1) << p.unusable_reason;
  EXPECT_STREQ(p.unusable_reason, "");
  EXPECT_NE(p.caps & FERRY_CAP_ORDERED, 0u);
  EXPECT_NE(p.memory_kinds & FERRY_MEM_HOST, 0u);
  std::vector<std::string> caps = Strings(p.capability_names, p.num_capability_names);
  EXPECT_NE(std::find(caps.begin(), caps.end(), "ordered"), caps.end());
  EXPECT_EQ(Strings(p.memory_kind_names, p.num_memory_kind_names),
            std::vector<std::string>{"host"});
  EXPECT_GT(p.max_message_size, 0u);
  EXPECT_GT(p.max_segments, 0u);
  EXPECT_STREQ(p.domain, "");  // tcp reaches every host
  EXPECT_STRNE(p.description, "");

  ferry_inventory_search_t s{};
  s.struct_size = FERRY_INVENTORY_SEARCH_STRUCT_SIZE;
  ASSERT_EQ(ferry_inventory_get_search(inv.get(), &s), FERRY_OK);
  ASSERT_GE(s.num_dirs, 1u);
  EXPECT_STREQ(s.dirs[0], FERRY_TEST_PLUGIN_DIR);
  EXPECT_STREQ(s.filter, "tcp");
  EXPECT_EQ(s.abi_major, uint32_t{FERRY_TRANSPORT_ABI_MAJOR});
  EXPECT_LE(s.abi_minor_min, s.abi_minor_max);
  EXPECT_EQ(ferry_inventory_num_failures(inv.get()), 0u);
}

TEST(Inventory, AnOlderCallerGetsOnlyTheFieldsItKnows) {
  Inventory inv = Open(FERRY_TEST_PLUGIN_DIR, nullptr);
  ASSERT_EQ(ferry_inventory_load(inv.get(), "tcp", nullptr), FERRY_OK)
      << ferry_last_error();
  ferry_plugin_info_t p;
  std::memset(&p, 0xab, sizeof p);
  const uint32_t older = FERRY_STRUCT_SIZE(ferry_plugin_info_t, path);
  p.struct_size = older;
  ASSERT_EQ(ferry_inventory_plugin(inv.get(), 0, &p), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(p.struct_size, older);
  EXPECT_STREQ(p.name, "tcp");
  uint32_t untouched;
  std::memset(&untouched, 0xab, sizeof untouched);
  EXPECT_EQ(p.abi_major, untouched);  // outside the caller's struct

  p.struct_size = 4;  // too small for anything
  EXPECT_EQ(ferry_inventory_plugin(inv.get(), 0, &p), FERRY_INVALID_ARGUMENT);
  p.struct_size = FERRY_PLUGIN_INFO_STRUCT_SIZE;
  EXPECT_EQ(ferry_inventory_plugin(inv.get(), 1, &p), FERRY_OUT_OF_RANGE);
  EXPECT_NE(std::string(ferry_last_error()).find("index 1"), std::string::npos);
}

TEST(Inventory, AFileLoadedAgainKeepsItsPlace) {
  Inventory inv = Open(FERRY_TEST_PLUGIN_DIR, nullptr);
  uint32_t first = 7, again = 7;
  ASSERT_EQ(ferry_inventory_load(inv.get(), "tcp", &first), FERRY_OK)
      << ferry_last_error();
  const std::string path = std::string(FERRY_TEST_PLUGIN_DIR) + "/libferry-tcp.so";
  ASSERT_EQ(ferry_inventory_load(inv.get(), path.c_str(), &again), FERRY_OK);
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(again, 0u);
  EXPECT_EQ(ferry_inventory_num_plugins(inv.get()), 1u);
}

TEST(Inventory, AnUnknownNameSaysWhatToDo) {
  Inventory inv = Open(FERRY_TEST_PLUGIN_DIR, nullptr);
  EXPECT_EQ(ferry_inventory_load(inv.get(), "tpc", nullptr), FERRY_NOT_FOUND);
  EXPECT_NE(std::string(ferry_last_error()).find("Did you mean 'tcp'"), std::string::npos)
      << ferry_last_error();
  EXPECT_EQ(ferry_inventory_num_plugins(inv.get()), 0u);
  EXPECT_STREQ(ferry_status_name(FERRY_NOT_FOUND), "NOT_FOUND");
  EXPECT_STREQ(ferry_status_name(FERRY_PEER_GONE), "PEER_GONE");
  EXPECT_STREQ(ferry_status_name(12345), "UNKNOWN_STATUS");
}

TEST(Inventory, PluginsTheFilterLeavesOutAreListedNotFailed) {
  Inventory inv = Open(FERRY_TEST_PLUGIN_DIR, "tcp");
  ASSERT_EQ(ferry_inventory_load_all(inv.get()), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(ferry_inventory_num_failures(inv.get()), 0u);
  std::vector<std::string> names;
  for (uint32_t i = 0, n = ferry_inventory_num_filtered(inv.get()); i < n; ++i) {
    ferry_load_failure_t f{};
    f.struct_size = FERRY_LOAD_FAILURE_STRUCT_SIZE;
    ASSERT_EQ(ferry_inventory_filtered(inv.get(), i, &f), FERRY_OK) << ferry_last_error();
    names.emplace_back(f.name);
    EXPECT_NE(std::string(f.reason).find("FERRY_TRANSPORTS=tcp"), std::string::npos)
        << f.reason;
    EXPECT_NE(std::string(f.path).find("libferry-" + names.back() + ".so"),
              std::string::npos);
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "shm"), names.end())
      << "shm is built beside tcp and the filter keeps only tcp";
  EXPECT_EQ(std::find(names.begin(), names.end(), "tcp"), names.end());
  ferry_load_failure_t f{};
  f.struct_size = FERRY_LOAD_FAILURE_STRUCT_SIZE;
  EXPECT_EQ(ferry_inventory_filtered(inv.get(), 1000, &f), FERRY_OUT_OF_RANGE);
}

TEST(Inventory, AFileThatIsNoPluginIsAFailedLoad) {
  char dir[] = "/tmp/ferry-inventory-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string bogus = std::string(dir) + "/libferry-bogus.so";
  std::ofstream(bogus) << "not a shared library\n";
  Inventory inv = Open(std::string(dir) + ":" + FERRY_TEST_PLUGIN_DIR, "bogus,tcp");
  ASSERT_EQ(ferry_inventory_load_all(inv.get()), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(ferry_inventory_num_plugins(inv.get()), 1u);  // tcp
  ASSERT_EQ(ferry_inventory_num_failures(inv.get()), 1u);
  ferry_load_failure_t f{};
  f.struct_size = FERRY_LOAD_FAILURE_STRUCT_SIZE;
  ASSERT_EQ(ferry_inventory_failure(inv.get(), 0, &f), FERRY_OK) << ferry_last_error();
  EXPECT_EQ(std::string(f.path), bogus);
  EXPECT_STRNE(f.reason, "");
  EXPECT_EQ(ferry_inventory_failure(inv.get(), 1, &f), FERRY_OUT_OF_RANGE);
  unlink(bogus.c_str());
  rmdir(dir);
}

}  // namespace
