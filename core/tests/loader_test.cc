// The loader as a user meets it: names, paths, search order, filters, the
// text of its errors, and the host services it hands plugins.
#include "common/log.h"
#include "loader/host_services.h"
#include "loader/plugin_loader.h"
#include "transport/transport.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ferry {
namespace {

namespace fs = std::filesystem;

const std::string kFixtureDir = FERRY_TEST_PLUGIN_DIR;  // holds libferry-testnull.so

LoaderOptions OptionsFor(std::vector<std::string> dirs, std::string filter = "") {
  LoaderOptions o;
  o.search_path = std::move(dirs);
  o.filter = std::move(filter);
  return o;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(PluginLoader, NameFromFileName) {
  EXPECT_EQ(PluginLoader::NameFromFileName("libferry-tcp.so"), "tcp");
  EXPECT_EQ(PluginLoader::NameFromFileName("libferry-cuda_ipc.so"), "cuda_ipc");
  EXPECT_EQ(PluginLoader::NameFromFileName("libferry-.so"), "");
  EXPECT_EQ(PluginLoader::NameFromFileName("libtcp.so"), "");
  EXPECT_EQ(PluginLoader::NameFromFileName("libferry-tcp.so.1"), "");
}

TEST(PluginLoader, FilterKeepsOrDropsNames) {
  EXPECT_TRUE(PluginLoader::FilterAdmits("", "tcp"));
  EXPECT_TRUE(PluginLoader::FilterAdmits("tcp,shm", "shm"));
  EXPECT_FALSE(PluginLoader::FilterAdmits("tcp,shm", "fabric"));
  EXPECT_FALSE(PluginLoader::FilterAdmits("^shm", "shm"));
  EXPECT_TRUE(PluginLoader::FilterAdmits("^shm", "tcp"));
  EXPECT_FALSE(PluginLoader::FilterAdmits("^shm,tcp", "tcp"));
}

TEST(PluginLoader, LoadsByNameOnceAndRecordsIt) {
  PluginLoader loader(OptionsFor({"/nonexistent-dir", kFixtureDir}));
  auto a = loader.Load("testnull");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a.value()->name(), "testnull");
  EXPECT_EQ(a.value()->version(), "0.0.1-test");
  EXPECT_EQ(a.value()->abi_minor(), static_cast<uint32_t>(FERRY_TRANSPORT_ABI_MINOR));
  auto b = loader.Load("testnull");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.value().get(), b.value().get()) << "a second Load must not reload the file";
  ASSERT_EQ(loader.records().size(), 1u);
  EXPECT_TRUE(loader.records()[0].loaded);
}

TEST(PluginLoader, LoadsByPath) {
  PluginLoader loader(OptionsFor({}));
  auto p = loader.Load(kFixtureDir + "/libferry-testnull.so");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p.value()->name(), "testnull");
}

TEST(PluginLoader, UnknownNameListsTriedAvailableAndClosest) {
  PluginLoader loader(OptionsFor({"/nonexistent-dir", kFixtureDir}));
  auto p = loader.Load("testnul");
  ASSERT_FALSE(p.ok());
  const std::string& m = p.status().message();
  EXPECT_EQ(p.status().code(), FERRY_NOT_FOUND);
  EXPECT_TRUE(Contains(m, "/nonexistent-dir/libferry-testnul.so")) << m;
  EXPECT_TRUE(Contains(m, kFixtureDir + "/libferry-testnul.so")) << m;
  EXPECT_TRUE(Contains(m, "Available: testnull")) << m;
  EXPECT_TRUE(Contains(m, "Did you mean 'testnull'?")) << m;
  EXPECT_TRUE(Contains(m, "FERRY_PLUGIN_PATH")) << m;
}

TEST(PluginLoader, FilteredNameSaysWhy) {
  PluginLoader loader(OptionsFor({kFixtureDir}, "^testnull"));
  auto p = loader.Load("testnull");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(Contains(p.status().message(), "FERRY_TRANSPORTS=^testnull"))
      << p.status().message();
  EXPECT_TRUE(loader.LoadAll().empty());
}

TEST(PluginLoader, MissingFileIsAClearError) {
  PluginLoader loader(OptionsFor({}));
  auto p = loader.Load("./no-such-plugin.so");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(Contains(p.status().message(), "no-such-plugin.so"))
      << p.status().message();
  EXPECT_TRUE(Contains(p.status().message(), "no such file")) << p.status().message();
  ASSERT_EQ(loader.records().size(), 1u);
  EXPECT_FALSE(loader.records()[0].loaded);
}

TEST(PluginLoader, FirstDirectoryShadowsLaterOnes) {
  fs::path dir =
      fs::temp_directory_path() / ("ferry-loader-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(kFixtureDir + "/libferry-testnull.so", dir / "libferry-testnull.so",
                fs::copy_options::overwrite_existing);
  PluginLoader loader(OptionsFor({dir.string(), kFixtureDir}));
  auto all = loader.LoadAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]->path(), (dir / "libferry-testnull.so").string());
  fs::remove_all(dir);
}

TEST(PluginLoader, EnvironmentSetsPathAndFilter) {
  setenv("FERRY_PLUGIN_PATH", ("/first:" + kFixtureDir).c_str(), 1);
  setenv("FERRY_TRANSPORTS", "tcp,testnull", 1);
  LoaderOptions o = LoaderOptions::FromEnvironment();
  unsetenv("FERRY_PLUGIN_PATH");
  unsetenv("FERRY_TRANSPORTS");
  ASSERT_GE(o.search_path.size(), 2u);
  EXPECT_EQ(o.search_path[0], "/first");
  EXPECT_EQ(o.search_path[1], kFixtureDir);
  EXPECT_EQ(o.filter, "tcp,testnull");
}

TEST(Transport, UnusablePluginExplainsWhy) {
  PluginLoader loader(OptionsFor({kFixtureDir}));
  auto p = loader.Load("testnull");
  ASSERT_TRUE(p.ok());
  setenv("FERRY_TESTNULL_FAIL_INIT", "1", 1);
  auto t = Transport::Open(p.value());
  unsetenv("FERRY_TESTNULL_FAIL_INIT");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), FERRY_UNAVAILABLE);
  EXPECT_TRUE(Contains(t.status().message(), "told not to run here"))
      << t.status().message();
}

TEST(Transport, MissingOptionalEntryIsUnimplemented) {
  PluginLoader loader(OptionsFor({kFixtureDir}));
  auto p = loader.Load("testnull");
  ASSERT_TRUE(p.ok());
  auto t = Transport::Open(p.value());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t.value()->Has(FERRY_VT(reg)));
  ferry_reg_args_t args{};
  args.struct_size = sizeof args;
  ferry_mr_t* mr = nullptr;
  Status st = t.value()->Reg(args, &mr);
  EXPECT_EQ(st.code(), FERRY_UNIMPLEMENTED);
  EXPECT_TRUE(Contains(st.message(), "reg")) << st.message();
  EXPECT_EQ(t.value()->domain(), "test-domain");
  // A failing call carries the plugin's own message.
  ferry_listener_t* l = nullptr;
  Status listen = t.value()->Listen("", nullptr, &l);
  EXPECT_EQ(listen.code(), FERRY_UNIMPLEMENTED);
  EXPECT_EQ(listen.message(), "testnull cannot listen");
}

TEST(HostServices, ParamsComeFromSettingsThenEnvironment) {
  const ferry_host_services_t* host = HostServices();
  char buf[64];
  EXPECT_EQ(PluginParamEnvName("tcp", "busy_poll"), "FERRY_TCP_BUSY_POLL");
  unsetenv("FERRY_TESTP_DEPTH");
  EXPECT_EQ(host->get_param(host->host_ctx, "testp", "depth", buf, sizeof buf), -1);
  setenv("FERRY_TESTP_DEPTH", "12", 1);
  EXPECT_EQ(host->get_param(host->host_ctx, "testp", "depth", buf, sizeof buf), 2);
  EXPECT_STREQ(buf, "12");
  SetPluginParam("testp", "depth", "345");
  EXPECT_EQ(ferry_host_param_int(host, "testp", "depth", 0), 345);
  ClearPluginParam("testp", "depth");
  EXPECT_EQ(ferry_host_param_int(host, "testp", "depth", 0), 12);
  unsetenv("FERRY_TESTP_DEPTH");
  EXPECT_EQ(ferry_host_param_int(host, "testp", "depth", 7), 7);
}

TEST(Log, LevelsParse) {
  EXPECT_EQ(log::ParseLevel("error"), FERRY_LOG_ERROR);
  EXPECT_EQ(log::ParseLevel("debug"), FERRY_LOG_DEBUG);
  EXPECT_EQ(log::ParseLevel("4"), FERRY_LOG_TRACE);
  EXPECT_EQ(log::ParseLevel("loud"), -1);
}

}  // namespace
}  // namespace ferry
