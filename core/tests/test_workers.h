// Helpers shared by the core's end-to-end tests (the ones on the public C++
// API): a job name per test, a test worker's options, 1-d tensors, a byte
// pattern, polling a condition with a deadline, and a child process whose
// stdin and stdout are pipes to the test.
#pragma once

#include <ferry/ferry.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry_test {

// "<prefix>.<the running test's name>": each test gets its own job name so
// leftovers never meet.
inline std::string JobName(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return prefix + "." + info->name();
}

// A test worker's options: `transport`, the tests' secret, `peer_timeout`,
// and `default_timeout` (0: the library's default, as if never set).
inline ferry::Worker::Options WorkerOptions(
    const std::string& name, const std::string& job, const std::string& store,
    bool host_store = false, const std::string& transport = "tcp",
    std::chrono::milliseconds peer_timeout = std::chrono::milliseconds(1000),
    std::chrono::milliseconds default_timeout = std::chrono::milliseconds(0)) {
  ferry::Worker::Options o;
  o.name = name;
  o.job = job;
  o.transport = transport;
  o.store = store;
  o.host_store = host_store;
  o.secret = "test-secret";
  o.peer_timeout = peer_timeout;
  o.default_timeout = default_timeout;
  return o;
}

// Polls `pred` (driving nothing itself: the workers' own loops progress)
// until true or `limit`; the condition is what is awaited, not a duration.
template <typename Pred>
bool Eventually(Pred pred,
                std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::yield();
  }
  return pred();
}

// The byte at `i` of a pattern that differs with `seed`.
inline uint8_t Pattern(size_t i, uint8_t seed) {
  return static_cast<uint8_t>((i * 131u + seed) & 0xff);
}

// Describes a dense 1-d tensor of `*shape` elements at `data` in `t`.
inline void SetTensor1D(DLTensor& t, void* data, int64_t* shape, DLDevice device,
                        DLDataType dtype) {
  t.data = data;
  t.device = device;
  t.ndim = 1;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
}

// A 1-d tensor of `data` (of type `dtype`) that claims to live on `device`;
// its memory is host memory whatever the tag. Its deleter adds one to
// `*deleted`, then frees it.
template <typename T>
DLManagedTensor* VectorTensor(std::vector<T> data, DLDevice device, DLDataType dtype,
                              std::atomic<int>* deleted) {
  struct Holder {
    DLManagedTensor t;
    std::vector<T> data;
    int64_t shape[1];
    std::atomic<int>* deleted;
  };
  auto* h = new Holder();
  h->data = std::move(data);
  h->deleted = deleted;
  h->shape[0] = static_cast<int64_t>(h->data.size());
  SetTensor1D(h->t.dl_tensor, h->data.data(), h->shape, device, dtype);
  h->t.manager_ctx = h;
  h->t.deleter = [](DLManagedTensor* self) {
    auto* hh = static_cast<Holder*>(self->manager_ctx);
    hh->deleted->fetch_add(1);
    delete hh;
  };
  return &h->t;
}

// Starts `path` with `args` (argv[0] first) and environment `envp`, its
// stdin and stdout pipes to this process: `*to_stdin` (write end) and
// `*from_stdout` (read end). Aborts where it cannot.
inline pid_t SpawnPiped(const char* path, std::vector<std::string> args,
                        char* const* envp, int* to_stdin, int* from_stdout) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) std::abort();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, path, &fa, nullptr, argv.data(), envp) != 0) std::abort();
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  *to_stdin = in[1];
  *from_stdout = out[0];
  return pid;
}

// A port nobody listens on now, for a store whose address the others must
// know before its host's start returns (as torchrun's MASTER_PORT).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::abort();
  }
  close(fd);
  return ntohs(a.sin_port);
}

// The environment for a child worker: `env` (this process's), without
// WORLD_SIZE and RANK (a child's job is what its arguments say), plus
// `extra` ("NAME=value" each).
inline std::vector<std::string> ChildEnvironment(char** env,
                                                 const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = env; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("WORLD_SIZE=", 0) == 0 || kv.rfind("RANK=", 0) == 0) continue;
    out.push_back(kv);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

// Reads `fd` (appending to `*buf`, which keeps what follows) until a line
// starting with one of `prefixes` arrives; returns it, or "" at `limit` or
// EOF.
inline std::string ExpectLine(int fd, std::string* buf,
                              const std::vector<std::string>& prefixes,
                              std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (true) {
    size_t nl;
    while ((nl = buf->find('\n')) != std::string::npos) {
      std::string line = buf->substr(0, nl);
      buf->erase(0, nl + 1);
      for (const auto& p : prefixes) {
        if (line.rfind(p, 0) == 0) return line;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
    char tmp[1024];
    const ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0) return "";
    buf->append(tmp, static_cast<size_t>(n));
  }
}

}  // namespace ferry_test
