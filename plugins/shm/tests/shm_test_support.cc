#include "shm_test_support.h"

#include "testkit/plugin.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace ferry_shm_test {

std::shared_ptr<const ferry::Plugin> LoadShm() {
  auto p = ferry::testkit::LoadPlugin(FERRY_SHM_PLUGIN_DIR, "shm");
  return p.ok() ? p.value() : nullptr;
}

namespace {

ferry::testkit::Endpoint::Options ShmOptions(uint32_t flags) {
  ferry::testkit::Endpoint::Options o;
  o.flags = flags;
  o.instance = "shm-test";
  o.expect_progress_ok = false;
  o.expect_event_messages = false;
  return o;
}

}  // namespace

Endpoint::Endpoint(uint32_t flags)
    : ferry::testkit::Endpoint(LoadShm(), ShmOptions(flags)) {}

std::unique_ptr<Endpoint> Endpoint::Open(uint32_t flags, std::string* why) {
  std::unique_ptr<Endpoint> e(new Endpoint(flags));
  if (e->ok()) return e;
  if (why) {
    *why = e->status().code() == FERRY_NOT_FOUND && LoadShm() == nullptr
               ? "libferry-shm.so not found in " FERRY_SHM_PLUGIN_DIR
               : e->status().ToString();
  }
  return nullptr;
}

std::string Endpoint::Listen(ferry_listener_t** out, const std::string& address) {
  if (!t().Listen(address, nullptr, out).ok()) return "";
  auto a = t().ListenerAddress(*out);
  return a.ok() ? a.value() : "";
}

ferry_conn_t* Endpoint::Connect(const std::string& address, void* user_data) {
  ferry_conn_t* c = nullptr;
  return t().Connect(address, user_data, &c).ok() ? c : nullptr;
}

Status Endpoint::Send(ferry_conn_t* conn, const std::string& header,
                      const std::vector<std::pair<const void*, uint64_t>>& segments,
                      void* user_data) {
  std::vector<ferry_segment_t> segs(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    segs[i].struct_size = sizeof(ferry_segment_t);
    segs[i].data = segments[i].first;
    segs[i].length = segments[i].second;
    segs[i].device = {FERRY_DEVICE_CPU, 0};
  }
  ferry_send_args_t a{};
  a.struct_size = sizeof a;
  a.num_segments = static_cast<uint32_t>(segs.size());
  a.header = header.data();
  a.header_len = header.size();
  a.segments = segs.data();
  a.segment_stride = sizeof(ferry_segment_t);
  a.user_data = user_data;
  return t().Send(conn, a);
}

Status Endpoint::PlaceAll(const Event& arrival, const std::vector<void*>& dests,
                          void* user_data) {
  std::vector<ferry_place_dest_t> d(arrival.segments.size());
  for (size_t i = 0; i < d.size(); ++i) {
    d[i].struct_size = sizeof(ferry_place_dest_t);
    d[i].device = {FERRY_DEVICE_CPU, 0};
    const Event::Segment& s = arrival.segments[i];
    if (s.inline_data != nullptr) {
      if (s.length) std::memcpy(dests[i], s.inline_data, s.length);
    } else {
      d[i].data = dests[i];
      d[i].capacity = s.length;
    }
  }
  ferry_place_args_t a{};
  a.struct_size = sizeof a;
  a.num_dests = static_cast<uint32_t>(d.size());
  a.msg_id = arrival.msg_id;
  a.dests = d.data();
  a.dest_stride = sizeof(ferry_place_dest_t);
  a.user_data = user_data;
  return t().Place(arrival.conn, a);
}

bool PumpUntil(std::initializer_list<ferry::testkit::Endpoint*> eps,
               const std::function<bool()>& done, int timeout_ms) {
  return ferry::testkit::PumpUntil(eps, done, std::chrono::milliseconds(timeout_ms));
}

std::unique_ptr<Child> Child::Spawn(const std::string& exe,
                                    const std::vector<std::string>& args,
                                    const std::vector<std::string>& extra_env) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return nullptr;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
  std::vector<std::string> argv_s = {exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);
  env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(const_cast<char*>(s.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    return nullptr;
  }
  std::unique_ptr<Child> c(new Child());
  c->pid_ = pid;
  c->out_fd_ = p[0];
  return c;
}

Child::~Child() {
  Kill();
  if (out_fd_ >= 0) close(out_fd_);
}

std::string Child::ReadLine(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
            .count());
    pollfd pf{out_fd_, POLLIN, 0};
    if (poll(&pf, 1, left > 0 ? left : 0) <= 0) {
      if (left <= 0) return "";
      continue;
    }
    char buf[512];
    ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return "";
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

void Child::Kill() {
  if (pid_ <= 0 || reaped_) return;
  kill(pid_, SIGKILL);
  int st;
  while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

int Child::Wait(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!reaped_) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (Clock::now() > deadline) return -1;
    // Block until the child's stdout closes (it exits), bounded.
    pollfd pf{out_fd_, POLLIN, 0};
    char buf[256];
    if (poll(&pf, 1, 10) > 0) {
      ssize_t n = read(out_fd_, buf, sizeof buf);
      if (n > 0) buffered_.append(buf, static_cast<size_t>(n));
    }
  }
  return -1;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      out.push_back(e->d_name);
    }
  }
  closedir(d);
  return out;
}

std::vector<void*> ShmMappings() {
  std::vector<void*> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("memfd:ferry-shm") == std::string::npos) continue;
    unsigned long long start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    out.push_back(reinterpret_cast<void*>(start));
  }
  return out;
}

int CountFds() {
  return static_cast<int>(ListDir("/proc/self/fd").size());
}

}  // namespace ferry_shm_test
